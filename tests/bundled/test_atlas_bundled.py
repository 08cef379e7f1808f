"""Head atlas on the bundled models and the shipped corpora (issue 28): known heads found by their pattern, and
the labels' causal tests on a real decoder."""

from __future__ import annotations

import models
from models import atlas


def test_minilm_atlas_on_both_shipped_corpora(minilm, tmp_path):
    """minilm-l6's layer 0 head 2 attends the previous token almost always (0.9998 on the shipped sentences); its
    [CLS]/[SEP] heads put most weight on control tokens; the Turkish corpus reads through the same model."""
    en = atlas.build_atlas(minilm, atlas.shipped_corpus("en"), limit=60, root=tmp_path)
    tr = atlas.build_atlas(minilm, atlas.shipped_corpus("tr"), limit=60, root=tmp_path)
    for a in (en, tr):
        top = a.rank("previous", top=1).iloc[0]
        assert (top["layer"], top["head"]) == (0, 2) and top["previous_lo"] > 0.95
        assert a.rank("special", top=1).iloc[0]["special"] > 0.5
        t = a.table()
        assert ((t["previous_lo"] <= t["previous"]) & (t["previous"] <= t["previous_hi"])).all()
    found = atlas.find_heads("previous", top=2, root=tmp_path)
    assert list(found["layer"]) == [0, 0] and list(found["head"]) == [2, 2] and len(set(found["corpus"])) == 2


def test_smollm2_induction_heads_pass_their_causal_test(smollm2, tmp_path):
    """On repeated random tokens smollm2-135m's strongest induction head (layer 18 head 6, score 0.89) is the one
    whose switch-off raises the second copy's loss most (about 3 nats per token); the labels file says so."""
    a = atlas.build_atlas(smollm2, atlas.shipped_corpus("en"), limit=24, repeats=6, root=tmp_path)
    top = a.rank("induction_repeat", top=1).iloc[0]
    assert top["induction_repeat"] > 0.6 and top["layer"] > 10
    labels = atlas.causal_labels(smollm2, a, texts=6, sequences=4, k=2)
    ind = labels[(labels["label"] == "induction") & (labels["quantity"] == "second_copy_loss")]
    best = ind.sort_values("pattern_value", ascending=False).iloc[0]
    assert (best["layer"], best["head"]) == (top["layer"], top["head"])
    assert best["passed"] and best["lo"] > 1.0
    prev = labels[labels["label"] == "previous"]
    assert (prev["quantity"] == "downstream_induction").all() and prev["passed"].any()
    assert a.labels() is not None
    try:
        atlas.build_atlas(smollm2, atlas.corpus_from_texts(
            ["고양이가 쥐를 쫓았다. 개가 정원에서 잔다. 오늘은 날씨가 아주 좋다."]), root=tmp_path)
    except models.InvalidCorpusError as exc:
        assert exc.code == "corpus_language"
    else:
        raise AssertionError("a Korean corpus on smollm2-135m is refused")


def test_whisper_atlas_on_the_shipped_clips(tmp_path):
    """Whisper's encoder, decoder and cross-attention heads over the two shipped clips; cross-attention has no
    positional metrics (queries and keys are different sequences); a text corpus is refused with the reason."""
    loaded = models.load("whisper-base", device="cpu")
    a = atlas.build_atlas(loaded, atlas.shipped_clips(), root=tmp_path)
    t = a.table()
    assert set(t["stack"]) == {"encoder", "decoder", "cross"} and a.complete and a.done() == (2, 2)
    cross = t[t["stack"] == "cross"]
    assert cross["previous"].isna().all() and cross["entropy"].notna().all()
    enc = t[t["stack"] == "encoder"]
    assert enc["distance"].notna().all() and (enc["entropy"] > 0).all()
    assert list(a.examples("cross", 0, 0, k=2)["content"].str.endswith(".wav")) == [True, True]
    try:
        atlas.build_atlas(loaded, atlas.shipped_corpus("en"), root=tmp_path)
    except models.InvalidCorpusError as exc:
        assert exc.code == "corpus_kind"
    else:
        raise AssertionError("a text corpus on Whisper is refused")
