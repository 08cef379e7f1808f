"""Information flow (models/flow/, issue 14) on tiny random models of five families: the decomposition adds up
to the model's own streams, the shares sum to 1, the last logit lens is the model's logits, and everything follows
heads switched off and masks swapped. The contribution measure and the route graph by hand on toy inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import models
from models import flow as mflow
from models.anatomy import residual as flayout, tensors as ftensors

TEXT = "kedi fareyi kovaladı . the cat chased the mouse"
# the module whose output is what the attention adds to the residual stream (pre-LN and sandwich layers), or the
# stream after the attention itself (post-LN), per family; {i} is the layer
AFTER_ATTENTION = {
    "bert": ("encoder.layer.{i}.attention", "stream"),
    "gpt2": ("transformer.h.{i}.attn", "delta"),
    "llama": ("model.layers.{i}.self_attn", "delta"),
    "gemma3": ("model.layers.{i}.post_attention_layernorm", "delta"),
    "t5": ("{stack}.block.{i}.layer.0", "stream"),
}


def test_proximity_and_shares_by_hand():
    """Ferrando & Voita 2024, eq. 3 on 2-D vectors: y = (3, 1), ‖y‖₁ = 4."""
    y = torch.tensor([3.0, 1.0])  # broadcast against the parts
    parts = torch.tensor([[2.0, 0.0], [1.0, 1.0]])  # ‖y − z‖₁ = 2 and 2: proximities 2 and 2
    assert mflow.proximity(parts, y).tolist() == [2.0, 2.0]
    assert mflow.shares(mflow.proximity(parts, y)).tolist() == [0.5, 0.5]
    parts = torch.tensor([[4.0, -1.0], [-1.0, 2.0]])  # ‖y − z‖₁ = 3 and 5: proximities 1 and 0 (clipped)
    assert mflow.proximity(parts, y).tolist() == [1.0, 0.0]
    assert mflow.shares(mflow.proximity(parts, y)).tolist() == [1.0, 0.0]
    assert mflow.shares(torch.zeros(1, 3)).tolist() == [[1.0, 0.0, 0.0]]  # no part close: the first takes it all


def test_route_graph_by_hand():
    """Two layers, three positions: follow shares >= 0.3 back from position 2."""
    rows = {  # layer -> position -> shares of tokens 0, 1, 2, then residual, bias
        1: {2: [0.0, 0.6, 0.0, 0.4, 0.0]},
        0: {1: [0.5, 0.2, 0.0, 0.3, 0.0], 2: [0.1, 0.1, 0.0, 0.8, 0.0]},
    }
    mlp = [np.array([0.0, 0.1, 0.5]), np.array([0.0, 0.0, 0.2])]
    mlp_residual = [np.array([1.0, 0.9, 0.5]), np.array([1.0, 1.0, 0.8])]
    asked = []

    def row(layer, positions):
        asked.append((layer, list(positions)))
        return np.array([rows[layer][p] for p in positions])

    route = mflow.route_graph(row, mlp, mlp_residual, 2, 2, 0.3)
    assert asked == [(1, [2]), (0, [1, 2])]  # once per layer, only the positions on the route
    edges = {(src, dst): (w, kind) for src, dst, w, kind in route.edges}
    assert edges[(("mid", 1, 2), ("in", 2, 2))] == (0.8, "residual")
    assert edges[(("in", 1, 1), ("mid", 1, 2))] == (0.6, "attention")
    assert edges[(("in", 1, 2), ("mid", 1, 2))] == (0.4, "residual")
    assert edges[(("mlp", 0, 2), ("in", 1, 2))] == (0.5, "mlp")
    assert edges[(("in", 0, 0), ("mid", 0, 1))] == (0.5, "attention")
    assert (("in", 0, 2), ("mid", 0, 1)) not in edges  # 0.0 < 0.3
    assert ("in", 0, 0) in route.nodes and ("mlp", 1, 2) not in route.nodes  # 0.2 < 0.3


def _hooked(loaded, names):
    """Run-time outputs of the named modules, recorded by forward hooks during ``fn()``."""
    seen = {}
    modules = dict(loaded.model.named_modules())

    def keep(name):
        def hook(_module, _args, out) -> None:  # returns None: the output stays as it is
            out = ftensors.first_tensor(out)
            if out.shape[-2] > 1:  # the flow pass's call (not the one-position probes that freeze a norm)
                seen[name] = out  # the last one: the flow pass (the first may be the load-time probe)
        return hook

    hooks = [modules[n].register_forward_hook(keep(n)) for n in names]
    return seen, hooks


@pytest.mark.parametrize("arch,stack", [("bert", "encoder"), ("gpt2", "decoder"), ("llama", "decoder"),
                                        ("gemma3", "decoder"), ("t5", "encoder"), ("t5", "decoder")])
def test_the_decomposition_adds_up_to_the_models_own_streams(tiny, arch, stack):
    """Per layer: residual + Σ_j t_ij + bias = the stream after the attention, which is the model's own (a hook
    on the module that makes it); every share sums to 1; the streams are the model's hidden states."""
    loaded = tiny(arch)
    analysis = models.analyze(loaded, TEXT, hidden_states=True)
    pattern, what = AFTER_ATTENTION[arch]
    layers = loaded.stacks[stack][0]
    names = [pattern.format(i=i, stack=stack) for i in range(layers)]
    seen, hooks = _hooked(loaded, names)
    first = {}
    block = dict(loaded.model.named_modules())[flayout.layer_block(names[0])]
    hooks.append(block.register_forward_pre_hook(
        lambda _m, args, kwargs: first.update(x=ftensors.input_tensor(args, kwargs)), with_kwargs=True))
    try:
        flow = models.information_flow(loaded, analysis, stack=stack)
    finally:
        for h in hooks:
            h.remove()
    n = len(analysis.axis_tokens(stack)[0])
    hidden = analysis.hidden_states[stack]
    np.testing.assert_allclose(flow.x_in, first["x"][0].float().cpu().numpy(), atol=1e-6)
    x_in = torch.from_numpy(flow.x_in)
    for layer, lf in enumerate(flow.layers):
        own = seen[names[layer]][0].float()
        x_mid = own if what == "stream" else x_in + own
        parts = lf.token_parts(list(range(n)))
        np.testing.assert_allclose((lf.residual + parts.sum(1) + lf.bias_part).numpy(), x_mid.numpy(), atol=1e-5)
        np.testing.assert_allclose(lf.x_mid.numpy(), x_mid.numpy(), atol=1e-5)
        if layer < layers - 1:  # (the last hidden state may be after the final norm)
            np.testing.assert_allclose(lf.x_out, hidden[layer + 1], atol=1e-5)
        token = flow.token_shares(layer)
        np.testing.assert_allclose(token.sum(1), 1.0, atol=1e-5)
        np.testing.assert_allclose(lf.heads.sum(1) + lf.heads_residual + lf.heads_bias, 1.0, atol=1e-5)
        np.testing.assert_allclose(lf.mlp + lf.mlp_residual, 1.0, atol=1e-5)
        # the weights computed again on chosen rows are the analysis's weights
        rows = [0, n // 2, n - 1]
        np.testing.assert_allclose(lf.weights(rows).numpy(), analysis.attentions[stack][layer][:, rows], atol=1e-6)
        x_in = torch.from_numpy(lf.x_out)


@pytest.mark.parametrize("arch", ["bert-mlm", "gpt2", "llama", "gemma3", "t5"])
def test_the_last_logit_lens_is_the_models_own_logits(tiny, arch):
    loaded = tiny(arch)
    analysis = models.analyze(loaded, TEXT, keep_logits=True)
    flow = models.information_flow(loaded, analysis)
    for position in (-1, 0):
        lens = flow.logit_lens(position, k=3)
        np.testing.assert_allclose(lens.last_logits, analysis.logits[position], atol=1e-5)
        assert lens.ids.shape == (len(flow.layers) + 1, 3) and lens.final_rank[-1] == 0
        assert lens.final_id == int(np.argmax(analysis.logits[position]))


def test_value_norms_are_kobayashi_norms_with_gqa(tiny):
    """‖W_O^h v_j^h‖₂ from the model's own v_proj output and o_proj weight (query head h reads kv head h // 2)."""
    loaded = tiny("llama")
    analysis = models.analyze(loaded, TEXT)
    names = [f"model.layers.{i}.self_attn.v_proj" for i in range(2)]
    seen, hooks = _hooked(loaded, names)
    try:
        flow = models.information_flow(loaded, analysis)
    finally:
        for h in hooks:
            h.remove()
    modules = dict(loaded.model.named_modules())
    for layer in range(2):
        v = seen[names[layer]][0].float().view(-1, 2, 8)  # (n, kv_heads, head_dim)
        w_o = modules[f"model.layers.{layer}.self_attn.o_proj"].weight.detach().float().view(32, 4, 8)
        want = torch.stack([(v[:, h // 2] @ w_o[:, h].T).norm(dim=-1) for h in range(4)])
        np.testing.assert_allclose(flow.layers[layer].value_norms, want.numpy(), atol=1e-5)
        weights = analysis.attentions["decoder"][layer]
        np.testing.assert_allclose(flow.value_weighted(weights, layer), weights * want.numpy()[:, None, :], atol=1e-5)


def test_the_flow_follows_heads_off_and_masks(tiny):
    loaded = tiny("llama")
    off = {("decoder", 0, h) for h in range(4)} | {("decoder", 1, 2)}
    flow = models.information_flow(loaded, models.analyze(loaded, TEXT, heads_off=off))
    token = flow.token_shares(0)
    assert np.all(token[:, :-2] == 0)  # layer 0 reads no token: the residual and biases carry it all
    np.testing.assert_allclose(token[:, -2] + token[:, -1], 1.0, atol=1e-6)
    assert np.all(flow.layers[0].heads == 0)
    effect = flow.direct_effect()
    assert np.all(effect.logits[0] == 0) and np.all(effect.logits[1, 2] == 0) and np.any(effect.logits[1, 0] != 0)
    bert = tiny("bert")
    flow = models.information_flow(bert, models.analyze(bert, TEXT, mask="causal"))
    for layer in range(2):
        token = flow.token_shares(layer)[:, :-2]
        assert np.all(np.triu(token, 1) == 0) and np.any(np.tril(token, -1) > 0)


def test_flow_refuses_with_a_reason(tiny):
    bert, llama = tiny("bert"), tiny("llama")
    analysis = models.analyze(bert, TEXT)
    with pytest.raises(models.InvalidArgumentError, match="not one of"):
        models.information_flow(llama, analysis)
    with pytest.raises(models.InvalidArgumentError, match="stack must be"):
        models.information_flow(bert, analysis, stack="cross")
    flow = models.information_flow(bert, analysis)
    with pytest.raises(models.InvalidArgumentError, match="position"):
        flow.route(position=99)
    with pytest.raises(models.UnsupportedOperationError, match="no token head") as err:
        flow.logit_lens()
    assert err.value.code == "flow_no_head" and err.value.params["why"] == "no_head"
    for bad in (-0.1, 1.5, "0.1"):
        with pytest.raises(models.InvalidArgumentError, match="threshold"):
            flow.route(threshold=bad)
    t5 = tiny("t5")
    flow = models.information_flow(t5, models.analyze(t5, TEXT, target="the cat"), stack="encoder")
    assert flow.head_refused == "other_stack"


def test_direct_effect_is_the_heads_output_taken_out_of_the_last_stream(tiny):
    """Llama (pre-LN): head h of layer l adds c = W_O^h o_h at position p, carried unchanged to the last stream x;
    its direct effect is lm_head(norm(x)) − lm_head(norm(x − c)), computed here from the model's own modules."""
    loaded = tiny("llama")
    analysis = models.analyze(loaded, TEXT)
    names = [f"model.layers.{i}.self_attn.o_proj" for i in range(2)]
    o_in = {}
    modules = dict(loaded.model.named_modules())
    hooks = [modules[n].register_forward_pre_hook(lambda m, args, n=n: o_in.__setitem__(n, args[0][0].detach()))
             for n in names]
    try:
        flow = models.information_flow(loaded, analysis)
    finally:
        for h in hooks:
            h.remove()
    p = 3
    effect = flow.direct_effect(p)
    x = torch.from_numpy(flow.layers[-1].x_out[p]).to(loaded.device)

    def head(v):
        with torch.no_grad():
            return loaded.model.lm_head(loaded.model.model.norm(v[None]))[0].cpu()

    for layer in range(2):
        w = modules[names[layer]].weight.detach()
        for h in range(4):
            c = w[:, h * 8:(h + 1) * 8] @ o_in[names[layer]][p, h * 8:(h + 1) * 8]
            np.testing.assert_allclose(effect.logits[layer, h], (head(x) - head(x - c)).numpy(), atol=1e-5)
    assert effect.final_id == int(torch.argmax(head(x)))


def test_flow_in_bfloat16_within_its_tolerance(tiny_folder):
    """bfloat16 (the app's dtype on a GPU) rounds sums to about 3 digits: the identities hold within
    layout.tolerance(bfloat16), and the last logit lens is the model's logits to that tolerance."""
    loaded = models.load(str(tiny_folder("llama")), device="cpu", dtype="bfloat16")
    analysis = models.analyze(loaded, TEXT, keep_logits=True)
    flow = models.information_flow(loaded, analysis)
    tol = ftensors.tolerance(torch.bfloat16)
    assert tol == pytest.approx(4 * 2 ** -7)
    logits = analysis.logits[-1]
    np.testing.assert_allclose(flow.logit_lens().last_logits, logits, atol=tol * (1 + np.abs(logits).max()))
    np.testing.assert_allclose(flow.token_shares(1).sum(1), 1.0, atol=1e-5)


def test_post_ln_decoder_with_cross_attention(tiny):
    """BART's decoder is post-LN with cross-attention (and its norm) between the attention and the MLP: the token
    and head shares are measured, but no direct effect is claimed through norms the flow does not freeze."""
    bart = tiny("bart")
    flow = models.information_flow(bart, models.analyze(bart, TEXT, target="the cat chased"))
    assert flow.stack == "decoder"
    np.testing.assert_allclose(flow.token_shares(1).sum(1), 1.0, atol=1e-5)
    with pytest.raises(models.UnsupportedOperationError) as err:
        flow.direct_effect()
    assert err.value.params["why"] == "post_cross"
    assert flow.logit_lens().final_rank[-1] == 0
