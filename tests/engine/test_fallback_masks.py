"""Replaced masks on the fallback path: applied through the model's own attention_mask or at its attention
modules' softmax where a probe proves it, refused with the reason elsewhere (models.capture.softmax)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import archsweep  # noqa: E402

import models  # noqa: E402
from conftest import TEST_DEVICE, TEST_DTYPE  # noqa: E402
from models.capture import softmax as fallback_masks  # noqa: E402

TEXT = "the cat chased the mouse and the dog"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    made = {}

    def get(model_type: str):
        if model_type not in made:
            folder = tmp_path_factory.mktemp(model_type) / model_type
            archsweep.build(model_type, folder)
            made[model_type] = models.load(str(folder), device=TEST_DEVICE, dtype=TEST_DTYPE)
        return made[model_type]

    return get


def _restricted(weights: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The native weights restricted to the allowed keys, each row renormalised: what a replaced mask gives
    in the first layer (its input does not depend on any mask)."""
    w = weights * allowed
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("model_type,mask,form", [
    ("mpnet", "custom", "argument"), ("falcon", "bidirectional", "argument"), ("xglm", "sliding_window:2", "argument"),
    # at the softmax: BLOOM (ALiBi, its own causal mask), DeBERTa (disentangled attention), XLNet (two-stream
    # relative attention, (batch, heads, i, j)), OpenAI-GPT
    ("bloom", "sliding_window:2", "softmax"), ("deberta", "custom", "softmax"), ("xlnet", "custom", "softmax"),
    ("openai-gpt", "strided:2", "softmax")])
def test_a_probed_model_takes_the_replaced_mask(tiny, model_type, mask, form):
    """First layer under a replaced mask = the native first layer restricted to the allowed keys and
    renormalised (softmax over fewer keys), exactly 0 elsewhere; later layers differ from native; a.masks
    lists the mask."""
    loaded = tiny(model_type)
    assert loaded.capture_path == "fallback"
    got_form = fallback_masks.mask_support(loaded).form
    assert got_form in fallback_masks.FORMS if form == "argument" else got_form == form
    native = models.analyze(loaded, TEXT)
    n = len(native.tokens)
    stack = next(iter(native.attentions))
    if mask == "custom":
        mask = fallback_masks.probe_pattern(n, causal=False).numpy() & ~np.eye(n, k=1, dtype=bool)
        allowed = mask
    else:
        allowed = models.masks.parse_mask(mask).matrix(n)
    replaced = models.analyze(loaded, TEXT, mask=mask)
    got = np.asarray(replaced.attentions[stack])
    assert (got[:, :, ~allowed] == 0).all()
    assert (got[:, :, allowed] > 0).all()  # keys after the query too, where the mask allows them (falcon)
    np.testing.assert_allclose(got.sum(-1), 1, atol=1e-5)
    first = np.asarray(native.attentions[stack])[0]
    if not (allowed & (first[0] == 0)).any():  # within the native mask: the first layer is its restriction
        np.testing.assert_allclose(got[0], _restricted(first, allowed), atol=1e-6)
    assert not np.allclose(got[-1], np.asarray(native.attentions[stack])[-1], atol=1e-3)
    np.testing.assert_array_equal(np.asarray(replaced.masks[stack]),
                                  np.broadcast_to(allowed, got.shape[:1] + allowed.shape))
    assert native.masks == {}  # the native mask of a fallback model is its own business


def test_a_model_whose_weights_follow_no_mask_refuses(tiny):
    """Reformer (LSH / chunked local attention): neither its attention_mask argument nor a softmax over
    (n, n) scores takes a per-query mask: refused, and the native analysis still works."""
    loaded = tiny("reformer")
    assert fallback_masks.mask_support(loaded) is None
    with pytest.raises(models.UnsupportedOperationError, match="neither through its attention_mask argument nor"):
        models.analyze(loaded, TEXT, mask="causal")
    a = models.analyze(loaded, TEXT)
    assert np.asarray(a.attentions[next(iter(a.attentions))]).sum(-1).min() > 0.999


def test_a_decoder_at_the_softmax_keeps_its_own_causal_mask(tiny):
    """BLOOM adds its causal mask before the softmax: masks within it apply, a bidirectional one is refused
    (it would come back causal)."""
    loaded = tiny("bloom")
    assert fallback_masks.mask_support(loaded).scopes == {"decoder": "causal"}
    with pytest.raises(models.UnsupportedOperationError, match="only masks within the causal mask"):
        models.analyze(loaded, TEXT, mask="bidirectional")


def test_the_softmax_form_touches_nothing_outside_its_context(tiny):
    """After the probe installed its hooks, native analyses are bit-identical to before, and an analysis with
    a mask in one thread does not mask another thread's analysis of the same model."""
    import threading

    loaded = tiny("deberta")
    loaded.probes.pop("fallback_mask", None)
    before = np.asarray(models.analyze(loaded, TEXT, keep_logits=True).logits)
    assert fallback_masks.mask_support(loaded).form == "softmax"
    np.testing.assert_array_equal(np.asarray(models.analyze(loaded, TEXT, keep_logits=True).logits), before)
    n = len(models.analyze(loaded, TEXT).tokens)
    got = {}

    def run(name, mask):
        for _ in range(5):
            got.setdefault(name, []).append(np.asarray(models.analyze(loaded, TEXT, mask=mask).attentions["encoder"]))

    threads = [threading.Thread(target=run, args=("diag", np.eye(n, dtype=bool))),
               threading.Thread(target=run, args=("native", "native"))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(np.array_equal(w, np.broadcast_to(np.eye(n), w.shape)) for w in got["diag"])
    assert all((w > 0).all() for w in got["native"])


def test_an_encoder_decoder_takes_a_mask_per_stack_at_the_softmax(tiny):
    """FSMT: the encoder takes any mask, the decoder masks within its causal mask; cross-attention untouched."""
    loaded = tiny("fsmt")
    support = fallback_masks.mask_support(loaded)
    assert support.form == "softmax" and support.scopes == {"encoder": "any", "decoder": "causal"}
    native = models.analyze(loaded, TEXT, target="the cat")
    n, m = len(native.tokens), len(native.target_tokens)
    enc = fallback_masks.probe_pattern(n, causal=False).numpy()
    dec = np.eye(m, dtype=bool)
    a = models.analyze(loaded, TEXT, target="the cat", mask={"encoder": enc, "decoder": dec})
    w = np.asarray(a.attentions["encoder"])
    assert (w[:, :, ~enc] == 0).all() and (w[:, :, enc] > 0).all()
    np.testing.assert_allclose(np.asarray(a.attentions["decoder"]),
                               np.broadcast_to(np.eye(m), a.attentions["decoder"].shape), atol=1e-7)
    np.testing.assert_allclose(np.asarray(a.attentions["cross"]).sum(-1), 1, atol=1e-5)


def test_a_query_without_keys_gets_zero_weights_at_the_softmax(tiny):
    """At the softmax a row with no allowed key is all zeros (as on the interface path), never NaN."""
    loaded = tiny("deberta")
    n = len(models.analyze(loaded, TEXT).tokens)
    mask = np.ones((n, n), dtype=bool)
    mask[2] = False
    w = np.asarray(models.analyze(loaded, TEXT, mask=mask).attentions["encoder"])
    assert not np.isnan(w).any() and (w[:, :, 2] == 0).all()
    np.testing.assert_allclose(np.delete(w, 2, axis=2).sum(-1), 1, atol=1e-5)


def test_a_query_without_keys_is_refused_on_the_fallback_path(tiny):
    """An additive mask cannot give a row zero weights (softmax of equal minima is uniform): refused."""
    loaded = tiny("mpnet")
    n = len(models.analyze(loaded, TEXT).tokens)
    mask = np.ones((n, n), dtype=bool)
    mask[2] = False
    with pytest.raises(models.UnsupportedOperationError, match="allows no key"):
        models.analyze(loaded, TEXT, mask=mask)


def test_the_probe_runs_once_per_model(tiny, monkeypatch):
    loaded = tiny("mpnet")
    fallback_masks.mask_support(loaded)
    calls = []
    monkeypatch.setattr(loaded.model, "forward", lambda *a, **k: calls.append(1))
    assert fallback_masks.mask_support(loaded) == loaded.probes["fallback_mask"]
    assert calls == []


def test_the_causal_scope_refuses_masks_above_the_diagonal():
    """A model that adds its own causal mask ("causal" scope) takes masks within it and refuses the rest."""
    from models.analysis.masks import check_fallback_masks

    class Fake:
        name, family, capture_path = "fake", "decoder", "fallback"
        stacks, fallback_stacks = {"decoder": (2, 2)}, ()
        probes = {"fallback_mask": fallback_masks.MaskSupport("4d_additive", {"decoder": "causal"})}

    check_fallback_masks(Fake(), {"decoder": torch.ones(4, 4, dtype=torch.bool).tril()})
    with pytest.raises(models.UnsupportedOperationError, match="only masks within the causal mask"):
        check_fallback_masks(Fake(), {"decoder": torch.ones(4, 4, dtype=torch.bool)})


@pytest.mark.parametrize("form", fallback_masks.FORMS)
def test_argument_forms(form):
    allowed = torch.tensor([[True, False], [True, True]])
    arg = fallback_masks.as_argument(allowed, form, torch.float32, "cpu")
    if form == "4d_additive":
        assert arg.shape == (1, 1, 2, 2) and arg[0, 0, 0, 1] == torch.finfo(torch.float32).min and arg[0, 0, 1, 0] == 0
    else:
        assert arg.shape == ((1, 2, 2) if form == "3d" else (1, 1, 2, 2))
        assert arg.flatten().tolist() == [1, 0, 1, 1]


@pytest.mark.parametrize("model_type", ["deberta", "bloom", "fsmt"])
def test_heads_off_at_the_softmax_equal_heads_off_at_the_output_projection(tiny, model_type, monkeypatch, tmp_path):
    """A layer without a proven output projection switches heads off at its softmax (weights times the
    gate). On models where the projection is proven, doing it at the softmax instead (the projection search
    disabled) gives the same logits as zeroing the head's slice of the projection's input; the map of a
    switched-off head is its weights before the gate, as on the interface path."""
    from models.anatomy import probe

    by_proj = tiny(model_type)
    stack = "encoder" if by_proj.family != "decoder" else "decoder"
    assert all(s.o_proj and s.gate == "o_proj" for s in by_proj.sites if s.stack == stack)
    monkeypatch.setattr(probe, "find_out_projs", lambda *a, **k: {})
    archsweep.build(model_type, tmp_path / model_type)
    by_softmax = models.load(str(tmp_path / model_type), device=TEST_DEVICE, dtype=TEST_DTYPE)
    assert all(s.gate == "softmax" and not s.o_proj for s in by_softmax.sites)
    off = [(stack, 0, 1), (stack, 1, 0)] + ([("cross", 1, 1)] if by_proj.family == "encoder-decoder" else [])
    kw = dict(target="the cat") if by_proj.family == "encoder-decoder" else {}
    native = models.analyze(by_softmax, TEXT, keep_logits=True, **kw)
    a = models.analyze(by_proj, TEXT, heads_off=off, keep_logits=True, **kw)
    b = models.analyze(by_softmax, TEXT, heads_off=off, keep_logits=True, **kw)
    np.testing.assert_allclose(b.logits, a.logits, atol=1e-5)
    assert not np.allclose(b.logits, native.logits, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(b.attentions[stack])[0], np.asarray(native.attentions[stack])[0])
    np.testing.assert_allclose(np.asarray(b.attentions[stack]), np.asarray(a.attentions[stack]), atol=1e-6)
    back = models.analyze(by_softmax, TEXT, keep_logits=True, **kw)
    np.testing.assert_array_equal(back.logits, native.logits)


def test_scores_returned_before_the_softmax_are_read_at_the_softmax(tiny):
    """SqueezeBERT returns its attention scores before the softmax as 'attentions': Dikkat reads the weights
    at its softmax (rows sum to 1, equal to the softmax of what eager returns), and heads switch off and
    masks apply there too."""
    import torch

    loaded = tiny("squeezebert")
    assert all(s.read_at_softmax for s in loaded.sites)
    a = models.analyze(loaded, TEXT, keep_logits=True)
    ids = torch.tensor([[t.id for t in a.tokens]])
    with torch.no_grad():
        scores = loaded.model(input_ids=ids, output_attentions=True).attentions
    want = np.stack([torch.softmax(s.float(), -1)[0].numpy() for s in scores])
    got = np.asarray(a.attentions["encoder"])
    assert not np.allclose(np.stack([s[0].numpy() for s in scores]).sum(-1), 1)  # eager's tensors are not weights
    np.testing.assert_allclose(got, want, atol=1e-6)
    off = models.analyze(loaded, TEXT, heads_off=[("encoder", 0, 1)], keep_logits=True)
    assert not np.allclose(off.logits, a.logits, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(off.attentions["encoder"])[0], got[0])
    n = len(a.tokens)
    diag = models.analyze(loaded, TEXT, mask=np.eye(n, dtype=bool))
    np.testing.assert_allclose(np.asarray(diag.attentions["encoder"]), np.broadcast_to(np.eye(n), got.shape), atol=1e-7)


def test_an_interrupted_forward_pass_leaves_no_softmax_masked(tiny):
    """torch runs always_call hooks only for an Exception: a KeyboardInterrupt (a stopped notebook cell) or
    Streamlit's rerun inside the attention module skipped the hook that leaves the softmax mode, which then
    masked every later softmax of the thread. The contexts leave every mode they entered."""
    import torch

    loaded = tiny("deberta")
    n = len(models.analyze(loaded, TEXT).tokens)
    module = loaded.model.deberta.encoder.layer[0].attention.self

    def interrupt(mod, args):  # after Dikkat's own pre-hook entered the mode, inside the module's call
        raise KeyboardInterrupt

    handle = module.register_forward_pre_hook(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            models.analyze(loaded, TEXT, mask=np.eye(n, dtype=bool))
    finally:
        handle.remove()
    x = torch.zeros(n, n)
    np.testing.assert_allclose(torch.softmax(x, -1).numpy(), np.full((n, n), 1 / n), rtol=1e-6)  # not masked
    assert (np.asarray(models.analyze(loaded, TEXT).attentions["encoder"]) > 0).all()


def test_the_mask_probe_runs_at_load_before_the_model_is_shared(tiny):
    """The probe registers hooks and runs the model: it ran on the first mask request, beside other sessions'
    forward passes; now load answers it."""
    assert "fallback_mask" in tiny("bloom").probes and "fallback_mask" in tiny("mpnet").probes


def test_a_sliding_window_model_takes_masks_within_its_window(tiny, monkeypatch):
    """Longformer scores each query against keys within w of it, as (tokens, heads, 2w + 1) windows: the mask
    goes in at that softmax in the window layout (first layer = native restricted and renormalised); a mask
    reaching farther than w is refused (here with the config's window made small)."""
    loaded = tiny("longformer")
    assert fallback_masks.mask_support(loaded).form == "softmax"
    native = models.analyze(loaded, TEXT)
    n = len(native.tokens)
    allowed = fallback_masks.probe_pattern(n, causal=False).numpy()
    got = np.asarray(models.analyze(loaded, TEXT, mask=allowed).attentions["encoder"])
    assert (got[:, :, ~allowed] == 0).all() and (got[:, :, allowed] > 0).all()
    np.testing.assert_allclose(got[0], _restricted(np.asarray(native.attentions["encoder"])[0], allowed), atol=1e-6)
    monkeypatch.setattr(loaded.model.config, "attention_window", [4] * len(loaded.model.config.attention_window))
    with pytest.raises(models.UnsupportedOperationError, match="only keys within 2 tokens"):
        models.analyze(loaded, TEXT, mask="bidirectional")
    from models.analysis.masks import check_fallback_masks  # a mask within the window passes (the model's own padding
    # follows the config, so no forward pass with the shrunk window)
    check_fallback_masks(loaded, {"encoder": torch.from_numpy(models.parse_mask("sliding_window:2").matrix(n))})
