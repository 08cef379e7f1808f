"""Replacing the mask of a fallback-path model through its ``attention_mask`` argument, where that is proven.

A fallback-path model (its attention does not route through transformers' ``AttentionInterface``) builds
its attention mask itself, from the ``attention_mask`` it is called with. Many accept a per-query mask
there, but in different forms: BERT-era models turn a 3-D ``(batch, query, key)`` 0/1 mask into an
additive one (``ModuleUtilsMixin.get_extended_attention_mask``), others take a 4-D additive float mask or a
4-D 0/1 mask as it is. Decoders may also combine what they get with their own causal mask.

:func:`mask_support` finds out which form a model takes by a probe: it runs the model on a short text
with a mask that allows an irregular set of keys (some keys after the query, some before it not) in each
candidate form, and accepts the first form under which every layer's eager weights are exactly 0 on the
masked keys, positive on the allowed ones and sum to 1 per row. If none passes, it tries the same
pattern cut to the causal mask: a model that adds its own causal mask can still take masks within it.
The answer is kept on the model (one probe per model).
"""

from __future__ import annotations

import threading

import torch

FORMS = ("3d", "4d_additive", "4d_binary")
_LOCK = threading.Lock()


def as_argument(allowed: torch.Tensor, form: str, dtype: torch.dtype, device) -> torch.Tensor:
    """The ``attention_mask`` argument that means ``allowed`` for a model taking ``form``.

    Args:
        allowed: bool ``(n, n)``, True where query ``i`` may attend key ``j``.
        form: ``3d`` (long ``(1, n, n)`` of 0/1), ``4d_additive`` (``dtype`` ``(1, 1, n, n)``: 0 allowed, the
            dtype's minimum masked) or ``4d_binary`` (long ``(1, 1, n, n)`` of 0/1).
        dtype: the model's compute dtype (for the additive form). device: where the model runs.

    Returns:
        the tensor to pass as ``attention_mask``.
    """
    if form == "3d":
        return allowed[None].long().to(device)
    if form == "4d_binary":
        return allowed[None, None].long().to(device)
    if form == "4d_additive":
        out = torch.zeros(allowed.shape, dtype=dtype)
        out.masked_fill_(~allowed, torch.finfo(dtype).min)
        return out[None, None].to(device)
    raise ValueError(f"unknown mask form {form!r}")


def probe_pattern(n: int, causal: bool) -> torch.Tensor:
    """The probe's mask, bool ``(n, n)``: each query attends itself and an irregular set of other keys
    (``(3 i + 5 j) mod 4 != 0``), keys after it included unless ``causal``."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    allowed = ((3 * i + 5 * j) % 4 != 0) | (i == j)
    return allowed & (j <= i) if causal else allowed


def _obeys(tensors, allowed: torch.Tensor) -> bool:
    """Every (batch, heads, n, n) weight tensor is 0 exactly where ``allowed`` is False, positive where it
    is True, and sums to 1 per row."""
    if not tensors:
        return False
    for t in tensors:
        if t is None or t.dim() != 4 or tuple(t.shape[-2:]) != tuple(allowed.shape):
            return False
        w = t[0].float().cpu()
        if not (w[:, ~allowed] == 0).all() or not (w[:, allowed] > 0).all():
            return False
        if not torch.allclose(w.sum(-1), torch.ones(()), atol=1e-4):
            return False
    return True


def mask_support(loaded) -> tuple[str, str] | None:
    """How ``loaded`` (a fallback-path encoder or decoder) takes a replaced mask, found by a probe once.

    Args:
        loaded: a :class:`models.loading.LoadedModel` on the fallback path.

    Returns:
        ``(form, scope)``: ``form`` for :func:`as_argument`; ``scope`` is ``any`` (every mask is applied as
        given) or ``causal`` (the model combines it with its own causal mask: only masks within the causal
        mask are applied as given). None when no form passes the probe (the mask cannot be replaced).
    """
    with _LOCK:
        if "fallback_mask" in loaded.probes:
            return loaded.probes["fallback_mask"]
    from .loading import _attention_tuples, _probe_inputs

    answer = None
    if loaded.family in ("encoder", "decoder"):
        inputs = _probe_inputs(loaded)
        ids = loaded.tokenizer("the cat chased the mouse and the dog", return_tensors="pt")["input_ids"][:, :12]
        inputs["input_ids"] = ids.to(loaded.device)
        n = ids.shape[1]
        for causal in (False, True):
            allowed = probe_pattern(n, causal)
            for form in FORMS:
                try:
                    with torch.no_grad():
                        out = loaded.model(**inputs, attention_mask=as_argument(allowed, form, loaded.dtype, loaded.device),
                                           output_attentions=True, return_dict=True)
                except Exception:  # noqa: BLE001 - a form the model's code does not take
                    continue
                tensors = next(iter(_attention_tuples(out, loaded.family, loaded.model.config).values()), None)
                if _obeys(tensors, allowed):
                    answer = (form, "causal" if causal else "any")
                    break
            if answer:
                break
    with _LOCK:
        loaded.probes["fallback_mask"] = answer
    return answer
