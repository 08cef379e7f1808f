"""Time left of an atlas build, from the tokens still to read.

The old estimate scaled seconds per character by the characters left, timed from the first text on; it was
wrong both ways: the first text pays for warming the model up (smollm2-135m: 2,366 s said after one text, 663 s
taken), and a long text costs its first ``max_tokens`` tokens only, however many characters follow.

:class:`Eta` estimates each unread text's tokens as ``min(max_tokens, characters × tokens per character)``
(tokens per character measured on the texts read whole so far, or the tokenizer's sample before any), and the
time per token from the wall clock between the first text's end and now (so the warm-up is left out, and
parallel workers count as the throughput they give). Seconds left = tokens left ÷ tokens per second.
"""

from __future__ import annotations

import time

import numpy as np


class Eta:
    """Progress of a build in texts and tokens, with the time left.

    Args:
        chars: int ``(texts,)``, the characters of every text to read (in any order).
        max_tokens: the limit each text is cut to.
        tokens_per_char: a first guess (:func:`models.atlas.corpus.check_language` measures it on a sample).
        clock: seconds (default :func:`time.perf_counter`).
    """

    def __init__(self, chars, max_tokens: int, tokens_per_char: float = 0.3, clock=time.perf_counter):
        self.chars = np.asarray(chars, dtype=np.int64)
        self.max_tokens = int(max_tokens)
        self.clock = clock
        self.texts = 0
        self.tokens = 0
        self.cut = 0
        self.whole_chars = 0
        self.whole_tokens = 0
        self.chars_done = 0
        self._guess = float(tokens_per_char) if tokens_per_char and tokens_per_char > 0 else 0.3
        self._unread = np.ones(len(self.chars), dtype=bool)
        self._first: tuple[float, int] | None = None  # (time, tokens) when the first text was read
        self._last = self._first

    @property
    def tokens_per_char(self) -> float:
        """Measured on the texts read uncut (the guess until one is)."""
        return self.whole_tokens / self.whole_chars if self.whole_chars else self._guess

    def add(self, index: int, tokens: int, truncated: int) -> None:
        """Text ``index`` (of ``chars``) read: its tokens read and tokens cut (0 if none)."""
        chars = int(self.chars[index])
        self._unread[index] = False
        self.texts += 1
        self.tokens += int(tokens)
        self.chars_done += int(chars)
        if truncated:
            self.cut += 1
        else:
            self.whole_chars += int(chars)
            self.whole_tokens += int(tokens)

    def tick(self) -> None:
        """The texts added so far are done now (after each text in process; after each shard on Ray, whose
        texts arrive together): the throughput is timed from the first tick."""
        now = self.clock()
        if self._first is None:
            self._first = (now, self.tokens)
        self._last = (now, self.tokens)

    def skip(self, index: int) -> None:
        """Text ``index`` was read before this build (a resumed one): not left, not timed."""
        self._unread[index] = False

    def tokens_left(self) -> float:
        """Tokens of the texts not read yet (estimated, see the module docstring)."""
        left = self.chars[self._unread]
        return float(np.minimum(self.max_tokens, np.ceil(left * self.tokens_per_char)).sum())

    def tokens_per_second(self) -> float | None:
        """Throughput since the first tick (None until a second one)."""
        if self._first is None or self._last is None or self._last[0] <= self._first[0]:
            return None
        return (self._last[1] - self._first[1]) / (self._last[0] - self._first[0])

    def seconds_left(self) -> float | None:
        """Tokens left ÷ tokens per second (None until two ticks)."""
        rate = self.tokens_per_second()
        if not rate:
            return None
        return self.tokens_left() / rate

    def fraction_tokens(self) -> float:
        """Share of the (estimated) tokens read."""
        total = self.tokens + self.tokens_left()
        return self.tokens / total if total else 1.0
