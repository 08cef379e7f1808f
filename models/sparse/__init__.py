"""Masks per head at work: retrieval heads found by a needle in a haystack (:mod:`.needle`, Wu et al. 2024), what a
sparse-attention pattern keeps of each head's attention and the key/value cache each choice needs (:mod:`.kept`),
and the DuoAttention comparison of keeping the full context for the retrieval heads only (:mod:`.duo`)."""

from .kept import KEPT_PATTERNS, KeptShare, kept_share, kv_bytes, pattern_at
from .duo import DuoResult, DuoRow, duo_compare
from .needle import DEPTHS, Needle, NeedleRun, make_needles, retrieval_scores, run_needle

__all__ = ["DEPTHS", "DuoResult", "DuoRow", "duo_compare", "KEPT_PATTERNS", "KeptShare", "Needle", "NeedleRun",
           "kept_share", "kv_bytes", "make_needles",
           "pattern_at", "retrieval_scores", "run_needle"]
