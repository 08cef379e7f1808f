"""The Experiments page (issue 15) through Streamlit's AppTest: a run from the button, results drawn in both
languages, the published numbers next to ours."""

from __future__ import annotations

import numpy as np
from conftest import press_heavy
from links import open_linked

import models.experiments as E
from models.experiments import induction, prunable, sinks
from views import shared


def _clean(at) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _compare_rows(at) -> dict[str, str]:
    table = at.table[-1].value  # the published-vs-ours table closes each result
    return {str(row.iloc[0]).replace("\\", ""): str(row.iloc[2]).replace("\\", "") for _, row in table.iterrows()}


def test_the_clark_experiment_runs_from_its_button_in_both_languages(minilm):
    at = open_linked("views/experiments.py", "minilm-l6", {"exp_which": "clark"}, "The cat chased the mouse.")
    _clean(at)
    assert at.segmented_control(key="exp_which").value == "clark"
    assert at.selectbox(key="exp_model_clark").value == "minilm-l6"  # the sidebar's model, which this one runs on
    assert any("Estimated time here" in c.value for c in at.caption)  # "under a second" on minilm
    shared.CACHE.discard(("experiments", "clark", "minilm-l6"))
    press_heavy(at, "exp_run_clark")
    _clean(at)
    rows = _compare_rows(at)
    assert rows["Heads with over 50 % on the previous token"].startswith("1 (layer-head: 0-2)"), rows
    # issue 33: minilm-l6 puts a few per cent on [SEP], not "over half": the page says it did not hold here
    held = {str(row.iloc[0]).replace("\\", ""): str(row.iloc[3]) for _, row in at.table[-1].value.iterrows()}
    sep = next(v for k, v in held.items() if k.startswith("Share on [SEP]"))
    assert sep.startswith("✗ not reproduced here") and "over 50" in sep, held
    assert next(v for k, v in held.items() if k.startswith("Heads with over 50 % on the previous")).startswith("✓")
    assert any("This run took" in c.value for c in at.caption)
    at.radio(key="lang").set_value("tr").run()
    _clean(at)
    assert at.subheader[0].value == "3 · BERT'in kafaları nereye bakar"
    assert "Önceki tokene %50'den fazla veren kafalar" in _compare_rows(at)


def test_every_causal_lm_experiment_draws_its_result_and_the_published_numbers(smollm2):
    """Results computed here (short settings) and put where the page finds a finished run."""
    text = sinks.long_text()[:600]
    share = sinks.first_token_share(smollm2, text)
    stream = sinks.streaming_losses(smollm2, text, windows=(8, 16))
    shared.CACHE.put(("experiments", "sinks", "smollm2-135m"), E.SinksResult(share, stream, 1.0))
    shared.CACHE.put(("experiments", "induction", "smollm2-135m"),
                     induction.induction_heads(smollm2, length=12, sequences=1, controls=1))
    shared.CACHE.put(("experiments", "prunable", "smollm2-135m"),
                     prunable.heads_that_can_go(smollm2, ["The cat chased the mouse."], random_orders=1))
    at = open_linked("views/experiments.py", "smollm2-135m", {"exp_which": "sinks"}, "The cat chased the mouse")
    _clean(at)
    rows = _compare_rows(at)
    low, high = share.bottom_top()
    assert rows["First-token share: layers 0–1 / layers above"] == f"{100 * low:.1f} % / {100 * high:.1f} %"
    assert rows["Window of 8 alone, loss above full attention"] == f"+{stream.window_gap[0]:.2f} nats"
    assert at.button(key="exp_run_sinks").label == "Run again"
    for which, measure in (("induction", "Loss: first copy → second copy"),
                           ("prunable", "Metric with 79 % of heads off (38 of 48)")):
        at.segmented_control(key="exp_which").set_value(which).run()
        _clean(at)
        assert measure in _compare_rows(at), (which, _compare_rows(at))
    at.radio(key="lang").set_value("tr").run()
    _clean(at)
    assert np.any(["Michel ve ark." in str(v) for v in at.table[-1].value.iloc[:, 1]])
    assert at.query_params["exp_which"] == "prunable"


def test_whispers_alignment_heads_run_from_the_page_with_a_table_per_clip():
    at = open_linked("views/experiments.py", "whisper-base", {"exp_which": "alignment"}, "")
    _clean(at)
    shared.CACHE.discard(("experiments", "alignment", "whisper-base"))
    press_heavy(at, "exp_run_alignment")
    _clean(at)
    words = [list(tb.value.iloc[:, 0]) for tb in at.table[:2]]
    assert words[0] == ["The", "cat", "chased", "the", "mouse", "."], words
    ours = _compare_rows(at)[
        "Token times from the 8 alignment heads against transformers' timestamps: largest / mean gap"]
    largest, mean = (float(part.split()[0]) for part in ours.split(" / "))
    assert largest <= 0.25 and mean <= 0.08, ours  # measured 0.18 s / 0.045 s
    at.radio(key="lang").set_value("tr").run()
    _clean(at)
    assert list(at.table[0].value.columns)[1] == "başlangıç, bizim (sn)"


def test_a_class_shares_one_run_and_cannot_start_it_again(minilm, monkeypatch, tmp_path):
    from views import hosting

    config = tmp_path / "classroom.toml"
    config.write_text("max_chars = 200\n", encoding="utf-8")
    monkeypatch.setenv("DIKKAT_MODE", "classroom")
    monkeypatch.setenv("DIKKAT_CLASSROOM_CONFIG", str(config))
    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path / "ahead"))  # nothing computed ahead yet
    hosting.current.cache_clear()
    try:
        shared.CACHE.discard(("experiments", "clark", "minilm-l6"))
        at = open_linked("views/experiments.py", "minilm-l6", {"exp_which": "clark"}, "The cat chased the mouse.")
        _clean(at)
        press_heavy(at, "exp_run_clark")  # the first student starts it
        _clean(at)
        at = open_linked("views/experiments.py", "minilm-l6", {"exp_which": "clark"}, "Kedi fareyi kovaladı")
        _clean(at)
        assert not [b for b in at.button if b.key == "exp_run_clark"]  # the next one sees the result, no button
        assert any("Every session on this server sees this run." in c.value for c in at.caption)
        # another process (a replica, the next start) reads the run from disk and does not run it again
        shared.CACHE.discard(("experiments", "clark", "minilm-l6"))
        at = open_linked("views/experiments.py", "minilm-l6", {"exp_which": "clark"}, "The cat chased the mouse.")
        _clean(at)
        assert not [b for b in at.button if b.key == "exp_run_clark"]
        kept = [c.value for c in at.caption if "Kept on disk since" in c.value]
        assert kept and "This run took" in kept[0]
        assert ("experiments", "clark", "minilm-l6") in shared.CACHE
    finally:
        hosting.current.cache_clear()
        shared.CACHE.discard(("experiments", "clark", "minilm-l6"))


def test_the_sidebar_names_the_model_the_page_uses(smollm2):
    """Issue 33: with minilm-l6 in the sidebar, the sinks experiment runs on smollm2-135m; the sidebar showed
    minilm's description beside smollm2's device line and shape. The line under the picker now names the model
    the page uses when it is another one; on a page that uses the sidebar's model it does not."""
    for lang, words in (("en", "This page uses"), ("tr", "Bu sayfa")):
        at = open_linked("views/experiments.py", "minilm-l6", {"exp_which": "sinks"}, "The cat")
        at.session_state["lang"] = lang
        at.run()
        _clean(at)
        captions = [c.value for c in at.sidebar.caption]
        line = next(c for c in captions if "smollm2" in c and "30×9" in c)
        assert line.startswith(words) and "minilm" not in line, captions
    at = open_linked("views/explore.py", "minilm-l6", {}, "The cat")
    assert not any("This page uses" in c.value for c in at.sidebar.caption)


def test_the_turkish_experiments_draw_their_results_in_both_languages():
    """Issue 32: the grammar probes (both metrics: an encoder's embedding distance, a causal LM's suffix
    log-probability) and the inner language, from results put where the page finds a finished run."""
    import dataclasses

    import models
    from models.experiments import grammar, inner_language

    e5 = models.load("multilingual-e5-small", device="cpu")
    r = grammar.grammar_probes(e5, limit=2, controls=1)
    shared.CACHE.put(("experiments", "grammar", "multilingual-e5-small"), r)
    # a causal LM's result drawn from the same arrays (the page's other branch), kept under gemma3-270m
    causal = dataclasses.replace(r, stack="decoder", metric="suffix_logprob", full=-2.0, off=-2.6,
                                 random=np.array([-2.1]), agree_full=-1.0, agree_off=-1.3,
                                 agree_random=np.array([-1.1]),
                                 agreement_preference=0.7, agreement_preferred=0.75)
    shared.CACHE.put(("experiments", "grammar", "gemma3-270m"), causal)
    layers = 18
    rng = np.random.default_rng(0)
    lens = inner_language.InnerLanguage(("fr", "en"), inner_language.load_pairs()[:3], 1,
                                        rng.uniform(0, 0.3, (2, 3, layers + 1)),
                                        rng.uniform(0, 0.3, (2, 3, layers + 1)),
                                        np.array([0.67, 1.0]), layers, 1.0)
    shared.CACHE.put(("experiments", "inner_language", "gemma3-270m"), lens)
    try:
        at = open_linked("views/experiments.py", "multilingual-e5-small", {"exp_which": "grammar"},
                         "Kedi fareyi kovaladı")
        _clean(at)
        assert at.selectbox(key="exp_model_grammar").value == "multilingual-e5-small"
        rows = _compare_rows(at)
        measure = next(k for k in rows if k.startswith("Best head whose top target"))
        layer, head = r.best
        assert rows[measure].startswith(f"layer-head {layer}-{head}:"), rows
        assert any("Kedi fareyi kovaladı." in m.value and "The mouse, the cat chased." in m.value for m in at.markdown)
        assert any("no masked-LM head" in c.value for c in at.caption)
        at.selectbox(key="exp_model_grammar").set_value("gemma3-270m").run()
        _clean(at)
        rows = _compare_rows(at)
        assert rows["Top 4 tracking heads off: rise of the accusative suffix's surprisal"].startswith(
            "+0.60 nats"), rows
        assert any(k.startswith("Plural agreement") and v.startswith("log p gap +0.70 nats") for k, v in rows.items())
        at.segmented_control(key="exp_which").set_value("inner_language").run()
        _clean(at)
        rows = _compare_rows(at)
        assert "Last layer: Turkish above English" in rows and "Model read" in rows
        assert rows["Model read"].endswith("18 layers")
        at.radio(key="lang").set_value("tr").run()
        _clean(at)
        assert at.subheader[0].value == "7 · İçteki dil"
        assert "Son katman: Türkçe İngilizcenin üstünde" in _compare_rows(at)
        for model in ("multilingual-e5-small", "gemma3-270m"):  # the grammar probes in Turkish, both branches
            at = open_linked("views/experiments.py", model, {"exp_which": "grammar"}, "Kedi fareyi kovaladı")
            at.session_state["lang"] = "tr"
            at.run()
            _clean(at)
            assert at.subheader[0].value == "6 · Türkçe dilbilgisi sondaları"
            assert any("ÖNY" in m.value for m in at.markdown)
            assert any(k.startswith("Çoğul uyumu") for k in _compare_rows(at))
    finally:
        for key in (("experiments", "grammar", "multilingual-e5-small"), ("experiments", "grammar", "gemma3-270m"),
                    ("experiments", "inner_language", "gemma3-270m")):
            shared.CACHE.discard(key)
