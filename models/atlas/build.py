"""Computing an atlas: every text of a corpus through :func:`models.analyze`, each head's sums kept on disk.

:func:`build_atlas` is resumable: texts already written (:func:`models.atlas.store.done_texts`) are not read
again. Long texts are read as :func:`models.analyze` reads them (weights on demand, block by block), so memory
stays within the analysis budgets whatever the corpus.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import datetime, UTC
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING
from collections.abc import Callable

import numpy as np

from .. import checks
from ..analysis import analyze
from ..analysis.collect import feed_blocks, key_flags
from ..errors import UnsupportedOperationError
from ..loading.model import LoadedModel
from . import store
from .corpus import Corpus, check_language
from .eta import Eta
from .metrics import SUMS, TOP_KEYS, TextSums

if TYPE_CHECKING:
    from .stream import CorpusFile

#: the longest text read, in tokens, unless asked otherwise (Neuronpedia's ``--seq-len``)
MAX_TOKENS = 512
#: repeated-random-token sequences read besides the corpus (decoders), and tokens per copy
REPEATS = 16
REPEAT_LENGTH = 50
#: texts per part file (an interrupted build loses at most this many)
PART_TEXTS = 16
#: a text whose weights (every stack, float32) fit in this many bytes is analysed with its weights kept, so they
#: are read from memory instead of by a second forward pass (smollm2-135m at 512 tokens: 283 MB); a longer text
#: is read block by block (:class:`models.analysis.store.Replay`), never whole
KEEP_BYTES = 320 << 20


@dataclass(frozen=True)
class Settings:
    """What an atlas depends on besides the model and the corpus.

    Attributes:
        max_tokens: each text cut to this many tokens. limit: only the first ``limit`` texts (None: all).
        repeats, repeat_length: repeated-random-token sequences (Olsson et al. 2022, §2) and their tokens per
            copy; 0 repeats for none.
    """

    max_tokens: int = MAX_TOKENS
    limit: int | None = None
    repeats: int = REPEATS
    repeat_length: int = REPEAT_LENGTH

    @property
    def tag(self) -> str:
        return f"t{self.max_tokens}-n{self.limit or 'all'}-r{self.repeats}x{self.repeat_length}"


Progress = Callable[[int, int, float | None], None]


def check_settings(loaded: LoadedModel, max_tokens, limit, repeats, repeat_length) -> Settings:
    """:class:`Settings` from arguments checked (``InvalidArgumentError`` with code ``arg_whole``)."""
    if max_tokens is None:
        max_tokens = max(2, min(MAX_TOKENS, loaded.max_positions))
    if repeat_length is None:
        repeat_length = max(2, min(REPEAT_LENGTH, (max_tokens if isinstance(max_tokens, int) else 2) // 2 - 1))
    return Settings(max_tokens=checks.whole("max_tokens", max_tokens, 2, max(2, loaded.max_positions)),
                    limit=checks.whole("limit", limit, 1, none=True),
                    repeats=checks.whole("repeats", repeats, 0, 1000),
                    repeat_length=checks.whole("repeat_length", repeat_length, 2, max(2, loaded.max_positions // 2)))


def folder_for(loaded: LoadedModel | SimpleNamespace, corpus: Corpus | CorpusFile, settings: Settings,
               root: Path | None = None) -> Path:
    """The atlas folder of (model, corpus, settings) (see :mod:`models.atlas.store`); of ``loaded`` only its
    ``name`` is read, of ``corpus`` its ``name`` and ``digest``.

    Raises:
        InvalidArgumentError: ``loaded`` without a name (a loaded model, or what stands for one on a Ray driver,
            which never loads it), a ``corpus`` without a name and digest (a :class:`Corpus`, or a streamed
            :class:`~models.atlas.stream.CorpusFile`), not :class:`Settings`, or not a folder's path.
    """
    if not isinstance(getattr(loaded, "name", None), str):
        checks.loaded_model(loaded)  # says what it must be
    if not (isinstance(getattr(corpus, "name", None), str) and isinstance(getattr(corpus, "digest", None), str)):
        checks.instance("corpus", corpus, Corpus, "a Corpus (atlas.load_corpus) or a CorpusFile")
    checks.instance("settings", settings, Settings, "atlas Settings")
    if root is not None:
        checks.instance("root", root, (str, Path), "a folder's path")
    root = store.atlas_root() if root is None else Path(root)
    return root / store.safe(loaded.name) / f"{store.safe(corpus.name)}-{corpus.digest}-{settings.tag}"


def _items(loaded: LoadedModel, corpus: Corpus, settings: Settings) -> tuple[list[tuple[str, int, str]], str]:
    """``(grp, index, text)`` of every text to read, and why there are no repeated sequences ("" if there are)."""
    texts = corpus.texts[: settings.limit] if settings.limit else corpus.texts
    repeats, why = repeat_items(loaded, corpus.audio, settings)
    return [("corpus", i, t) for i, t in enumerate(texts)] + repeats, why


def repeat_items(loaded: LoadedModel, audio: bool, settings: Settings) -> tuple[list[tuple[str, int, str]], str]:
    """The ``("repeat", seed, text)`` items of the repeated random sequences, and why there are none ("" if
    there are)."""
    if audio:
        return [], "a speech model reads clips: no repeated random tokens."
    if not settings.repeats:
        return [], ""
    if loaded.family != "decoder":
        return [], f"repeated random tokens are read by decoders only; '{loaded.name}' is an {loaded.family}."
    from ..experiments.induction import repeated_text

    items = []
    try:
        for seed in range(settings.repeats):
            items.append(("repeat", seed, repeated_text(loaded, settings.repeat_length, seed)[0]))
    except UnsupportedOperationError as exc:
        return items, str(exc)
    return items, ""


def new_manifest(model: dict, corpus, settings: Settings, counts: dict, no_repeats: str, language: dict) -> dict:
    """The manifest of an atlas not started yet (:mod:`models.atlas.store`). ``model``: :func:`model_facts`;
    ``counts``: items per group (``corpus``, ``repeat``)."""
    return {"version": store.VERSION, **model,
            "corpus": {"name": corpus.name, "digest": corpus.digest, "texts": len(corpus), "language": corpus.language,
                       "source": corpus.source, "licence": corpus.licence},
            "settings": asdict(settings), "items": counts, "no_repeats": no_repeats, "tokenizer": language,
            "complete": False, "started": datetime.now(UTC).isoformat(timespec="seconds")}


def model_facts(loaded: LoadedModel) -> dict:
    """What an atlas's manifest says of its model: ``model`` (name), ``family``, ``capture_path``, ``stacks``."""
    return {"model": loaded.name, "family": loaded.family, "capture_path": loaded.capture_path,
            "stacks": {s: list(v) for s, v in loaded.stacks.items()}}


def finish(folder: Path, manifest: dict, count: int, total: int) -> None:
    """Mark the atlas complete once ``count`` of its ``total`` items are written."""
    if count == total and not manifest.get("complete"):
        manifest["complete"] = True
        manifest["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        store.write_manifest(folder, manifest)


def text_sums(loaded: LoadedModel, text: str, max_tokens: int, language: str | None = None
              ) -> tuple[dict[str, TextSums], list, int]:
    """One text's sums of every stack: ``({stack: TextSums}, tokens, truncated)`` (``tokens``: the analysis's
    :class:`models.Token` list). For a speech model ``text`` is a clip's path, transcribed in ``language``
    (:func:`models.analyze_audio`: encoder frames, transcript tokens, cross-attention between them)."""
    if language is not None:
        from ..speech.audio import analyze_audio
        from ..speech.wav import read_wav

        result = analyze_audio(loaded, *read_wav(text), language=language, top_k=1).analysis
    else:
        n = len(loaded.tokenizer(text[: max_tokens * 16], truncation=True, max_length=max_tokens)["input_ids"])
        size = sum(layers * heads for layers, heads in loaded.stacks.values()) * n * n * 4
        result = analyze(loaded, text, max_tokens=max_tokens, top_k=1, keep=size <= KEEP_BYTES)
    accs = {}
    for stack, lazy in result.attentions.items():
        layers, heads, n_q, n_k = lazy.shape
        special, punct, word_of = key_flags(result, stack)
        ids = [t.id for t in result.axis_tokens(stack)[1]]
        accs[stack] = TextSums(layers, heads, n_q, n_k, ids=ids, special=special, punctuation=punct,
                               word_of=word_of, self_attention=stack != "cross")
    feed_blocks(result, lambda stack, layer, q0, k0, w: accs[stack].add(layer, q0, k0, w))
    return accs, result.tokens, int(result.truncated)


def _rows(model: str, corpus: str, grp: str, index: int, accs: dict[str, TextSums]) -> tuple[dict, dict]:
    """The sums and examples columns of one text (every stack, layer and head)."""
    sums: dict[str, list] = {}
    examples: dict[str, list] = {}
    for stack, acc in accs.items():
        layers, heads = acc.layers, acc.heads
        layer, head = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
        n = layers * heads
        common: dict[str, list] = {"model": [model] * n, "corpus": [corpus] * n, "grp": [grp] * n, "text": [index] * n,
                  "stack": [stack] * n, "layer": layer.ravel().tolist(), "head": head.ravel().tolist()}
        flat = acc.sums.reshape(n, len(SUMS))
        for key, values in common.items():
            sums.setdefault(key, []).extend(values)
            examples.setdefault(key, []).extend(values)
        for i, name in enumerate(SUMS):
            sums.setdefault(name, []).extend(flat[:, i].tolist())
        query, strength, keys, weights = acc.strongest()
        examples.setdefault("query", []).extend(query.ravel().tolist())
        examples.setdefault("strength", []).extend(strength.ravel().astype(float).tolist())
        examples.setdefault("keys", []).extend(keys.reshape(n, TOP_KEYS).tolist())
        examples.setdefault("weights", []).extend(weights.reshape(n, TOP_KEYS).astype(float).tolist())
    return sums, examples


def read_item(loaded: LoadedModel, corpus, grp: str, index: int, text: str, max_tokens: int
              ) -> tuple[dict, dict, dict]:
    """One item of a build read: the ``sums``, ``examples`` and ``texts`` rows of its part (see
    :mod:`models.atlas.store`); ``texts`` holds ``tokens`` (read), ``truncated`` (tokens cut from the end, 0 if
    none) and ``seconds`` (wall time of the analysis). ``corpus``: the :class:`Corpus` (or a streamed
    :class:`models.atlas.stream.CorpusFile`) the item is from."""
    start = time.perf_counter()
    language = corpus.languages[index] if corpus.audio and grp == "corpus" else None
    accs, tokens, truncated = text_sums(loaded, text, max_tokens, language)
    sums, examples = _rows(loaded.name, corpus.name, grp, index, accs)
    texts = {"grp": [grp], "text": [index], "content": [Path(text).name if corpus.audio else text],
             "tokens": [len(tokens)], "starts": [[t.start for t in tokens]], "ends": [[t.end for t in tokens]],
             "special": [[t.special for t in tokens]], "truncated": [truncated],
             "seconds": [time.perf_counter() - start]}
    return sums, examples, texts


def _extend(into: dict, part: dict) -> None:
    for key, values in part.items():
        into.setdefault(key, []).extend(values)


@checks.needs_model
def build_atlas(loaded: LoadedModel, corpus: Corpus, *, max_tokens: int | None = None, limit: int | None = None,
                repeats: int = REPEATS, repeat_length: int | None = None, progress: Progress | None = None,
                stop: Callable[[], bool] | None = None, root: Path | None = None):
    """Compute (or finish) the atlas of ``loaded`` on ``corpus`` and return it.

    Every text is analysed once (:func:`models.analyze`, cut to ``max_tokens``, default :data:`MAX_TOKENS` or the
    model's own limit, the smaller); per text and head the sums of
    :mod:`models.atlas.metrics` go to disk every :data:`PART_TEXTS` texts. Decoders also read ``repeats``
    sequences of ``repeat_length`` random whole-word tokens written twice (the induction metric on text
    built for it, besides the corpus's own repeats; ``repeat_length`` default :data:`REPEAT_LENGTH`, or what fits
    twice in ``max_tokens``).

    Args:
        progress: called after each text with ``(done, total, seconds_left)`` (None until two texts are read;
            :class:`models.atlas.eta.Eta`: the tokens left estimated from their characters, at the throughput
            measured since the first text).
        stop: called after each text; True stops the build after writing what is done (resumable).
        root: the folder of atlases (default :func:`models.atlas.store.atlas_root`).

    Returns:
        :class:`models.atlas.Atlas` (``complete`` False when stopped).

    Raises:
        InvalidArgumentError: settings out of range. InvalidCorpusError: not a :class:`Corpus`, or a language
        the tokenizer does not know (:func:`models.atlas.corpus.check_language`), or texts for a speech model /
        clips for a text model (``corpus_kind``). Whatever :func:`models.analyze` raises for a text.
    """
    from .atlas import Atlas
    from ..errors import InvalidCorpusError

    if not isinstance(corpus, Corpus):
        raise InvalidCorpusError(f"corpus must be a models.atlas.Corpus, got {checks.shown(corpus)}.",
                                 code="corpus_texts")
    if loaded.reads_text == corpus.audio:
        raise InvalidCorpusError(
            f"'{loaded.name}' reads {loaded.input_name}; the corpus '{corpus.name}' holds "
            f"{'speech clips' if corpus.audio else 'texts'}." + ("" if loaded.reads_text else
                                                                 " Use models.atlas.shipped_clips()."),
            code="corpus_kind", model=loaded.name, name=corpus.name[-80:], reads=loaded.input_name)
    settings = check_settings(loaded, max_tokens, limit, repeats, repeat_length)
    language = check_language(loaded, corpus)
    folder = folder_for(loaded, corpus, settings, root)
    items, no_repeats = _items(loaded, corpus, settings)
    if (folder / "manifest.json").is_file():
        manifest = store.read_manifest(folder)
    else:
        counts = {g: sum(1 for it in items if it[0] == g) for g in ("corpus", "repeat")}
        manifest = new_manifest(model_facts(loaded), corpus, settings, counts, no_repeats, language)
        store.write_manifest(folder, manifest)
    done = store.done_texts(folder)
    todo = [it for it in items if (it[0], it[1]) not in done]
    writer = store.PartWriter(folder)
    eta = Eta([len(t) for *_, t in todo], settings.max_tokens, language.get("tokens_per_char", 0.0))
    part: tuple[dict, dict, dict] = ({}, {}, {})
    count = len(items) - len(todo)

    def flush():
        nonlocal part
        if part[2]:
            writer.write(*part)
        part = ({}, {}, {})

    for i, (grp, index, text) in enumerate(todo):
        read = read_item(loaded, corpus, grp, index, text, settings.max_tokens)
        for into, rows in zip(part, read[:3]):
            _extend(into, rows)
        eta.add(i, read[2]["tokens"][0], read[2]["truncated"][0], read[2]["seconds"][0])
        eta.tick()
        count += 1
        if len(part[2]["text"]) >= PART_TEXTS:
            flush()
        if progress is not None:
            progress(count, len(items), eta.seconds_left())
        if stop is not None and stop():
            break
    flush()
    finish(folder, manifest, count, len(items))
    return Atlas(folder)
