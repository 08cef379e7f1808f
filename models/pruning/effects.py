"""What switching heads off does to what a model produces: greedy continuations, sentence embeddings and
the ranking of sentences by similarity."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from .. import checks
from .. import capture
from ..errors import EmptyTextError, InvalidArgumentError, UnsupportedOperationError
from ..loading.model import LoadedModel
from .core import _last_hidden, _limit, _texts, check_heads, hidden_kwargs


# --------------------------------------------------------------------------------------------------
# What a pruned model does: continuation, embeddings, similarity ranking
# --------------------------------------------------------------------------------------------------


def _gates_for(loaded: LoadedModel, heads_off: Iterable) -> dict:
    heads_off = check_heads(loaded, heads_off)
    gates: dict[tuple[str, int], torch.Tensor] = {}
    for stack, layer, head in heads_off:
        n_heads = loaded.stacks[stack][1]
        gate = gates.setdefault((stack, layer), torch.ones(n_heads, dtype=loaded.dtype, device=loaded.device))
        gate[head] = 0.0
    return gates


@dataclass
class Continuation:
    """A greedy continuation.

    Attributes:
        text: the generated text only (decoded, without the prompt).
        ids: int64 ``(new_tokens,)`` generated token ids. tokens: each id decoded alone.
    """

    text: str
    ids: np.ndarray
    tokens: list[str] = field(default_factory=list)


@checks.needs_model
def greedy_continuation(loaded: LoadedModel, text: str, heads_off: Iterable = (), *, max_new_tokens: int = 10,
                        max_tokens: int | None = None) -> Continuation:
    """Greedy (argmax) continuation of ``text`` by a decoder with ``heads_off`` switched off at every
    step (the gates are per layer, so they apply to every generated position).

    Args:
        max_new_tokens: tokens to generate (generation may stop earlier at EOS).
        max_tokens: the prompt is cut to ``max_tokens - max_new_tokens`` tokens (at least 1).

    Returns:
        :class:`Continuation`.

    Raises:
        UnsupportedOperationError: not a decoder with an LM head, or heads that cannot be switched off
            on the fallback path. InvalidHeadError, EmptyTextError.
        InvalidArgumentError: ``max_new_tokens`` not in ``[1, max_positions - 1]``, a bad ``max_tokens``.
        ModelOutOfMemoryError: the generation ran out of memory (:func:`models.capture.rerun`).
    """
    if loaded.head != "lm":
        raise UnsupportedOperationError(f"'{loaded.name}' is not a decoder with a language-model head: it cannot "
                                        "continue text.",
                                        code="cannot_continue", model=loaded.name)
    text = checks.text(text, "prompt")
    gates = _gates_for(loaded, heads_off)
    tok = loaded.tokenizer
    limit = _limit(loaded, max_tokens)
    max_new_tokens = checks.whole("max_new_tokens", max_new_tokens, 1, max(1, loaded.max_positions - 1))
    ids = torch.tensor([tok(text, truncation=True, max_length=max(1, limit - max_new_tokens))["input_ids"]],
                       device=loaded.device)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with capture.rerun(loaded, gates=gates):
        out = loaded.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                    do_sample=False, num_beams=1, pad_token_id=pad)
    new = out[0, ids.shape[1]:].cpu()
    return Continuation(text=_decode_continuation(tok, ids[0].cpu(), new), ids=new.numpy().astype(np.int64),
                        tokens=[tok.decode([int(i)]) for i in new])


def _decode_continuation(tok, prompt_ids: torch.Tensor, new_ids: torch.Tensor) -> str:
    """The continuation's text: prompt and continuation decoded together, minus the prompt's own text, so a
    character whose bytes span byte-level tokens (Turkish "ı" is two bytes) comes out whole; a character the
    last generated token leaves unfinished (its remaining bytes were never generated) is dropped rather than
    shown as U+FFFD."""
    prompt = tok.decode(prompt_ids, skip_special_tokens=True)
    both = tok.decode(torch.cat([prompt_ids, new_ids]), skip_special_tokens=True)
    text = both[len(prompt):] if both.startswith(prompt) else tok.decode(new_ids, skip_special_tokens=True)
    return text.rstrip("\ufffd")


@checks.needs_model
def embed(loaded: LoadedModel, texts: str | Sequence[str], heads_off: Iterable = (), *,
          max_tokens: int | None = None) -> np.ndarray:
    """Mean-pooled sentence embeddings (as ``Analysis.embedding``) with ``heads_off`` switched off.

    Each text runs alone (no padding), so row ``i`` equals ``analyze(loaded, texts[i],
    heads_off=heads_off).embedding``.

    Returns:
        float32 ``(len(texts), hidden)``, mean of the last hidden states over all tokens (special tokens
        included), not normalised (Reimers & Gurevych 2019, §3, MEAN pooling).

    Raises:
        UnsupportedOperationError: an encoder-decoder (this includes the Whisper speech model), or heads
            that cannot be switched off on the fallback path.
        EmptyTextError: no texts, or an empty one. InvalidHeadError: bad ``heads_off``.
        ModelOutOfMemoryError: a pass ran out of memory (:func:`models.capture.rerun`).
    """
    texts = _texts(texts)
    gates = _gates_for(loaded, heads_off)
    rows = []
    for text in texts:
        inputs = _plain_inputs(loaded, text, max_tokens)
        with capture.rerun(loaded, gates=gates):
            # Models with a head return logits: ask for the hidden states to pool the last one.
            outputs = loaded.model(**inputs, output_hidden_states=loaded.head != "none" or bool(hidden_kwargs(loaded)),
                                   return_dict=True)
        rows.append(_last_hidden(outputs)[0].float().mean(dim=0).cpu().numpy())
    return np.stack(rows).astype(np.float32)


def _plain_inputs(loaded: LoadedModel, text: str, max_tokens: int | None) -> dict:
    if not isinstance(text, str) or not text.strip():
        raise EmptyTextError("The text is empty.", code="empty_text")
    if loaded.family == "encoder-decoder":
        raise UnsupportedOperationError(f"Sentence embeddings are not defined for '{loaded.name}' (encoder-decoder).",
                                        code="no_sentence_embedding", model=loaded.name)
    enc = loaded.tokenizer(text, truncation=True, max_length=_limit(loaded, max_tokens))
    inputs = {"input_ids": torch.tensor([enc["input_ids"]], device=loaded.device)}
    if "token_type_ids" in enc and loaded.family == "encoder":
        inputs["token_type_ids"] = torch.tensor([enc["token_type_ids"]], device=loaded.device)
    return inputs


def _broadcasts(first: tuple, second: tuple) -> bool:
    try:
        np.broadcast_shapes(first, second)
    except ValueError:
        return False
    return True


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity ``a·b / (‖a‖ ‖b‖)`` along the last axis (float64; 0 where a norm is 0).

    The similarity Sentence-BERT compares mean-pooled embeddings with (Reimers & Gurevych 2019).

    Args:
        a, b: float ``(..., d)``, broadcastable against each other.

    Returns:
        float64 ``(...)`` in [-1, 1].

    Raises:
        InvalidArgumentError: not numeric arrays, not finite, or shapes that do not broadcast.
    """
    a = checks.array("a", a, finite=True, shape="(..., d)")
    b = checks.array("b", b, finite=True, shape="(..., d)")
    if a.ndim < 1 or b.ndim < 1 or not _broadcasts(a.shape, b.shape):
        raise InvalidArgumentError(f"a {a.shape} and b {b.shape} must be (..., d) arrays that broadcast.",
                                   code="arg_same_shape", name="a and b", shape="(..., d)", first=str(a.shape),
                                   second=str(b.shape))
    denom = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    dots = (a * b).sum(-1)
    return np.divide(dots, denom, out=np.zeros_like(dots, dtype=np.float64), where=denom > 0)


@dataclass
class Ranking:
    """Sentences ranked by cosine similarity to a query.

    Attributes:
        order: int ``(n,)`` indices into ``texts``, most similar first.
        similarity: float64 ``(n,)`` cosine similarity of each text (in ``texts`` order) to the query.
        texts: the candidate sentences.
    """

    order: np.ndarray
    similarity: np.ndarray
    texts: list[str]

    def rank_of(self, text: str) -> int | None:
        """1-based rank of ``text`` (None if absent)."""
        for pos, i in enumerate(self.order):
            if self.texts[i] == text:
                return pos + 1
        return None


@checks.needs_model
def rank_sentences(loaded: LoadedModel, query: str, texts: Sequence[str], heads_off: Iterable = (), *,
                   max_tokens: int | None = None) -> Ranking:
    """Rank ``texts`` by cosine similarity of their embeddings to ``query``'s, all embedded by the model
    with ``heads_off`` switched off (semantic search as in Reimers & Gurevych 2019).

    Returns:
        :class:`Ranking` (ties keep the order of ``texts``).

    Raises:
        EmptyTextError, InvalidHeadError, UnsupportedOperationError: as :func:`embed`.
        InvalidArgumentError: ``texts`` not a list of at least one text.
    """
    texts = checks.texts(texts)
    embs = embed(loaded, [query] + texts, heads_off, max_tokens=max_tokens)
    sims = cosine(embs[1:], embs[0][None, :])
    return Ranking(order=np.argsort(-sims, kind="stable"), similarity=sims, texts=texts)
