"""Why a head attends here (models/why/, issue 30) on tiny random models of six families: the neuron view's weight is
the analysis's, the terms of a score add up to the score the model computed (rows and columns of the term matrix
too), with heads switched off and masks swapped; the RoPE split and its curve; composition scores against the
d × d products; refusals with a code where the identity cannot hold; arguments checked."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

import models
from models import why

TEXT = "kedi fareyi kovaladı . the cat chased the mouse"
TOL = 1e-5  # of the largest |score| of the row (float32 models)
composition_module = importlib.import_module("models.why.composition")


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    """A tiny Gemma 2 with attention soft-capping (c = 5) and one sliding-window layer."""
    import transformers as tf

    from tiny import VOCAB, _tokenizer

    folder = tmp_path_factory.mktemp("gemma2")
    config = tf.Gemma2Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=64,
                             sliding_window=3, attn_logit_softcapping=5.0, query_pre_attn_scalar=8,
                             layer_types=["sliding_attention", "full_attention"], bos_token_id=5, eos_token_id=6,
                             pad_token_id=0)
    torch.manual_seed(0)
    model = tf.Gemma2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "weight" in name and p.dim() == 2:
                p.mul_(3.0)
    model.save_pretrained(str(folder), safe_serialization=True)
    _tokenizer(folder, "decoder")
    return models.load(str(folder), device="cpu")


def _model(tiny, gemma2_factory, arch):
    return gemma2_factory if arch == "gemma2" else tiny(arch)


def _analysis(loaded, **kw):
    if loaded.family == "encoder-decoder":
        return models.analyze(loaded, TEXT, target="the cat chased the mouse", **kw)
    return models.analyze(loaded, TEXT, **kw)


def _identities(loaded, analysis, stack, layer, head, i):
    """The row's terms against the model: every check the issue asks for, on one query row."""
    w = why.explain(loaded, analysis, stack, layer)
    row = w.row_terms(head, i)
    scale = max(1e-30, float(np.abs(row.raw).max()))
    # the terms add up to the score computed from the model's own query and key, on either side
    assert np.abs(row.key_side.sum(1) - row.raw).max() <= TOL * scale
    assert np.abs(row.query_side.sum(1) - row.raw).max() <= TOL * scale
    # the logits they make are the model's: their softmax is the analysis's weights
    capped = row.key_side.sum(1).astype(np.float64)
    if w.softcap:
        capped = w.softcap * np.tanh(capped / w.softcap)
    logits = np.where(row.allowed, capped + row.bias, -np.inf)
    expected = analysis.attentions[stack][layer, head, i]
    if row.allowed.any():
        mine = np.exp(logits - logits.max())
        np.testing.assert_allclose(mine / mine.sum(), expected, atol=1e-5)
    np.testing.assert_allclose(row.weights, expected, atol=1e-6)
    # rows and columns of the term matrix
    for j in sorted({0, i // 2, i}):
        m = row.matrix(j).astype(np.float64)
        assert abs(m.sum() - row.raw[j]) <= TOL * scale
        np.testing.assert_allclose(m.sum(1), row.query_side[j], atol=TOL * scale)
        np.testing.assert_allclose(m.sum(0), row.key_side[j], atol=TOL * scale)
    # the neuron view: q ⊙ k sums to q·k, and its weight is the analysis's
    nv = w.neuron_view(head, i, 0)
    assert abs(nv.scaling * nv.product.sum() - nv.raw) <= 1e-5 * (1 + abs(nv.raw))
    assert nv.weight == pytest.approx(float(expected[0]), abs=1e-6)
    np.testing.assert_allclose(nv.row_weights, expected, atol=1e-6)
    return w, row


CASES = [("bert", "encoder"), ("gpt2", "decoder"), ("llama", "decoder"), ("gemma3", "decoder"), ("t5", "encoder"),
         ("t5", "decoder"), ("gemma2", "decoder")]


@pytest.mark.parametrize("arch,stack", CASES)
def test_the_terms_add_up_to_the_score_the_model_computed(tiny, gemma2, arch, stack):
    loaded = _model(tiny, gemma2, arch)
    analysis = _analysis(loaded)
    layers, heads = loaded.stacks[stack]
    n = len(analysis.axis_tokens(stack)[0])
    for layer in range(layers):
        for head in range(heads):
            w, row = _identities(loaded, analysis, stack, layer, head, n - 1)
        # every earlier head, MLP and embedding is a part of both sides, plus the biases and the layer's own constant
        kinds = [c.kind for c in row.key_components]
        assert kinds.count("head") == layer * heads and kinds.count("mlp") == layer
        assert kinds[-2:] == ["bias", "own_bias"] and kinds[0] == "embedding"
    _identities(loaded, analysis, stack, layers - 1, 1, n // 2)


def test_each_family_is_read_through_its_own_chain(tiny, gemma2):
    """Which chain was proven: GPT-2's fused c_attn slices, Llama's rotation with grouped-query heads, Gemma 3's q/k
    norms and its own scaling, BERT's embedding parts through its embedding norm, T5's bias as a term of its own,
    Gemma 2's soft-capping."""
    def layer1(arch, stack=None):
        loaded = _model(tiny, gemma2, arch)
        analysis = _analysis(loaded)
        return loaded, analysis, why.explain(loaded, analysis, stack, 1)

    _, _, w = layer1("gpt2")
    assert w.q.side.linear == w.k.side.linear == "transformer.h.1.attn.c_attn"
    assert int(w.k.side.rows[0]) == 32 and not w.rotary
    _, _, w = layer1("llama")
    assert w.rotary and w.q.side.rope[1] == "half" and (w.heads, w.kv_heads) == (4, 2)
    assert w.row_terms(3, -1).kv_head == 1
    _, _, w = layer1("gemma3")
    assert w.q.side.head_norm.endswith("q_norm") and w.k.side.head_norm.endswith("k_norm")
    assert w.scaling == pytest.approx(8 ** -0.5)
    gemma3 = _model(tiny, gemma2, "gemma3")  # its sliding layer rotates with its own (local) tables
    assert why.explain(gemma3, _analysis(gemma3), None, 0).q.side.rope == ("sliding_attention", "half")
    loaded, analysis, w = layer1("bert")
    assert {c.name for c in w.components[:3]} == {"token embedding", "position embedding", "token type embedding"}
    loaded, analysis, w = layer1("t5", "encoder")
    row = w.row_terms(0, -1)
    assert np.abs(row.bias).max() > 0 and w.scaling == 1.0
    np.testing.assert_allclose(row.logits, row.raw + row.bias, atol=1e-5)
    loaded, analysis, w = layer1("gemma2")
    nv = w.neuron_view(0, -1, 0)
    assert nv.softcap == 5.0 and nv.capped == pytest.approx(5.0 * np.tanh(nv.raw / 5.0), abs=1e-6)


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert"])
def test_a_head_switched_off_adds_nothing_and_the_score_still_matches(tiny, arch):
    loaded = tiny(arch)
    stack = loaded.input_stack
    analysis = models.analyze(loaded, TEXT, heads_off={(stack, 0, 1)})
    plain = models.analyze(loaded, TEXT)
    n = len(analysis.tokens)
    w, row = _identities(loaded, analysis, stack, 1, 2, n - 1)
    off = [k for k, c in enumerate(row.key_components) if c.kind == "head" and (c.layer, c.head) == (0, 1)]
    assert len(off) == 1 and row.key_components[off[0]].off
    assert not row.key_side[:, off[0]].any() and not row.query_side[:, off[0]].any()
    assert not row.key_parts[off[0]].any()
    assert np.abs(row.by_head("key", n - 1)[0, 1]) == 0
    # and it is this analysis's score: switching the head off changed the weights of layer 1
    assert np.abs(plain.attentions[stack][1, 2, n - 1] - row.weights).max() > 1e-4


def test_a_swapped_mask_is_the_mask_of_the_explained_scores(tiny):
    loaded = tiny("gpt2")
    analysis = models.analyze(loaded, TEXT, mask="bidirectional")
    w, row = _identities(loaded, analysis, "decoder", 1, 0, 0)
    assert row.allowed.all() and row.weights[1:].sum() > 0.1  # the first token now sees the later ones
    causal = why.explain(loaded, models.analyze(loaded, TEXT), "decoder", 1).row_terms(0, 0)
    assert not causal.allowed[1:].any() and causal.weights[1:].sum() == 0


def test_the_top_terms_are_named_in_words(tiny):
    loaded = tiny("gpt2")
    analysis = models.analyze(loaded, TEXT)
    terms = why.score_terms(loaded, analysis, "decoder", 1, 0, -1, 0, k=4)
    assert len(terms.top) == 4
    assert abs(terms.top[0].value) >= abs(terms.top[-1].value)
    assert all(t.words.startswith("key side: ") and "; query side: " in t.words for t in terms.top)
    assert "'mouse'" in terms.top[0].words  # the query's token, by its own text
    assert terms.matrix.shape == (len(terms.query_components), len(terms.key_components))
    assert abs(terms.matrix.sum() - terms.raw) <= TOL * (1 + abs(terms.raw))
    weighted = why.row_terms(loaded, analysis, "decoder", 1, 0, -1).by_head("key")
    assert weighted.shape == (1, 4)
    shares = why.row_terms(loaded, analysis, "decoder", 1, 0, -1).by_head("key", 0, share=True)
    assert 0 < np.abs(shares).sum() <= 1 + 1e-6


def test_the_rope_split_and_its_curve(tiny):
    """content + positional = the score; the curve at distance i − j is the score itself (RoPE is relative)."""
    loaded = tiny("llama")
    analysis = models.analyze(loaded, TEXT)
    n = len(analysis.tokens)
    split = why.rope_split(loaded, analysis, "decoder", 1, 2, n - 1, max_distance=n - 1)
    np.testing.assert_allclose(split.content + split.positional, split.raw, atol=1e-5)
    assert ((split.share >= 0) & (split.share <= 1)).all() and 0 <= split.weighted_share <= 1
    assert split.j == int(np.argmax(analysis.attentions["decoder"][1, 2, n - 1]))
    for j in range(n):
        one = why.rope_split(loaded, analysis, "decoder", 1, 2, n - 1, j, max_distance=n - 1)
        assert one.curve[n - 1 - j] == pytest.approx(float(split.raw[j]), abs=1e-5 * (1 + float(abs(split.raw).max())))
    assert split.distances.tolist() == list(range(n))
    # without a rotation there is nothing to split
    with pytest.raises(models.UnsupportedOperationError) as err:
        why.rope_split(tiny("gpt2"), models.analyze(tiny("gpt2"), TEXT), "decoder", 1, 0, -1)
    assert err.value.code == "why_refused" and err.value.params["why"] == "no_rope"


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert", "gemma3"])
def test_composition_scores_are_elhages_ratios_of_the_d_by_d_products(tiny, arch):
    loaded = tiny(arch)
    stack = loaded.input_stack
    comp = why.composition(loaded, stack)
    layers, heads = loaded.stacks[stack]
    assert comp.q.shape == (layers, heads, layers, heads)
    assert np.isnan(comp.k[0]).all() and np.isnan(comp.k[1, :, 1]).all()
    maps = composition_module._maps(loaded, stack)
    r, w = maps[1], maps[0]
    g, gw = heads // r.rk.shape[0], heads // w.rv.shape[0]
    fro = np.linalg.norm
    for h2 in range(heads):
        qk = (r.rq[h2].T @ r.rk[h2 // g]).numpy()
        ov2 = (r.wo[h2] @ r.rv[h2 // g]).numpy()
        for h1 in range(heads):
            ov1 = (w.wo[h1] @ w.rv[h1 // gw]).numpy()
            assert comp.q[1, h2, 0, h1] == pytest.approx(fro(qk.T @ ov1) / (fro(qk) * fro(ov1)), abs=1e-5)
            assert comp.k[1, h2, 0, h1] == pytest.approx(fro(qk @ ov1) / (fro(qk) * fro(ov1)), abs=1e-5)
            assert comp.v[1, h2, 0, h1] == pytest.approx(fro(ov2 @ ov1) / (fro(ov2) * fro(ov1)), abs=1e-5)
    one = why.composition(loaded, stack, layer=1)
    np.testing.assert_allclose(one.for_head(1, 0), comp.for_head(1, 0), atol=1e-6)
    assert ((comp.q[1, :, 0] >= 0) & (comp.q[1, :, 0] <= 1 + 1e-6)).all()


def test_where_the_identity_cannot_hold_it_is_refused_with_a_reason(tiny):
    neo = tiny("gpt_neo")  # attention outside transformers' AttentionInterface: its q and k are not seen
    with pytest.raises(models.UnsupportedOperationError) as err:
        why.explain(neo, models.analyze(neo, TEXT), "decoder", 1)
    assert err.value.code == "why_refused" and err.value.params["why"] == "fallback"
    assert "fallback" in str(err.value)
    with pytest.raises(models.UnsupportedOperationError) as err:
        why.composition(neo)
    assert err.value.code == "why_refused"
    t5 = tiny("t5")
    with pytest.raises(models.UnsupportedOperationError) as err:
        why.explain(t5, _analysis(t5), "cross", 0)
    assert err.value.params["why"] == "cross" and set(why.REASONS) >= {"fallback", "cross", "hybrid", "mixed"}


@pytest.mark.parametrize("bad", [{"layer": 2}, {"layer": -1}, {"layer": "0"}, {"layer": True}, {"head": 4},
                                 {"head": 1.0}, {"i": 99}, {"j": -99}, {"j": None}, {"stack": "encoder"},
                                 {"stack": 3}])
def test_arguments_are_checked(tiny, bad):
    loaded = tiny("gpt2")
    analysis = models.analyze(loaded, TEXT)
    args = {"stack": "decoder", "layer": 1, "head": 0, "i": 3, "j": 1} | bad
    with pytest.raises(models.InvalidArgumentError):
        why.neuron_view(loaded, analysis, args["stack"], args["layer"], args["head"], args["i"], args["j"])


def test_other_arguments_are_checked(tiny):
    loaded = tiny("gpt2")
    analysis = models.analyze(loaded, TEXT)
    with pytest.raises(models.InvalidArgumentError):
        why.explain("gpt2", analysis, "decoder", 0)
    with pytest.raises(models.InvalidArgumentError):
        why.explain(tiny("llama"), analysis, "decoder", 0)  # another model's analysis
    row = why.row_terms(loaded, analysis, "decoder", 1, 0, 2)
    for call in (lambda: row.matrix(50), lambda: row.at(0, k=0), lambda: row.by_head("value"),
                 lambda: why.composition(loaded, layer=5), lambda: why.score_terms(loaded, analysis, "decoder", 1, 0,
                                                                                   2, 1, k="5")):
        with pytest.raises(models.InvalidArgumentError):
            call()
    llama = tiny("llama")
    with pytest.raises(models.InvalidArgumentError):
        why.rope_split(llama, models.analyze(llama, TEXT), "decoder", 1, 0, -1, max_distance=0)


class _TensorWork(torch.overrides.TorchFunctionMode):
    """Records every torch function and tensor method called while active (indexing, ``.shape``, a forward pass)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__qualname__", repr(func)))
        return func(*args, **(kwargs or {}))


BAD_CALLS = {  # name -> (arch, call(loaded, analysis)) with one argument out of range or of the wrong type
    "neuron_view head 4": ("gpt2", lambda m, a: why.neuron_view(m, a, "decoder", 1, 4, 3, 1)),
    "neuron_view i 99": ("gpt2", lambda m, a: why.neuron_view(m, a, "decoder", 1, 0, 99, 1)),
    "neuron_view j -99": ("gpt2", lambda m, a: why.neuron_view(m, a, "decoder", 1, 0, 3, -99)),
    "neuron_view j None": ("gpt2", lambda m, a: why.neuron_view(m, a, "decoder", 1, 0, 3, None)),
    "neuron_view layer 2": ("gpt2", lambda m, a: why.neuron_view(m, a, "decoder", 2, 0, 3, 1)),
    "row_terms head -1": ("gpt2", lambda m, a: why.row_terms(m, a, "decoder", 1, -1, 3)),
    "row_terms i 1.0": ("gpt2", lambda m, a: why.row_terms(m, a, "decoder", 1, 0, 1.0)),
    "score_terms j 50": ("gpt2", lambda m, a: why.score_terms(m, a, "decoder", 1, 0, 2, 50)),
    "score_terms k '5'": ("gpt2", lambda m, a: why.score_terms(m, a, "decoder", 1, 0, 2, 1, k="5")),
    "rope_split i -99": ("llama", lambda m, a: why.rope_split(m, a, "decoder", 1, 0, -99)),
    "rope_split j 99": ("llama", lambda m, a: why.rope_split(m, a, "decoder", 1, 0, -1, 99)),
    "rope_split max_distance 0": ("llama", lambda m, a: why.rope_split(m, a, "decoder", 1, 0, -1, max_distance=0)),
    "composition layer 5": ("gpt2", lambda m, a: why.composition(m, layer=5)),
    "LayerWhy.neuron_view i 99": ("gpt2", lambda m, a: why.explain(m, a, "decoder", 1).neuron_view(0, 99, 1)),
    "LayerWhy.row_terms head 4": ("gpt2", lambda m, a: why.explain(m, a, "decoder", 1).row_terms(4, 0)),
    "LayerWhy.rope_split j 99": ("llama", lambda m, a: why.explain(m, a, "decoder", 1).rope_split(0, -1, 99)),
    "LayerWhy.rope_split max_distance 0": ("llama", lambda m, a: why.explain(m, a, "decoder", 1).rope_split(
        0, -1, max_distance=0)),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_a_bad_argument_is_refused_before_any_tensor_is_touched(tiny, name):
    """On a GPU an index out of range that reaches a kernel is a device-side assert, which ends the process's use
    of the GPU (every later CUDA call fails), where the CPU raises an IndexError: so every argument is checked
    before a pass runs or a tensor is indexed. The call is made on a fresh analysis (no layer explained yet; the
    ``LayerWhy.*`` calls explain the layer first, outside the check) under a mode that records every torch call."""
    arch, call = BAD_CALLS[name]
    loaded = tiny(arch)
    analysis = models.analyze(loaded, TEXT)
    if name.startswith("LayerWhy."):
        why.explain(loaded, analysis, "decoder", 1)  # the layer's pass, run before the recording starts
    work = _TensorWork()
    with pytest.raises(models.InvalidArgumentError) as err, work:
        call(loaded, analysis)
    assert err.value.code in ("arg_whole", "arg_choice") and not work.calls, (err.value.code, work.calls[:10])
