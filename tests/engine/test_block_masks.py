"""Masks per head as FlexAttention block masks (models.capture.flex_heads): the fused pass's output under
``kernel="flex"`` equals the dense path's (one sdpa call per group of heads) and the eager function's with the whole
per-head mask, layer by layer, on a Llama with GQA, a GPT-2, a BERT encoder and Gemma 3 (a sliding-window layer:
the model's own mask as a plane), with patterns mixed across heads; the block mask's tiles, read as the kernel
reads them, give each head's plane cell for cell; refusals give the reason and the dense path."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import models
from models import capture
from models.analysis.head_masks import HeadMasks, resolve
from models.analysis.masks import MaskMode
from models.capture import flex_heads
from models.errors import InvalidArgumentError

TEXT = "the cat sat on the mat and the dog ran to the cat while the bird sang on a high branch by the river"
# float32: FlexAttention and sdpa sum in other orders; measured differences are ~3e-7 of the largest output
RTOL = 1e-5


def _spec(n: int, stack: str) -> HeadMasks:
    """Every pattern kind across the heads of a 2-layer, 4-head stack (``causal`` is a decoder's ``full``); a custom
    plane that empties row 2."""
    custom = np.tril(np.ones((n, n), bool))
    custom[2] = False
    custom[5, 7] = True  # a key after the query: not a closed form
    return HeadMasks(default="sink_window:3,1", stack=stack, heads={
        (0, 0): "full", (0, 1): custom, (0, 2): "strided:3", (0, 3): "bidirectional",
        (1, 0): "block_sparse:4,2", (1, 1): "vertical_slash:3,2", (1, 2): "sliding_window:4", (1, 3): "a_shape:4,2"})


def _run(loaded, spec: HeadMasks, kernel: str | None, fused: bool, text: str = TEXT):
    """Every layer's attention output ``(layers, q, heads, head_dim)`` (float32) and the final hidden states of one
    forward pass with ``spec`` resolved for the text, and the rules (their ``kernels``)."""
    enc = loaded.tokenizer(text, return_tensors="pt").to(loaded.device)
    n = enc["input_ids"].shape[1]
    stack, rules, _ = resolve(loaded, replace(spec, kernel=kernel), n)
    with capture.rerun(loaded, masks={stack: rules}, fused=fused) as state:
        state.outputs = {}
        out = loaded.model(**enc, output_hidden_states=True)
    layers = torch.stack([state.outputs[(stack, layer)][0].float() for layer in range(loaded.stacks[stack][0])])
    hidden = out.hidden_states if getattr(out, "hidden_states", None) is not None else out.encoder_hidden_states
    return layers, hidden[-1].float(), rules


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    return float((a - b).abs().max()) <= rtol * float(b.abs().max())


def _rtol(loaded) -> float:
    return RTOL if loaded.dtype == torch.float32 else 2e-2


@pytest.mark.parametrize("arch", ["llama", "gpt2", "bert", "gemma3"])
def test_flex_block_masks_give_the_dense_paths_outputs_with_every_pattern_mixed_across_heads(tiny, arch):
    loaded = tiny(arch)
    stack = loaded.mask_stack
    n = loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"].shape[1]
    spec = _spec(n, stack)
    flex, flex_hidden, rules = _run(loaded, spec, "flex", fused=True)
    dense, dense_hidden, dense_rules = _run(loaded, spec, "dense", fused=True)
    eager, eager_hidden, _ = _run(loaded, spec, None, fused=False)  # the whole (1, heads, q, k) mask, eager
    plain, _, _ = _run(loaded, HeadMasks(stack=stack), "dense", fused=False)
    assert rules.kernels == {0: "flex", 1: "flex"} and dense_rules.kernels == {0: "dense", 1: "dense"}
    rtol = _rtol(loaded)
    assert _close(flex, dense, rtol) and _close(flex, eager, rtol)
    assert _close(flex_hidden, dense_hidden, rtol) and _close(flex_hidden, eager_hidden, rtol)
    assert not _close(flex, plain, 1e-2)  # the masks change the outputs: the equality above says something
    assert float(flex[0, 2, 1].abs().max()) == 0.0  # head 1 of layer 0: row 2 has no key, output 0
    heads = loaded.stacks[stack][1]
    for layer in range(2):
        for head in range(heads):  # head by head, not only on the whole
            assert _close(flex[layer, :, head], dense[layer, :, head], rtol * 10)
    assert np.array_equal(rules.chosen[(1, 1)]["columns"], dense_rules.chosen[(1, 1)]["columns"])


def test_the_analysis_runs_the_kernel_asked_for_and_its_loss_is_the_dense_ones(tiny):
    loaded = tiny("llama")
    spec = HeadMasks(default="sink_window:4,2", heads={(0, 1): "full", (1, 3): "full"})
    dense = models.analyze(loaded, TEXT, mask=replace(spec, kernel="dense"), keep=False)
    flex = models.analyze(loaded, TEXT, mask=replace(spec, kernel="flex"), keep=False)
    assert flex.head_masks["decoder"].kernels == {0: "flex", 1: "flex"}
    assert abs(flex.loss - dense.loss) < 1e-5
    assert np.allclose(flex.next_token.probs, dense.next_token.probs, atol=1e-6)
    for layer in range(2):  # the keys recorded per layer: the union of the heads' own, as on the dense path
        assert np.array_equal(np.asarray(flex.masks["decoder"][layer]), np.asarray(dense.masks["decoder"][layer]))


def _kernel_view(mask, q_len: int, k_len: int) -> torch.Tensor:
    """Bool ``(heads, q, k)``: the cells a FlexAttention kernel attends under ``mask``: every cell of a full tile,
    the ``mask_mod`` cells of a partial tile, none of a tile not listed."""
    size = flex_heads.BLOCK
    heads = mask.kv_num_blocks.shape[1]
    out = torch.zeros((heads, q_len, k_len), dtype=torch.bool)
    qi, ki = torch.arange(q_len)[:, None], torch.arange(k_len)[None, :]
    for h in range(heads):
        cells = mask.mask_mod(torch.tensor(0), torch.tensor(h), qi, ki).expand(q_len, k_len)
        for r in range(mask.kv_num_blocks.shape[2]):
            rows = slice(r * size, (r + 1) * size)
            for lists, whole in ((mask.kv_num_blocks, mask.kv_indices), (mask.full_kv_num_blocks,
                                                                          mask.full_kv_indices)):
                full = lists is mask.full_kv_num_blocks
                for c in whole[0, h, r, :int(lists[0, h, r])].tolist():
                    cols = slice(c * size, (c + 1) * size)
                    out[h, rows, cols] = True if full else cells[rows, cols]
    return out


@pytest.mark.parametrize("n", [37, 64, 100])
def test_the_block_masks_tiles_read_as_the_kernel_reads_them_give_each_heads_plane(monkeypatch, n):
    monkeypatch.setattr(flex_heads, "BLOCK", 16)  # several tiles per row at a small n
    modes = [MaskMode("sink_window", 8, sinks=2), MaskMode("sliding_window", 5), MaskMode("strided", 6),
             MaskMode("causal"), MaskMode("bidirectional"), MaskMode("sink_window", 500, sinks=3)]
    row = [torch.from_numpy(m.matrix(n)) for m in modes]
    rng = np.random.default_rng(1)
    custom = torch.from_numpy(rng.random((n, n)) < 0.05)
    chosen = torch.from_numpy(np.tril(rng.random((n, n)) < 0.2))
    own = torch.ones((n, n), dtype=torch.bool).tril()
    row += [custom, None, None]
    modes += [MaskMode("custom", custom=custom.numpy()), None, None]
    picked = {len(row) - 1: chosen}
    mask = flex_heads.block_mask(tuple(row), tuple(modes), picked, own, True, {})
    seen = _kernel_view(mask, n, n)
    want = row[:-2] + [own, chosen]
    for h, plane in enumerate(want):
        assert torch.equal(seen[h], plane), f"head {h} ({modes[h]})"
    tiles = -(-n // 16)
    listed = (mask.kv_num_blocks + mask.full_kv_num_blocks)[0].sum(dim=-1)  # tiles each head reads
    assert int(listed[4]) == tiles * tiles  # bidirectional: every tile
    assert int(listed[0]) < tiles * (tiles + 1) // 2 or tiles <= 3  # window + sinks: fewer than causal's
    assert int(mask.full_kv_num_blocks[0, 4].sum()) == (n // 16) ** 2  # tiles wholly inside the text are full


def test_a_plain_own_mask_that_is_neither_causal_nor_every_key_is_read_as_a_plane(monkeypatch):
    monkeypatch.setattr(flex_heads, "BLOCK", 16)
    n = 40
    own = torch.from_numpy(MaskMode("sliding_window", 7).matrix(n))  # e.g. Gemma 3's sliding-window layer
    mask = flex_heads.block_mask((None, None), (None, None), {}, own, False, {})
    assert torch.equal(_kernel_view(mask, n, n), own.expand(2, n, n))


@pytest.mark.parametrize("kind, width, sinks", [("causal", None, None), ("bidirectional", None, None),
                                                ("sliding_window", 4, None), ("sliding_window", 90, None),
                                                ("sink_window", 5, 2), ("sink_window", 3, 0), ("strided", 4, None),
                                                ("strided", 1, None)])
@pytest.mark.parametrize("n", [1, 9, 50])
def test_the_closed_form_is_the_masks_matrix_cell_for_cell(kind, width, sinks, n):
    mode = MaskMode(kind, width, sinks=sinks)
    lo, w, k, s = flex_heads.closed_form(mode, n)
    mod = flex_heads._form_mod([torch.tensor([v]) for v in (lo, w, k, s)])
    cells = mod(0, torch.tensor(0), torch.arange(n)[:, None], torch.arange(n)[None, :]).expand(n, n)
    assert np.array_equal(cells.numpy(), mode.matrix(n))
    assert flex_heads.closed_form(MaskMode("custom", custom=np.ones((n, n), bool)), n) is None


def _call(n: int = 8, heads: int = 4, kv: int = 2):
    query = torch.zeros((1, heads, n, 4))
    key = torch.zeros((1, kv, n, 4))
    allowed = torch.ones((n, n), dtype=torch.bool).tril()
    own = torch.zeros((1, 1, n, n)).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    return query, key, own, allowed


@pytest.mark.parametrize("change, reason", [
    ({"kwargs": {"softcap": 50.0}}, "soft-capping"),
    ({"kwargs": {"position_bias": torch.zeros(1)}}, "a position bias"),
    ({"kwargs": {"s_aux": torch.zeros(4)}}, "learned sinks"),
    ({"kwargs": {"dropout": 0.1}, "training": True}, "dropout"),
    ({"args": (1,)}, "positional extra arguments"),
    ({"n": 9}, "a call of another length than the text (a cache)"),
    ({"bias": True}, "a bias in the model's own mask"),
    ({"empty_row": True}, "the model's own mask leaves a query with no key"),
])
def test_calls_flex_cannot_run_as_the_dense_path_are_refused_with_the_reason(change, reason):
    query, key, own, allowed = _call()
    if change.get("bias"):  # ALiBi-like: a slope added to the allowed cells
        own = own + torch.arange(8.0)[None, :].where(allowed, torch.tensor(0.0))
    if change.get("empty_row"):
        allowed = allowed.clone()
        allowed[3] = False
        own = own.masked_fill(~allowed, torch.finfo(torch.float32).min)
    module = SimpleNamespace(training=change.get("training", False))
    got = flex_heads.refusal(module, query, key, own, allowed, change.get("n", 8), change.get("args", ()),
                             change.get("kwargs", {"dropout": 0.0}), {}, False)
    assert got == reason
    assert flex_heads.refusal(SimpleNamespace(training=False), query, key, *_call()[2:], 8, (), {"dropout": 0.1},
                              {}, False) is None  # dropout in eval mode is no dropout


def test_a_refused_layer_runs_the_dense_path_and_says_why(tiny, monkeypatch):
    loaded = tiny("llama")
    spec = HeadMasks(default="sink_window:3,1", heads={(0, 0): "full"})
    monkeypatch.setattr(flex_heads, "refusal", lambda *a, **k: "soft-capping")
    flex, _, rules = _run(loaded, spec, "flex", fused=True)
    dense, _, _ = _run(loaded, spec, "dense", fused=True)
    assert rules.kernels == {0: "dense (soft-capping)", 1: "dense (soft-capping)"}
    assert torch.equal(flex, dense)


def test_kernel_choice_and_a_bad_kernel(tiny):
    assert flex_heads.kernel_for("auto", flex_heads.AUTO_TOKENS) == "flex_compiled"
    assert flex_heads.kernel_for("auto", flex_heads.AUTO_TOKENS - 1) == "dense"
    assert flex_heads.kernel_for("flex", 10) == "flex"
    assert flex_heads.KERNEL in flex_heads.KERNELS
    with pytest.raises(InvalidArgumentError) as info:
        models.analyze(tiny("llama"), TEXT, mask=HeadMasks(default="causal", kernel="fast"))
    assert info.value.code == "arg_choice"


def test_the_compiled_kernel_skips_tiles_and_gives_the_dense_outputs_on_a_long_text(tmp_path_factory):
    """Through torch.compile (the kernel that reads the tiles; the uncompiled one computes every score): a Llama
    with GQA on ~300 tokens (3 tiles of 128 per row), 3 of 4 heads window + sinks."""
    from tiny import build_long_llama

    loaded = models.load(str(build_long_llama(tmp_path_factory.mktemp("llama-flex"), 512)), device="cpu")
    text = " ".join([TEXT] * 14)
    spec = HeadMasks(default="sink_window:16,2", heads={(0, 1): "full", (1, 2): "full", (1, 0): "strided:5"})
    flex, flex_hidden, rules = _run(loaded, spec, "flex_compiled", fused=True, text=text)
    dense, dense_hidden, _ = _run(loaded, spec, "dense", fused=True, text=text)
    assert flex.shape[1] > 2 * flex_heads.BLOCK
    assert rules.kernels == {0: "flex_compiled", 1: "flex_compiled"}
    assert _close(flex, dense, RTOL) and _close(flex_hidden, dense_hidden, RTOL)
    assert any(shape[0][-2] == flex.shape[1] for shape in flex_heads.COMPILE_SECONDS)


def test_flex_uses_the_familys_scaling_and_gqa_against_softmax_written_out():
    """Random q, k, v, 6 query heads on 2 key/value heads, a scaling that is not 1/√d: each head's output is
    softmax(scaling · q kᵀ + mask) v with the key/value head h // 3, written out here."""
    from models.analysis.head_masks import HeadRules
    from models.capture.head_rules import fused_per_head

    n, heads, kv, d, scaling = 40, 6, 2, 8, 0.37
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn((1, h, n, d), generator=gen) for h in (heads, kv, kv))
    allowed = torch.ones((n, n), dtype=torch.bool).tril()
    own = torch.zeros((1, 1, n, n)).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    modes = (MaskMode("sink_window", 4, sinks=2), None, MaskMode("strided", 3), MaskMode("bidirectional"),
             MaskMode("sliding_window", 6), None)
    row = tuple(None if m is None else torch.from_numpy(m.matrix(n)) for m in modes)
    rules = HeadRules(1, heads, n, {0: row}, {}, {0: modes}, "flex")
    out = fused_per_head(rules, 0, None, SimpleNamespace(scaling=scaling, training=False), q, k, v, own, (),
                         {"scaling": scaling}, {})[0]
    assert rules.kernels == {0: "flex"}
    for h in range(heads):
        plane = allowed if row[h] is None else row[h]
        scores = (q[0, h] @ k[0, h // 3].T * scaling).masked_fill(~plane, float("-inf"))
        want = torch.softmax(scores, dim=-1) @ v[0, h // 3]
        assert _close(out[0, :, h], want, RTOL), h


def test_a_call_sdpa_cannot_take_runs_eager_with_the_whole_mask_and_says_why():
    from models.analysis.head_masks import HeadRules
    from models.capture.head_rules import fused_per_head

    query, key, own, _ = _call()
    plane = torch.from_numpy(MaskMode("sliding_window", 2).matrix(8))
    rules = HeadRules(1, 4, 8, {0: (plane, None, None, None)}, {}, {0: (MaskMode("sliding_window", 2),) + (None,) * 3},
                      "flex")
    got = fused_per_head(rules, 0, None, SimpleNamespace(training=False), query, key, key, own, (),
                         {"softcap": 30.0}, {})
    assert got is None and rules.kernels == {0: "eager (soft-capping)"}
