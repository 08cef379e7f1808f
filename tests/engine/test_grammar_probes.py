"""Experiments 6 and 7 (issue 32): the Turkish grammar probes and the inner language, on their shipped pair sets
(every item's morphemes found by the real segmenter), on hand-made attention, and on tiny random models."""

from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch

import models
from models import experiments as E
from models.experiments import grammar as G
from models.experiments import grammar_measures as GM
from models.experiments import inner_language as I
from models.experiments.verdicts import verdicts


# ------------------------------------------------------------------------------------------- the pair sets
def test_the_grammar_pairs_load_and_every_role_is_found_by_the_segmenter():
    pairs = G.load_pairs()
    assert tuple(pairs["orders"]) == G.ORDERS and tuple(pairs["cases"]) == G.CASES
    for name in ("word_order", "case", "agreement"):
        assert len(pairs[name]) >= 20, name
        assert len({it["id"] for it in pairs[name]}) == len(pairs[name])
    for it in pairs["word_order"]:
        for order in G.ORDERS:
            text = it[order]
            r = G.roles(text, it["subject"], it["object"], it["verb"])
            assert r.case_label == "Acc", text
            assert text[slice(*r.case)].lower() in ("yi", "yı", "yu", "yü"), text  # vowel-final objects: -yI
            assert r.agreement is None and r.case in r.others and not set(r.verb) & set(r.others)
        words = [w for w in it["SOV"].rstrip(".").split()]
        for order in G.ORDERS:  # the same three words in another order (only the first letter's case changes)
            assert sorted(GM._fold(w) for w in it[order].rstrip(".").split()) == sorted(GM._fold(w) for w in words)
    for it in pairs["case"]:
        assert len(it["sentences"]) >= 2 and set(it["sentences"]) <= set(G.CASES)
        for label, text in it["sentences"].items():
            r = G.roles(text, it["subject"], it["objects"][label], it["verb"])
            assert r.case_label == label, (text, r)
            assert text == f"{it['subject']} {it['objects'][label]} {it['verb']}."  # only the object changes
    for it in pairs["agreement"]:
        r = G.roles(it["plural"], it["subject"], it["object"], it["verb"])
        assert r.agreement is not None and it["plural"][slice(*r.agreement)] in ("lar", "ler"), it["plural"]
        assert r.case_label == "Acc"
        m = G.roles(it["mismatch"], it["subject_singular"], it["object"], it["verb"])
        assert m.agreement is not None, it["mismatch"]
        s = G.roles(it["singular"], it["subject_singular"], it["object"], it["verb_singular"])
        assert s.agreement is None, it["singular"]


def test_the_translation_pairs_load_with_three_languages():
    pairs = I.load_pairs()
    assert len(pairs) >= 30
    for p in pairs:
        assert set(p) == {"en", "fr", "tr"} and all(p[k] and p[k] == p[k].strip() for k in p)
        assert p["en"] != p["tr"] and p["en"] != p["fr"]
    assert len({p["tr"] for p in pairs}) == len(pairs)


def test_roles_refuse_a_word_that_is_not_there():
    with pytest.raises(models.InvalidArgumentError) as err:
        G.roles("Kedi fareyi kovaladı.", "Köpek", "fareyi", "kovaladı")
    assert err.value.code == "arg_choice" and err.value.params["value"] == "Köpek"


# ------------------------------------------------------------------------------------------- measures by hand
def test_attention_to_sums_the_columns_and_averages_the_rows():
    w = np.array([[0.1, 0.2, 0.7, 0.0],
                  [0.0, 0.5, 0.25, 0.25],
                  [0.4, 0.4, 0.1, 0.1],
                  [0.25, 0.25, 0.25, 0.25]])
    # rows 1 and 2 attending to columns 2 and 3: (0.25 + 0.25 + 0.1 + 0.1) / 2
    assert G.attention_to(w, [1, 2], [2, 3]) == pytest.approx(0.35)
    stacked = np.stack([w, np.eye(4)])[None]  # (1 layer, 2 heads, 4, 4)
    got = G.attention_to(stacked, [1, 2], [2, 3])
    assert got.shape == (1, 2) and got[0, 0] == pytest.approx(0.35) and got[0, 1] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        G.attention_to(w, [], [1])


def test_top_target_and_tracking_share_by_hand():
    w = np.array([[0.1, 0.2, 0.7, 0.0],
                  [0.0, 0.5, 0.25, 0.25],
                  [0.4, 0.4, 0.1, 0.1],
                  [0.25, 0.25, 0.25, 0.25]])
    # row 3 attends the candidates 0, 1, 2 equally: the first wins; row 0 to 2 (0.7)
    assert int(G.top_target(w, [3], [0, 1, 2])) == 0 and int(G.top_target(w, [0], [0, 1, 3])) == 1
    assert int(G.top_target(w, [0, 1], [1, 2])) == 2  # mean of rows 0-1: 0.35 on 1, 0.475 on 2
    # three items, two heads: head 0 hits the suffix in both orders in items 0 and 2, head 1 only in item 1
    first = np.array([[5, 1], [3, 3], [4, 0]])
    second = np.array([[2, 1], [0, 7], [6, 2]])
    suffix_first, suffix_second = np.array([5, 3, 4]), np.array([2, 7, 6])
    share = G.tracking_share(first, second, suffix_first, suffix_second)
    assert share.tolist() == pytest.approx([2 / 3, 1 / 3])


def test_suffix_logprob_counts_the_pieces_over_the_span():
    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [1 / 3, 1 / 3, 1 / 3]]))
    ids = [0, 1, 2, 0]
    spans = [(0, 0), (0, 4), (4, 6), (6, 7)]
    special = [True, False, False, False]
    # the suffix is characters 4..6: token 2, predicted by logits[1]: p = 0.1
    assert G.suffix_logprob(logits, ids, spans, special, 4, 6) == pytest.approx(np.log(0.1), abs=1e-6)
    # a span over tokens 2 and 3: p(2 | 1) p(0 | 2) = 0.1 * 0.2
    assert G.suffix_logprob(logits, ids, spans, special, 5, 7) == pytest.approx(np.log(0.02), abs=1e-6)
    assert np.isnan(G.suffix_logprob(logits, ids, spans, special, 9, 10))  # no piece covers it


def test_lens_probabilities_end_at_the_models_own_prediction(tiny):
    gpt2 = tiny("gpt2")
    a = models.analyze(gpt2, "the cat chased the mouse", keep_logits=True)
    flow = models.information_flow(gpt2, a)
    probs = I.lens_probabilities(flow, [3, 7, 11])
    assert probs.shape == (gpt2.stacks["decoder"][0] + 1, 3)
    want = torch.softmax(torch.from_numpy(np.asarray(a.logits[-1], dtype=np.float64)), -1)[[3, 7, 11]].numpy()
    assert probs[-1] == pytest.approx(want, abs=1e-5)


def test_the_prompt_and_the_first_token():
    pairs = I.load_pairs()
    p = I.prompt(pairs, 0, "fr", shots=2)
    lines = p.split("\n")
    assert len(lines) == 3 and lines[-1] == f'Français: "{pairs[0]["fr"]}" - Türkçe: "'
    assert lines[0] == f'Français: "{pairs[1]["fr"]}" - Türkçe: "{pairs[1]["tr"]}"'
    assert I.prompt(pairs, 0, "en", shots=0) == f'English: "{pairs[0]["en"]}" - Türkçe: "'
    for bad in ({"source": "de"}, {"index": len(pairs)}, {"shots": -1}):
        with pytest.raises(models.InvalidArgumentError):
            I.prompt(pairs, **{"index": 0, "source": "fr", "shots": 1, **bad})


# ------------------------------------------------------------------------------------------- tiny models
@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_grammar_probes_on_tiny_models(tiny, arch):
    loaded = tiny(arch)
    seen = []
    r = G.grammar_probes(loaded, limit=2, top=1, controls=1, progress=seen.append)
    layers, heads = next(iter(loaded.stacks.values()))
    assert r.verb_to_acc.shape == (4, layers, heads) and r.verb_to_case.shape == (3, layers, heads)
    assert ((r.tracking >= 0) & (r.tracking <= 1)).all() and 0 < r.tracking_chance < 1
    assert ((r.verb_to_acc >= 0) & (r.verb_to_acc <= 1 + 1e-6)).all()
    assert ((r.agree_to_subject >= 0) & (r.agree_to_subject + r.agree_to_object <= 1 + 1e-6)).all()
    assert len(r.top) == 1 and r.random.shape == (1,)
    assert r.metric == ("suffix_logprob" if arch == "gpt2" else "case_distance")
    assert np.isfinite(r.full) and np.isfinite(r.off)
    assert np.isfinite(r.agreement_preference) == (arch == "gpt2")
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    assert r.items == {"word_order": 2, "case": 2, "agreement": 2} and r.examples["SOV"] == "Kedi fareyi kovaladı."
    assert len(verdicts("grammar", r)) == 3


def test_grammar_probes_refuse_odd_arguments(tiny):
    gpt2 = tiny("gpt2")
    for kwargs in ({"limit": 0}, {"top": 0}, {"top": 100}, {"controls": -1}, {"seed": -1}, {"limit": "2"}):
        with pytest.raises(models.InvalidArgumentError):
            G.grammar_probes(gpt2, **kwargs)
    with pytest.raises(models.UnsupportedOperationError) as err:
        G.grammar_probes(tiny("t5"))
    assert err.value.code == "arg_choice" and err.value.params["value"] == "encoder-decoder"


def test_inner_language_on_a_tiny_decoder(tiny):
    gpt2 = tiny("gpt2")
    r = I.inner_language(gpt2, limit=3, shots=1)
    layers = gpt2.stacks["decoder"][0]
    assert r.turkish.shape == (2, len(r.words), layers + 1) == r.english.shape and len(r.words) <= 3
    assert ((r.turkish >= 0) & (r.turkish + r.english <= 1 + 1e-9)).all()
    assert r.tasks == ("fr", "en") and r.dropped >= 0 and r.layers == layers
    assert r.english_peak(0)[0] < layers + 1
    assert len(verdicts("inner_language", r)) == 3
    with pytest.raises(models.UnsupportedOperationError):
        I.inner_language(tiny("bert"))
    for kwargs in ({"tasks": []}, {"tasks": "fr"}, {"tasks": ["de"]}, {"limit": 0}, {"shots": 9}):
        with pytest.raises(models.InvalidArgumentError):
            I.inner_language(gpt2, **kwargs)


def test_both_are_registered_with_estimates(tiny):
    for key, model in (("grammar", "multilingual-e5-small"), ("inner_language", "gemma3-270m")):
        exp = E.get(key)
        assert model in exp.models and exp.sources
    assert E.estimate_seconds("grammar", tiny("bert")) > 0
    assert E.estimate_seconds("inner_language", tiny("gpt2")) > 0


# ------------------------------------------------------------------------------------------- verdicts
def test_grammar_and_inner_language_rules():
    r = NS(tracking=np.array([[0.1, 0.6]]), full=-2.0, off=-3.0, random=np.array([-2.1, -2.4]),
           agreement_preference=0.5)
    assert [v.held for v in verdicts("grammar", r)] == [True, True, True]
    # 0.4 < 0.5; the top heads' drop (0.2) is inside the random draws (up to 0.4); an encoder's agreement is not judged
    r = NS(tracking=np.array([[0.1, 0.4]]), full=0.01, off=0.0098, random=np.array([0.0096]),
           agreement_preference=float("nan"))
    assert [v.held for v in verdicts("grammar", r)] == [False, False, None]
    turkish = np.array([0.0, 0.0, 0.01, 0.05, 0.4])
    english = np.array([0.0, 0.01, 0.12, 0.08, 0.05])
    r = NS(mean=lambda task=0: (turkish, english))
    assert [v.held for v in verdicts("inner_language", r)] == [True, True, None]
    r = NS(mean=lambda task=0: (english * 0.1, english * 0.2))  # English never reaches 5 %, and wins at the end
    assert [v.held for v in verdicts("inner_language", r)] == [False, False, None]
