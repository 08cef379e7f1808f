"""Head atlas: what every head does across a corpus (issue 28).

* :mod:`.corpus`: the shipped English and Turkish corpora and the user's own (``.txt``, ``.csv``, ``.jsonl``).
* :mod:`.metrics`: per-text sums of each head's weights and the pooled metrics (HeadVis/Neuronpedia's six:
  self, previous-token, entropy, query-key distance and its variance, induction; and first-token/sink,
  special-token, punctuation and same-word shares), with bootstrap intervals over texts.
* :mod:`.build`: :func:`build_atlas`, resumable, weights block by block.
* :mod:`.store`: Parquet parts on disk under the cache folder, read with DuckDB.
* :mod:`.atlas`: :class:`Atlas` (metrics, strongest examples, related heads) and :func:`find_heads` across every
  atlas on disk.
* :mod:`.labels`: causal labels: a pattern is a label only when switching the head off moves what it predicts.
* :mod:`.embedding`: a head's queries and keys over the corpus in one 2-D PCA.
* :mod:`.verdict`: each ranked head's verdict (proven, pattern only, untested) with its effect interval.
* :mod:`.eta`: the time left of a build, from the tokens left.
* :mod:`.stream`: a corpus file read in a stream (10k-1M texts), and :mod:`.cluster`: the atlas and its causal
  labels on Ray (imported only there, only when asked for).

Example::

    import models
    from models import atlas
    m = models.load("minilm-l6")
    a = atlas.build_atlas(m, atlas.shipped_corpus("en"))
    a.rank("previous", top=5)
"""

from .atlas import PROFILE, RANKABLE, Atlas, find_heads, forget_open
from .build import MAX_TOKENS, Settings, build_atlas, folder_for
from .corpus import (Corpus, check_language, corpus_from_bytes, corpus_from_texts, load_corpus, shipped_clips,
                     shipped_corpus)
from .labels import LABELS, causal_labels, second_copy_effects
from .metrics import METRICS, SUMS, TextSums, bootstrap, induction_pairs, pooled

__all__ = ["LABELS", "causal_labels", "second_copy_effects", "Atlas", "Corpus", "MAX_TOKENS", "METRICS", "PROFILE",
           "RANKABLE", "SUMS", "Settings", "TextSums",
           "bootstrap", "build_atlas", "check_language", "corpus_from_bytes", "corpus_from_texts", "find_heads",
           "forget_open",
           "folder_for", "induction_pairs", "load_corpus", "pooled", "shipped_clips", "shipped_corpus"]
