"""What an analysis keeps of the model's outputs: next-token (or masked-token) top-k, logits, loss, hidden
states; and the greedy continuation an encoder-decoder analyses when no target is given."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ..errors import UnsupportedOperationError
from ..loading.model import LoadedModel
from ..sites.inputs import accepts as _accepts

from .result import Analysis, TopK  # noqa: F401  (models.analysis.outputs.TopK as before)

# Logits of a long input are never held whole (vocabulary x positions float32): above this many bytes the
# prediction head runs on blocks of positions.
LOGITS_BYTES = 256 << 20


def topk(logits: torch.Tensor, k: int, tokenizer, cache: dict[int, str] | None = None) -> TopK:
    """Top-``k`` of ``softmax(logits)`` per row; ``cache`` maps ids already decoded to their text."""
    probs = torch.softmax(logits.float(), dim=-1)
    values, ids = probs.topk(min(k, probs.shape[-1]), dim=-1)
    ids_np = ids.cpu().numpy()
    # decode each distinct id once
    cache = {} if cache is None else cache
    texts = []
    for row in ids_np:
        out = []
        for i in row.tolist():
            if i not in cache:
                cache[i] = tokenizer.decode([i])
            out.append(cache[i])
        texts.append(out)
    return TopK(ids=ids_np.astype(np.int64), probs=values.cpu().numpy().astype(np.float32), tokens=texts)


def lm_blocks(model: LoadedModel, n: int, keep_logits: bool) -> bool:
    """True when a causal LM's logits for ``n`` positions would exceed ``LOGITS_BYTES`` and the head can
    run on blocks of positions (the model takes ``logits_to_keep`` and the caller did not ask for them)."""
    if model.head != "lm" or keep_logits:
        return False
    vocab = getattr(model.model.get_output_embeddings(), "out_features", None) or 0
    return n * vocab * 4 > LOGITS_BYTES and _accepts(model.model, "logits_to_keep")


def generate_target(model: LoadedModel, inputs: dict) -> str:
    """An encoder-decoder's greedy output (at most 32 tokens) for ``inputs``, as text ("." when empty)."""
    with torch.no_grad():
        out = model.model.generate(**inputs, max_new_tokens=32, do_sample=False, num_beams=1,
                                   decoder_start_token_id=model.decoder_start_id)
    return model.tokenizer.decode(out[0], skip_special_tokens=True).strip() or "."


def collect_hidden(model: LoadedModel, outputs) -> dict[str, np.ndarray]:
    out = {}
    pairs = ((("encoder", "encoder_hidden_states"), ("decoder", "decoder_hidden_states"))
             if model.family == "encoder-decoder"
             else ((("decoder" if model.family == "decoder" else "encoder"), "hidden_states"),))
    for stack, attr in pairs:
        hs = getattr(outputs, attr, None)
        if hs:
            out[stack] = torch.stack([h[0] for h in hs]).float().cpu().numpy()
    return out


def _head_blocks(model: LoadedModel, hidden: torch.Tensor, last_logits: torch.Tensor,
                 rows: int) -> Iterator[torch.Tensor]:
    """A causal LM's logits block by block from its final hidden states ``(n, hidden)``: the output
    embedding, then the family's final soft-capping (Gemma 2/3: ``cap · tanh(logits / cap)``) when the
    config has one.

    Checked against the model's own logits at the last position (``last_logits``, from
    ``logits_to_keep=1``): a family whose head does anything else fails the check.

    Raises:
        UnsupportedOperationError: the blocks do not reproduce the model's own logits.
    """
    head = model.model.get_output_embeddings()
    cfg = model.text_config
    cap = getattr(cfg, "final_logit_softcapping", None)

    def block(h: torch.Tensor) -> torch.Tensor:
        out = head(h)
        return torch.tanh(out / cap) * cap if cap else out

    mine = block(hidden[-1:])[0].float()
    if not torch.allclose(mine, last_logits.float(), rtol=1e-4, atol=1e-4):
        raise UnsupportedOperationError(
            f"Model '{model.name}': its prediction head is not output embedding + soft-capping, so a long input's "
            "logits cannot be computed in blocks; analyse a shorter text or pass keep_logits=True.",
            code="logits_in_blocks", model=model.name
        )
    for b0 in range(0, hidden.shape[0], rows):
        yield block(hidden[b0:b0 + rows])


def fill_outputs(model: LoadedModel, result: Analysis, outputs, input_ids, labels, top_k: int, keep_logits: bool,
                  last_hidden: torch.Tensor | None = None) -> None:
    tok = model.tokenizer
    if model.head == "lm" and last_hidden is not None:
        # long input: logits of blocks of positions, never all at once
        n = input_ids.shape[1]
        vocab = outputs.logits.shape[-1]
        rows = max(1, LOGITS_BYTES // 8 // (vocab * 4))
        cache: dict[int, str] = {}
        parts, loss_sum = [], 0.0
        with torch.no_grad():
            for b0, logits in zip(range(0, n, rows), _head_blocks(model, last_hidden[0], outputs.logits[0, -1], rows)):
                parts.append(topk(logits, top_k, tok, cache))
                targets = input_ids[0, b0 + 1:b0 + 1 + logits.shape[0]]
                if targets.numel():
                    loss_sum += float(torch.nn.functional.cross_entropy(
                        logits[:targets.numel()].float(), targets, reduction="sum"))
        result.next_token = TopK(ids=np.concatenate([p.ids for p in parts]),
                                 probs=np.concatenate([p.probs for p in parts]),
                                 tokens=[row for p in parts for row in p.tokens])
        result.loss = loss_sum / (n - 1) if n > 1 else None
    elif model.head in ("lm", "seq2seq"):
        logits = outputs.logits[0]
        result.next_token = topk(logits, top_k, tok)
        if model.head == "lm":
            if logits.shape[0] > 1:
                loss = torch.nn.functional.cross_entropy(logits[:-1].float(), input_ids[0, 1:])
                result.loss = float(loss)
        else:
            result.loss = float(torch.nn.functional.cross_entropy(logits.float(), labels[0]))
        if keep_logits:
            result.logits = logits.float().cpu().numpy()
    elif model.head == "mlm":
        logits = outputs.logits[0]
        mask_id = tok.mask_token_id
        if mask_id is not None:
            for i in (input_ids[0] == mask_id).nonzero().flatten().tolist():
                result.mask_fills[i] = topk(logits[i : i + 1], top_k, tok)
        if keep_logits:
            result.logits = logits.float().cpu().numpy()
    elif getattr(outputs, "last_hidden_state", None) is not None or getattr(outputs, "hidden_states", None):
        last = (outputs.last_hidden_state[0] if getattr(outputs, "last_hidden_state", None) is not None
                else outputs.hidden_states[-1][0])
        result.embedding = last.float().mean(dim=0).cpu().numpy()
    # else: a language-model class whose readout was taken away (models.anatomy.decoder.readout_sees_target): no
    # prediction and no embedding, only its maps
