"""Time left of an atlas build, from the texts still to read and what a text of their length costs.

The old estimate scaled seconds per character by the characters left, timed from the first text on; it was
wrong both ways: the first text pays for warming the model up (smollm2-135m: 2,366 s said after one text, 663 s
taken), and a long text costs its first ``max_tokens`` tokens only, however many characters follow. A single
rate in tokens per second is wrong too when lengths vary: an atlas's work per text grows with the square of its
tokens (every head's map), so the long texts of a corpus cost more per token than its sentences (on 10,000
mixed texts it said 1.5 times the time really left once a quarter was read).

:class:`Eta` estimates each unread text's tokens as ``min(max_tokens, characters × tokens per character)``
(tokens per character measured on the texts read whole so far, or the tokenizer's sample before any), and the
seconds a text of ``n`` tokens takes as ``a + b·n + c·n²``, fitted by least squares on the texts read (each
text's own analysis time; a term whose coefficient comes out negative is left out). Seconds left = the fitted
seconds of the unread texts ÷ the parallelism measured since the first tick (the texts' seconds summed ÷ the
wall clock: 1 in process, about the number of workers on Ray). Until 8 texts are timed, tokens left ÷ tokens
per second since the first tick.
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
        self._xtx = np.zeros((3, 3))  # normal equations of seconds ~ a + b n + c n² over the timed texts
        self._xty = np.zeros(3)
        self._timed = 0
        self._busy_since_first = 0.0
        self._first: tuple[float, int] | None = None  # (time, tokens) when the first text was read
        self._last: tuple[float, int] | None = self._first

    @property
    def tokens_per_char(self) -> float:
        """Measured on the texts read uncut (the guess until one is)."""
        return self.whole_tokens / self.whole_chars if self.whole_chars else self._guess

    def add(self, index: int, tokens: int, truncated: int, seconds: float | None = None) -> None:
        """Text ``index`` (of ``chars``) read: its tokens read, tokens cut (0 if none) and the seconds its
        analysis took (None: not timed)."""
        chars = int(self.chars[index])
        if seconds is not None and seconds >= 0 and self.texts:  # the first text warms the model up: not fitted
            n = float(tokens) / self.max_tokens  # scaled: the normal equations stay well conditioned
            x = np.array([1.0, n, n * n])
            self._xtx += np.outer(x, x)
            self._xty += x * float(seconds)
            self._timed += 1
            if self._first is not None:
                self._busy_since_first += float(seconds)
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

    def cost(self) -> np.ndarray | None:
        """The fitted ``(a, b, c)`` of seconds per text ``a + b·x + c·x²`` with ``x = n / max_tokens``
        (module docstring), or None before 8 texts are timed."""
        if self._timed < 8:
            return None
        keep = [0, 1, 2]
        while keep:
            sub = np.ix_(keep, keep)
            coef, *_ = np.linalg.lstsq(self._xtx[sub], self._xty[keep], rcond=None)
            if (coef >= 0).all():
                out = np.zeros(3)
                out[keep] = coef
                return out
            keep = keep[:-1] if coef[-1] < 0 else [k for k, c in zip(keep, coef) if c >= 0]
        return None

    def seconds_left(self) -> float | None:
        """Seconds left (module docstring); None until two ticks."""
        rate = self.tokens_per_second()
        if not rate:
            return None
        coef = self.cost()
        wall = self._last[0] - self._first[0] if self._first and self._last else 0.0
        if coef is None or wall <= 0 or self._busy_since_first <= 0:
            return self.tokens_left() / rate
        n = np.minimum(self.max_tokens, np.ceil(self.chars[self._unread] * self.tokens_per_char)) / self.max_tokens
        busy = float(coef[0] * len(n) + coef[1] * n.sum() + coef[2] * (n * n).sum())
        return busy / (self._busy_since_first / wall)

    def fraction_tokens(self) -> float:
        """Share of the (estimated) tokens read."""
        total = self.tokens + self.tokens_left()
        return self.tokens / total if total else 1.0
