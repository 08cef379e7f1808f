"""Tokens with exact character spans and words: how a text becomes the rows and columns of a map."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass


from .. import checks
from ..errors import BatchNotSupportedError


def _combining_marks() -> str:
    """Regex character-class body of every combining mark (Unicode categories Mn, Mc, Me): Arabic harakat,
    Devanagari vowel signs, the dot of a decomposed (NFD) "İ" ... ``\\w`` matches none of them."""
    import sys
    import unicodedata

    ranges: list[list[int]] = []
    for c in range(sys.maxunicode + 1):
        if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me"):
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


_MARKS = _combining_marks()


# Words: runs of letters/digits and the combining marks on them (with inner apostrophes), or runs of other
# non-space characters.
WORD_PATTERN = re.compile(rf"[\w{_MARKS}]+(?:['’][\w{_MARKS}]+)*|[^\w\s{_MARKS}]+")


@dataclass(frozen=True)
class Token:
    """One token of the input.

    Attributes:
        text: the exact substring of the input it covers (``input[start:end]``), "" for special tokens
            and for the second piece of a character split over two byte-level tokens.
        start, end: character offsets into its segment's text (end exclusive).
        special: True for the tokenizer's control tokens ([CLS], [SEP], <s>, </s>, BOS ...): those it added
            (empty span) and those typed in the text, which the tokenizer turns into the same token (their
            span is kept: :attr:`typed`). The unknown and mask tokens are not control tokens: a typed
            ``[MASK]`` is a word to fill.
        id: vocabulary id.
        piece: the tokenizer's raw token string (byte-level form such as ``Ä±``; never shown as a label).
        segment: 0 for ``text``/``target``, 1 for ``text_pair``.
    """

    text: str
    start: int
    end: int
    special: bool
    id: int
    piece: str
    segment: int = 0

    @property
    def typed(self) -> bool:
        """A special token that was typed in the text (``[SEP]``, ``<|endoftext|>``): it covers characters."""
        return self.special and self.end > self.start

    @property
    def label(self) -> str:
        """Display label: the text without surrounding whitespace; the piece for special tokens;
        ``␣``/``⏎`` for whitespace-only tokens; ``·`` for a continuation byte of a split character; a character
        that draws as nothing (zero-width space, byte-order mark, soft hyphen) as its code point, ``‹U+200B›``."""
        if self.special:
            return self.piece
        stripped = self.text.strip()
        if stripped:  # a character that draws as nothing (U+200B, U+FEFF, U+00AD ...) as its code point
            return "".join(c if c.isprintable() else f"‹U+{ord(c):04X}›" for c in stripped)
        if self.text:
            return "⏎" if "\n" in self.text else "␣"
        return "·"


@dataclass(frozen=True)
class Word:
    """A word of the input and the tokens it is made of.

    Attributes:
        text: the word as typed. start/end: character span. segment: as for :class:`Token`.
        tokens: indices into the token list, in order.
    """

    text: str
    start: int
    end: int
    segment: int
    tokens: tuple[int, ...]


def tokens_from_encoding(enc: dict, texts: list[str], tokenizer, index: int = 0) -> list[Token]:
    """Build :class:`Token` objects from a fast tokenizer's output.

    Offsets that overlap the previous token's (a character split over byte-level tokens) are clipped,
    so the tokens' ``text`` fields joined in order reproduce each segment exactly.

    Args:
        enc: the tokenizer's output with ``input_ids``, ``offset_mapping`` and ``special_tokens_mask``
            (character offsets), batched (``enc[key][index]``).
        texts: the segments' texts (``[text]`` or ``[text, text_pair]``) the offsets index into.
        tokenizer: the fast tokenizer that produced ``enc`` (for the raw pieces).
        index: batch row.

    Returns:
        one :class:`Token` per input id, in order.
    """
    ids = enc["input_ids"][index]
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    offsets = enc["offset_mapping"][index]
    offsets = offsets.tolist() if hasattr(offsets, "tolist") else list(offsets)
    special = enc["special_tokens_mask"][index]
    special = special.tolist() if hasattr(special, "tolist") else list(special)
    seq_ids = enc.sequence_ids(index) if hasattr(enc, "sequence_ids") else [0] * len(ids)
    type_ids = enc["token_type_ids"][index] if "token_type_ids" in enc else None
    pieces = tokenizer.convert_ids_to_tokens(ids)
    control = control_token_ids(tokenizer)
    tokens: list[Token] = []
    last_end = {0: 0, 1: 0}
    previous_segment = 0
    for i, (tid, (start, end), spec, seg, piece) in enumerate(zip(ids, offsets, special, seq_ids, pieces)):
        is_special = bool(spec) or seg is None
        if seg is not None:
            segment = previous_segment = seg
        elif type_ids is not None and int(type_ids[i]) in (0, 1):
            segment = int(type_ids[i])  # BERT: the final [SEP] of a pair belongs to segment B
        else:
            segment = previous_segment
        if is_special:
            tokens.append(Token("", last_end[segment], last_end[segment], True, int(tid), piece, segment))
            continue
        start = max(int(start), last_end[segment])
        end = max(int(end), start)
        text = texts[segment][start:end]
        # a control token typed in the text ("[SEP]" becomes the real [SEP]): special, with its span
        typed = int(tid) in control and end > start and text.strip() == str(piece).strip()
        tokens.append(Token(text, start, end, typed, int(tid), piece, segment))
        last_end[segment] = end
    return tokens


def control_token_ids(tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's control tokens: its special tokens (``all_special_ids`` and added tokens
    marked special) but the mask token, unless it also serves as BOS, EOS, SEP, CLS or padding. A token
    with one of these ids counts as typed only where the text spells it out (an ``[UNK]`` standing for
    characters the vocabulary lacks does not; smollm2's ``<|endoftext|>``, its unknown token, typed does)."""
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    ids |= {i for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
            if getattr(t, "special", False)}
    roles = {getattr(tokenizer, f"{r}_token_id", None) for r in ("bos", "eos", "sep", "cls", "pad")}
    mask = getattr(tokenizer, "mask_token_id", None)
    if mask not in roles:
        ids.discard(mask)
    return frozenset(int(i) for i in ids if isinstance(i, int))


def group_words(tokens: list[Token], texts: list[str]) -> list[Word]:
    """Group tokens into the words of the input (``WORD_PATTERN``: letter/digit runs, punctuation runs).

    A token belongs to the word its first non-space character falls in. Special tokens and
    whitespace-only tokens belong to no word; a continuation byte joins the previous token's word.

    Args:
        tokens: from :func:`tokens_from_encoding`. texts: the segments' texts.

    Returns:
        the words that own at least one token, segment by segment, in text order.
    """
    words: list[Word] = []
    for segment, text in enumerate(texts):
        spans = [(m.start(), m.end()) for m in WORD_PATTERN.finditer(text)]
        starts = [a for a, _ in spans]
        members: list[list[int]] = [[] for _ in spans]
        last_word = None
        for i, tok in enumerate(tokens):
            if tok.special or tok.segment != segment:
                continue
            if tok.text == "" and last_word is not None:
                members[last_word].append(i)
                continue
            lead = len(tok.text) - len(tok.text.lstrip())
            pos = tok.start + lead
            if pos >= tok.end:
                continue
            # the word containing pos, else the first word starting inside the token
            w = bisect.bisect_right(starts, pos) - 1
            if not (w >= 0 and pos < spans[w][1]):
                w += 1
                if not (w < len(spans) and spans[w][0] < tok.end):
                    continue
            members[w].append(i)
            last_word = w
        for (a, b), idx in zip(spans, members):
            if idx:
                words.append(Word(text[a:b], a, b, segment, tuple(idx)))
    return words


def check_text(text, what: str) -> str:
    """``text`` checked as one text of :func:`models.analyze` (:func:`models.checks.text`).

    Raises:
        BatchNotSupportedError: a list or tuple of texts.
        InvalidArgumentError: not a string, or a lone surrogate in it.
        EmptyTextError: blank.
    """
    if isinstance(text, (list, tuple)):
        raise BatchNotSupportedError(
            f"analyze() takes one {what} per call, got {len(text)}: call it once per text, e.g. "
            "[analyze(model, t) for t in texts], so each Analysis has its own tokens without padding.",
            code="batch_not_supported", count=len(text)
        )
    return checks.text(text, what)


def truncate(tok, text: str, text_pair: str | None, enc_full, limit: int):
    """``tok(text, text_pair, truncation=True, max_length=limit)`` with offsets and special-token mask.

    For a long pair the fast tokenizer builds every combination of the two texts' overflowing pieces
    (memory grows with the product of their lengths: 1.1 GiB for two 20,000-character texts). So each text
    is first cut just after the tokens the truncation keeps (``longest_first``: the longer text loses tokens
    until both fit, as the tokenizers library does, read from ``enc_full``'s per-text counts) and the cut pair
    is tokenized without truncation. The result is used only when its ids equal the kept tokens of the
    uncut text; otherwise (a cut that changed how the last word splits) the tokenizer truncates the whole
    texts itself."""
    kwargs = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    if text_pair is not None and hasattr(enc_full, "sequence_ids"):
        seq = enc_full.sequence_ids()
        ids = [[i for i, s in zip(enc_full["input_ids"], seq) if s == k] for k in (0, 1)]
        offsets = [[o for o, s in zip(enc_full["offset_mapping"], seq) if s == k] for k in (0, 1)]
        budget = limit - tok.num_special_tokens_to_add(pair=True)
        n1, n2 = len(ids[0]), len(ids[1])
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > budget else max(n1, budget - n1)
        if n1 + n2 > budget:
            n1 = budget // 2
            n2 = n1 + budget % 2
        keep = (n2, n1) if swap else (n1, n2)
        if min(keep) > 0:
            cut = [t[:offsets[k][keep[k] - 1][1]] for k, t in enumerate((text, text_pair))]
            enc = tok(cut[0], cut[1], truncation=False, **kwargs)
            got = enc.sequence_ids()
            if all([i for i, s in zip(enc["input_ids"], got) if s == k] == ids[k][:keep[k]] for k in (0, 1)):
                return enc
    return tok(text, text_pair, truncation=True, max_length=limit, **kwargs)


def batched(enc):
    """Wrap a single (unbatched) encoding so ``enc[key][0]`` works and sequence_ids stays available."""

    class _One:
        def __init__(self, e):
            self.e = e

        def __getitem__(self, key):
            return [self.e[key]]

        def __contains__(self, key):
            return key in self.e

        def sequence_ids(self, index=0):
            return self.e.sequence_ids(index) if hasattr(self.e, "sequence_ids") else [0] * len(self.e["input_ids"])

    return _One(enc)
