"""A Turkish text -> its words -> their morphemes, each with its exact span in the input.

Words are the word level's (:data:`models.analysis.tokens.WORD_PATTERN`: letter/digit runs with inner apostrophes,
and runs of other non-space characters), so a morpheme's word index names the same word the word level shows.
Each word is analysed by :mod:`models.turkish.analyzer` (zeyrek); the readings it ranks out of context are then
re-ranked in context (:func:`_context`):

- a capitalised word that does not start a sentence, or one with an apostrophe, is read as a proper noun first;
- after a word read as a genitive (``Ali'nin kitabı``), a possessive reading (P3sg, P3pl) comes first
  (the genitive-possessive construction: Göksel & Kerslake 2005, *Turkish: A Comprehensive Grammar*, §14.4);
- a string that is both a finite verb and a one-part word of the lexicon (``çıktı``: ``çık+tı`` or "printout",
  ``yedi``: ``ye+di`` or "seven") is the verb where a clause ends or right after an accusative object, the word
  elsewhere (Turkish puts its verb last); a word read alone ends its text, so it takes the verb;
- a capitalised stem before an apostrophe is labelled a noun (a name: ``Ali'ye``).

What each kind of word becomes:

- analysed words: a stem (kind ``stem``) and its suffixes (kind ``suffix``), each labelled (``Noun``, ``Acc``,
  ``Past`` ...; :data:`models.turkish.labels.LABELS` names them in English and Turkish);
- ``X'suffix`` whose ``X`` the lexicon lacks (``2024'te``, ``Işıl'a``): ``X`` is a stem (``Num`` for digits, else
  ``Noun``) and the suffix, apostrophe first (``'te``), is analysed on its own
  (:func:`models.turkish.analyzer.suffix_readings`);
- a number alone: one stem labelled ``Num``;
- a word the analyzer does not know: one morpheme of kind ``unknown`` (label ``Unk``) with the word as typed;
- a run of punctuation or symbols (``,``, ``?!``, an emoji): one morpheme of kind ``punct`` (label ``Punc``).

The morphemes of a word always spell it exactly (concatenation = the word, offsets = the input's), whatever the
letters (``İ``/``ı``, ``I``/``i``, decomposed ``İ``, ``â``/``î``/``û``, apostrophes ``'`` and ``’``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..analysis.tokens import WORD_PATTERN
from ..errors import DikkatError, InvalidArgumentError
from . import analyzer
from .analyzer import Part, Reading

MIN_SHARE = 0.6  # below this share of letter words analysed, a text is not taken for Turkish
KINDS = ("stem", "suffix", "unknown", "punct")
_WORDS = ("Noun", "Num", "Adj", "Adv")  # one-part readings a finite verb's string can also be (_context)
TURKISH_LETTERS = frozenset("abcçdefgğhıijklmnoöprsştuüvyz")  # after analyzer.normalise (no q, w, x; â -> a)


class NotTurkishError(DikkatError, ValueError):
    """The text does not read as Turkish: fewer than :data:`MIN_SHARE` of its words are known to the analyzer.
    The morpheme level is for Turkish; a page shows the word level instead. ``params``: ``share`` (float, the
    share analysed), ``words`` (how many words were judged)."""


@dataclass(frozen=True)
class Morpheme:
    """One morpheme of the input.

    Attributes:
        text: exactly ``input[start:end]`` (as typed: ``'ya``, ``kâğıd``, ``İstanbul``).
        start, end: character offsets into the input string (end exclusive).
        kind: ``stem``, ``suffix``, ``unknown`` (a word the analyzer does not know, kept whole) or ``punct``.
        label: the morpheme's tag (``Noun``, ``Acc``, ``Past``, ``P3sg``, ``A3pl``, ``Neg``, ``Num``, ``Unk``,
            ``Punc`` ...): :func:`models.turkish.labels.label_name` gives its name in English or Turkish.
        word: index of its word in :func:`segment_words`' list (the text's words in order).
        tags: ``label`` and the zero morphemes after it that carry meaning (``("Past", "A3sg")`` for the ``dı`` of
            ``kovaladı``: the third person has no suffix of its own).
        lemma: the dictionary form of a stem (``kitap`` for the ``kitab`` of ``kitabı``), else None.
    """

    text: str
    start: int
    end: int
    kind: str
    label: str
    word: int
    tags: tuple[str, ...] = ()
    lemma: str | None = None


@dataclass(frozen=True)
class MorphWord:
    """A word of the input and its morphemes.

    Attributes:
        text, start, end: the word as typed and its span. morphemes: in order; they spell ``text`` exactly.
        known: the analyzer read it (False for unknown words, numbers and punctuation).
        readings: how many analyses the analyzer offered (the first is shown; 0 when unknown).
        turkish: it counts as Turkish for the language check: spelled with the Turkish alphabet's letters and
            read as a word of the common lexicon (not only as a proper name or an abbreviation: Zemberek's
            lexicon lists "House", "The", "World" ...) or with a Turkish suffix; None for a capitalised word
            read only as a proper name without a suffix (``Ahmet``, ``London``), which the check leaves out.
    """

    text: str
    start: int
    end: int
    morphemes: tuple[Morpheme, ...]
    known: bool
    readings: int
    turkish: bool | None = False


def segment(text: str, *, check_language: bool = True) -> list[Morpheme]:
    """Every morpheme of ``text``, in order: the morphemes of :func:`segment_words`' words, one list.

    Raises:
        NotTurkishError: ``check_language`` and the text does not read as Turkish (:func:`segment_words`).
        InvalidArgumentError: ``text`` is not a string.
    """
    return [m for w in segment_words(text, check_language=check_language) for m in w.morphemes]


def segment_words(text: str, *, check_language: bool = True) -> list[MorphWord]:
    """The words of ``text`` (the word level's words, punctuation runs included) with their morphemes.

    An empty or blank text has no words (``[]``). Runs in ~1.5 s the first time (the analyzer loads its lexicon),
    then ~1 ms a word; nothing is fetched from the network.

    Args:
        check_language: raise :class:`NotTurkishError` when fewer than :data:`MIN_SHARE` of the words made of
            letters are known to the analyzer (words with digits and punctuation do not count; a text without
            letter words is never refused). With False every text is segmented, unknown words kept whole.

    Raises:
        NotTurkishError: see ``check_language``; its ``params`` are ``share`` and ``words``.
        InvalidArgumentError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"The text must be a string, got {type(text).__name__}.", code="arg_text",
                                   name="text", value=type(text).__name__)
    return list(_segment_words(text, bool(check_language)))


@functools.lru_cache(maxsize=64)
def _segment_words(text: str, check_language: bool) -> tuple[MorphWord, ...]:
    """:func:`segment_words`, kept for the last texts (a page draws the same text again on every click; the words
    are frozen dataclasses, so sharing them is safe; a refusal is raised again, never kept)."""
    words: list[MorphWord] = []
    previous: Reading | None = None
    initial = True
    judged = known = 0
    matches = list(WORD_PATTERN.finditer(text))
    for index, match in enumerate(matches):
        start, end = match.span()
        surface = match.group()
        if not any(c.isalnum() for c in surface):
            words.append(MorphWord(surface, start, end, (Morpheme(surface, start, end, "punct", "Punc", index,
                                                                  ("Punc",)),), False, 0))
            previous = None
            initial = initial or any(c in ".!?…" for c in surface)
            continue
        word, reading = _word(text, start, end, index, previous, initial, _clause_end(matches, index))
        words.append(word)
        if not any(c.isdigit() for c in surface) and word.turkish is not None:
            judged += 1
            known += word.turkish
        previous, initial = reading, False
    if check_language and judged and known / judged < MIN_SHARE:
        share = known / judged
        raise NotTurkishError(
            f"The text does not read as Turkish: the analyzer knows {share:.0%} of its {judged} words. The morpheme "
            "level is for Turkish text; use the word level.",
            code="not_turkish", share=share, words=judged)
    return tuple(words)


def turkish_share(text: str) -> float:
    """The share of ``text``'s letter words the analyzer knows (1.0 for a text without any): what
    :func:`segment_words` compares with :data:`MIN_SHARE`."""
    words = segment_words(text, check_language=False)
    judged = [w for w in words if w.morphemes[0].kind != "punct" and not any(c.isdigit() for c in w.text)
              and w.turkish is not None]
    return sum(bool(w.turkish) for w in judged) / len(judged) if judged else 1.0


def _clause_end(matches: list, index: int) -> bool:
    """The word ``matches[index]`` ends a clause: nothing but punctuation follows it up to a sentence's end
    (``.``, ``!``, ``?``, ``…``, ``;``, ``:``) or the end of the text, or a question particle (``mı``, ``miydi``)
    follows it. Turkish puts its verb last (SOV; Göksel & Kerslake 2005, ch. 23): a finite verb is likeliest
    there."""
    for match in matches[index + 1:]:
        surface = match.group()
        if any(c.isalnum() for c in surface):
            found = analyzer.readings(analyzer.normalise(surface)[0])
            return any(r.parts[0].label == "Ques" for r in found)
        if any(c in ".!?…;:" for c in surface):
            return True
    return True


def _word(text: str, start: int, end: int, index: int, previous: Reading | None, initial: bool,
          final: bool = False) -> tuple[MorphWord, Reading | None]:
    """One letter/digit word: its best reading in context, as :class:`Morpheme` objects spanning the input
    (``final``: it ends a clause, :func:`_clause_end`)."""
    surface = text[start:end]
    norm, first, after = analyzer.normalise(surface)
    cut = _apostrophe(surface, first)
    parts: tuple[Part, ...]
    if norm.isdigit():
        parts, known, count, reading = (Part(0, len(norm), "Num", ("Num",)),), False, 0, None
    else:
        found = analyzer.readings(norm)
        if cut is not None:
            found = tuple(r for r in found if any(p.start == cut for p in r.parts))
        capital = surface[:1].isupper() and (not initial or cut is not None)
        marks = _marks(surface, first) if any(c in "âîûÂÎÛ" for c in surface) else None
        verb = _verb_place(final, previous) if _verb_or_word(found) else None
        ranked = sorted(found, key=lambda r: (_context(r, capital or cut is not None, previous, cut is not None, verb)
                                              - (marks is not None and _keeps(marks, r.parts[0])),) + analyzer.tie(r))
        if ranked:
            reading = ranked[0]
            parts, known, count = reading.parts, True, len(ranked)
            if cut is not None and surface[:1].isupper() and parts[0].label not in ("Noun", "Num"):
                # a capitalised stem before an apostrophe is a name (``Ali'ye``: not the adjective ``ali``)
                parts = (Part(parts[0].start, parts[0].end, "Noun", ("Noun",), parts[0].lemma),) + parts[1:]
        elif cut is not None:
            parts, known = _split(norm, cut)
            count, reading = 0, None
        else:
            parts, known, count, reading = (), False, 0, None
    if not parts:
        unknown = Morpheme(surface, start, end, "unknown", "Unk", index, ("Unk",))
        return MorphWord(surface, start, end, (unknown,), False, 0), None
    bounds = [0] + [after[p.start - 1] for p in parts[1:]] + [len(surface)]
    morphemes = tuple(
        Morpheme(surface[a:b], start + a, start + b, "stem" if i == 0 else "suffix", p.label, index, p.tags,
                 p.lemma if i == 0 else None)
        for i, (p, a, b) in enumerate(zip(parts, bounds, bounds[1:])))
    turkish: bool | None = known and set(norm) <= TURKISH_LETTERS and (len(parts) > 1 or any(
        not r.proper and r.penalty < 6.0 and r.parts[0].label != "Interj" for r in analyzer.readings(norm)))
    if not turkish and len(parts) == 1 and surface[:1].isupper() and reading is not None and reading.proper:
        turkish = None  # a name: neither for nor against
    return MorphWord(surface, start, end, morphemes, known, count, turkish), reading


def _apostrophe(surface: str, first: list[int]) -> int | None:
    """Where the first apostrophe of the word falls in the normalised word (the number of normalised characters
    before it), or None without one."""
    at = next((i for i, c in enumerate(surface) if c in analyzer.APOSTROPHES), None)
    if at is None:
        return None
    cut = sum(1 for f in first if f < at)
    return cut if 0 < cut < len(first) else None


def _marks(surface: str, first: list[int]) -> dict[int, str]:
    """Normalised position -> circumflex vowel (``â``, ``î``, ``û``) where the word as typed has one."""
    return {j: surface[f].lower() for j, f in enumerate(first) if surface[f] in "âîûÂÎÛ"}


def _keeps(marks: dict[int, str], stem: Part) -> bool:
    """The stem's dictionary form has the circumflex vowels typed in its span (``hâlâ`` the adverb, not ``hal+a``):
    worth 1 in the ranking, since normalising for the analyzer drops them."""
    lemma = stem.lemma or ""
    inside = {j: c for j, c in marks.items() if j < stem.end}
    return bool(inside) and all(j < len(lemma) and lemma[j] == c for j, c in inside.items())


def _split(norm: str, cut: int) -> tuple[tuple[Part, ...], bool]:
    """``X'suffix`` that the lexicon does not know whole: ``X`` as a stem (``Num`` for digits, the best reading of
    ``X`` alone when it has one, else a ``Noun``: an apostrophe marks a proper name), the suffix read on its own.
    Returns the parts and whether the suffix was understood."""
    left, right = norm[:cut], norm[cut:]
    if left.isdigit():
        stem: tuple[Part, ...] = (Part(0, cut, "Num", ("Num",)),)
    else:
        alone = analyzer.readings(left)
        stem = alone[0].parts if alone else (Part(0, cut, "Noun", ("Noun",), left),)
    suffix = analyzer.suffix_readings(right)
    if suffix:
        return stem + tuple(Part(p.start + cut, p.end + cut, p.label, p.tags) for p in suffix[0].parts), True
    return stem + (Part(cut, len(norm), "Unk", ("Unk",)),), False


def _verb_or_word(found) -> bool:
    """The readings include a finite verb and a one-part noun, number, adjective or adverb spelling the same string
    (``çıktı``: ``çık+tı`` and the noun "printout"): the place in the sentence decides (:func:`_context`)."""
    return any(r.finite for r in found) and any(len(r.parts) == 1 and r.parts[0].label in _WORDS for r in found)


def _verb_place(final: bool, previous: Reading | None) -> bool:
    """Where a finite verb is at home: where a clause ends (``final``, :func:`_clause_end`) or right after an
    accusative object (``elmayı yedi``)."""
    return final or (previous is not None and previous.last == "Acc")


def _context(reading: Reading, proper_name: bool, previous: Reading | None, apostrophe: bool = False,
             verb: bool | None = None) -> float:
    """A reading's penalty in context (lower first): its own (:func:`models.turkish.analyzer.readings`), a
    proper-noun reading -2.5 where the word looks like a name, a possessive reading -1.5 after a genitive, a stem
    that is neither a noun nor a number +1 before an apostrophe (which follows names, numbers, abbreviations).

    ``verb``: None unless the word reads both as a finite verb (:attr:`models.turkish.analyzer.Reading.finite`) and
    as a one-part word (:func:`_verb_or_word`); else whether it stands where a verb is at home (:func:`_verb_place`;
    Turkish puts its verb last, Göksel & Kerslake 2005, ch. 23). There, a one-part noun, number, adjective or
    adverb spelling the same string is the lexicon's record of a word form, +1 (``çıktı`` "printout", ``yedi``
    "seven", ``yediler`` "the Seven", ``gelir`` "income"
    give way to ``çık+tı``, ``ye+di``, ``ye+di+ler``, ``gel+ir``); elsewhere the finite verb +1 (``yedi kedi``: the
    number; ``genç yazar kitabı yazdı``: ``yazar`` the noun)."""
    penalty = reading.penalty
    if verb is not None and (not verb and reading.finite
                             or verb and len(reading.parts) == 1 and reading.parts[0].label in _WORDS):
        penalty += 1.0
    if apostrophe and reading.parts[0].label not in ("Noun", "Num"):
        penalty += 1.0
    if proper_name and reading.proper:
        penalty -= 2.5
    if previous is not None and previous.last == "Gen" and {"P3sg", "P3pl"} & set(reading.labels):
        penalty -= 1.5
    return penalty
