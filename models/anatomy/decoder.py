"""A decoder must be causal: the load-time checks. An encoder-decoder's decoder (:func:`decoder_call`: the
arguments that make it so, else refused); a decoder-only model's next-token readout (:func:`readout_sees_target`:
a model whose prediction at a position depends on later tokens keeps its maps but has no next-token readout)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import NoAttentionWeightsError
from ..sites.inputs import accepts, probe_inputs

if TYPE_CHECKING:
    from ..loading.model import LoadedModel


def decoder_call(loaded: LoadedModel, probed=None) -> dict:
    """An encoder-decoder's decoder must be causal: with the whole target as input (teacher forcing), a
    position's output may not depend on later target tokens. Probed by changing the last decoder token and
    comparing the outputs before it; a model whose decoder is causal only without a key/value cache (FSMT
    makes its causal mask only then) is run with ``use_cache=False``, the way it trains.

    Args:
        loaded: the model. probed: the load-time probe pass' output on :func:`probe_inputs`, if at hand: its
            ``encoder_last_hidden_state`` spares a speech model's encoder pass.

    Returns:
        ``{}``, or ``{"use_cache": False}``.

    Raises:
        NoAttentionWeightsError: the decoder is not causal either way (its maps would let a token see the
            tokens it is to predict).
    """
    if loaded.family != "encoder-decoder":
        return {}
    inputs = probe_inputs(loaded)
    start = inputs["decoder_input_ids"][0, 0]
    vocab = int(getattr(loaded.model.get_output_embeddings(), "out_features", 0) or 0) or 8
    a = torch.tensor([[int(start), (int(start) + 1) % vocab, (int(start) + 2) % vocab]], dtype=start.dtype,
                     device=start.device)
    b = a.clone()
    b[0, -1] = (int(start) + 3) % vocab
    fast = _with_encoder_outputs(loaded, inputs, probed)  # the encoder runs at most once, not once per pass
    try:
        found = _causal_with(loaded, fast, a, b)
    except Exception:  # noqa: BLE001 - a model that wants its own encoder input after all: run it whole
        if fast is inputs:
            raise
        found = _causal_with(loaded, inputs, a, b)
    if found is not None:
        return found
    raise NoAttentionWeightsError(
        f"Model '{loaded.name}' ({loaded.model.config.model_type}): its decoder is not causal (a target token's "
        "output depends on later target tokens), so its maps would show tokens attending the tokens they are "
        "to predict.",
        code="decoder_not_causal", model=loaded.name, model_type=loaded.model.config.model_type)


def _causal_with(loaded: LoadedModel, inputs: dict, a: torch.Tensor, b: torch.Tensor) -> dict | None:
    """The extra arguments (``{}`` or ``{"use_cache": False}``) under which the outputs before the last target
    token are the same for targets ``a`` and ``b`` (which differ only there), or None when neither does."""
    for extra in ({}, {"use_cache": False}):
        if extra and not accepts(loaded.model, "use_cache"):
            break
        outs = []
        with torch.no_grad():
            for ids in (a, b):
                out = loaded.model(**dict(inputs, decoder_input_ids=ids.to(loaded.device)), return_dict=True, **extra)
                outs.append(out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state)
        if torch.allclose(outs[0][:, :-1], outs[1][:, :-1], atol=1e-6, rtol=1e-5):
            return extra
    return None


def _with_encoder_outputs(loaded: LoadedModel, inputs: dict, probed=None) -> dict:
    """A speech model's ``inputs`` with the encoder's output computed once (``encoder_outputs=``, in place of
    the audio features), so each decoder pass of the check skips the encoder: Whisper's encoder reads 30 s of
    audio (1,500 frames) whatever the decoder does. A text model's inputs as they are: its probe text is 8 tokens,
    and some build their decoder's causal mask from ``input_ids`` (FSMT), so the check runs the call an analysis
    makes."""
    get = getattr(loaded.model, "get_encoder", None)
    name = next((k for k in inputs if k != "decoder_input_ids"), None)  # what the encoder reads
    if name in (None, "input_ids") or get is None or not accepts(loaded.model, "encoder_outputs"):
        return inputs
    known = getattr(probed, "encoder_last_hidden_state", None)
    if isinstance(known, torch.Tensor):  # the probe pass ran the encoder on these very inputs
        return {**{k: v for k, v in inputs.items() if k != name}, "encoder_outputs": (known,)}
    try:
        with torch.no_grad():
            encoded = get()(**{name: inputs[name]}, return_dict=True)
    except Exception:  # noqa: BLE001 - an encoder that cannot run alone: the decoder passes run it
        return inputs
    return {**{k: v for k, v in inputs.items() if k != name}, "encoder_outputs": encoded}


def readout_sees_target(loaded: LoadedModel) -> bool:
    """Whether a decoder-only model's next-token readout sees the token it predicts: its logits before the last
    position change when only the last token changes. XLNet's language-model head is one (issue 47: without a
    permutation mask every position attends every other, so "the next token" at position i reads token i + 1).
    Such a model keeps its attention maps, which are its own, and loses the readout: ``loaded.head`` becomes
    ``"none"`` with a ``readout_sees_target`` note (:func:`models.load` does it). A model that is not a decoder
    with a next-token head is not run (False).

    Returns:
        True when the readout sees later tokens (then ``loaded`` is changed as above).
    """
    if loaded.family != "decoder" or loaded.head != "lm":
        return False
    inputs = probe_inputs(loaded)
    vocab = int(getattr(loaded.model.get_output_embeddings(), "out_features", 0) or 0) or 8
    a = torch.tensor([[7 % vocab, 8 % vocab, 9 % vocab, 10 % vocab]], device=loaded.device)
    b = a.clone()
    b[0, -1] = 11 % vocab
    outs = []
    with torch.no_grad():
        for ids in (a, b):
            out = loaded.model(**dict(inputs, input_ids=ids), return_dict=True)
            outs.append(out.logits.float())
    if torch.allclose(outs[0][:, :-1], outs[1][:, :-1], atol=1e-5, rtol=1e-4):
        return False
    loaded.head = "none"
    loaded.notes.append({"code": "readout_sees_target", "message": (
        "Its prediction at a position depends on later tokens (the token it would predict among them), so no "
        "next-token prediction is shown; its attention maps are its own.")})
    return True
