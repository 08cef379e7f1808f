"""The questions a teacher poses during a lesson (issue 29), and the model's own measured answer.

Four kinds, each a frozen dataclass with the question's ``prompt`` (``{"en": ..., "tr": ...}``, plain text) and
its parameters:

* :class:`TopKey` (``top_key``): which key token does this query token attend to most, in one head
  (``stack``, ``layer``, ``head``, ``query``)? Choices: the keys the query may attend (its mask row).
  Answer: ``argmax_j a[layer, head, query, j]`` of the analysis's weights.
* :class:`TopHead` (``top_head``): which of these heads matters most for the model's prediction? Choices: the
  listed heads. Each is switched off alone (Michel, Levy & Neubig 2019, §2: the head's slice of the output
  projection's input is zeroed) in one batched pass (:func:`models.pruning.evaluate`); the answer is the head
  whose removal raises the model's metric most (:func:`models.pruning.metric_kind`: the next-token loss in
  nats for a decoder, ``1 - cos`` of the sentence embedding for minilm-l6).
* :class:`LossChange` (``loss_change``): will the next-token loss rise or fall under this mask and/or these
  heads off, and by how much? Choices: the buckets of :data:`BUCKETS` (falls / about the same within
  ±:data:`SAME_NATS` nats / rises by less than :data:`LOT_NATS` / rises a lot). Answer: the bucket of
  ``loss(changed) - loss(native)`` (:attr:`models.Analysis.loss`, mean ``CE(logits[:-1], ids[1:])`` in nats).
* :class:`Sink` (``sink``): where is the attention sink? Choices: the tokens. Answer: the token that receives
  the most attention on average over every head and query row of the later layers (``from_layer`` on; default
  the upper half, ``layers // 2`` on), as Xiao et al. 2023 (StreamingLLM, §3.1) and Clark et al. 2019 (§3:
  [CLS]/[SEP]) read it.

``state`` is the page's state as the step's link sets it (:meth:`live.lessons.Step.query`: query parameter ->
text), possibly changed live by the teacher; a question reads ``text`` from it (the sidebar's sentence), and for
a speech model (Whisper) the Masks page's clip: ``masks_clip`` (a file of ``assets/audio``), ``masks_audio_lang``
and ``masks_audio_tgt``.

Every error is a :class:`LessonError` with a ``code`` (Turkish text: ``assets/i18n/lesson_errors.json``,
``errmsg_<code>``) and the ``params`` that text names. Nothing here imports Streamlit.
"""

from __future__ import annotations

import math
from dataclasses import fields
from collections.abc import Mapping

import numpy as np

import models
from models import pruning

from .question_kinds import (  # noqa: F401  (the questions themselves; parsed, checked and answered here)
    _BUCKET_LABELS, _STACK_WORDS, AUDIO, BUCKETS, CLASSES, DEFAULT_CLIP, KINDS, LANGS, LOT_NATS, MAX_CHOICES, MAX_HEADS,
    MIN_HEADS, SAME_NATS, STACKS, Choice, LessonError, LossChange, Measured, Question, Sink, TopHead, TopKey,
)


# ------------------------------------------------------------------------------------- parsing and checking


def texts(value, where: str) -> dict[str, str]:
    """``{"en": ..., "tr": ...}`` with both languages as non-empty strings (nothing else).

    Raises:
        LessonError: ``lesson_missing_language`` (a language missing or empty), ``lesson_bad_field`` (not a
            table of strings, or another key).
    """
    if not isinstance(value, Mapping) or any(not isinstance(v, str) for v in value.values()):
        raise LessonError(f"'{where}' must be a table of texts, {{en = \"...\", tr = \"...\"}}.",
                          code="lesson_bad_field", where=where, expected="{en, tr}")
    for lang in LANGS:
        if not str(value.get(lang) or "").strip():
            raise LessonError(f"'{where}' has no text in '{lang}': every text is written in English and Turkish.",
                              code="lesson_missing_language", where=where, lang=lang)
    extra = sorted(set(value) - set(LANGS))
    if extra:
        raise LessonError(f"'{where}' has a text in '{extra[0]}': the lessons are in en and tr only.",
                          code="lesson_unknown_field", where=f"{where}.{extra[0]}", known="en, tr")
    return {lang: value[lang] for lang in LANGS}


def parse_head(text, where: str) -> tuple[str, int, int]:
    """``"decoder.3.1"`` -> ``("decoder", 3, 1)`` (layer and head from 0).

    Raises:
        LessonError: ``lesson_question_field`` when it is not ``stack.layer.head``.
    """
    bits = text.split(".") if isinstance(text, str) else []
    if len(bits) != 3 or bits[0] not in STACKS or not all(b.isascii() and b.isdigit() and len(b) < 7 for b in bits[1:]):
        raise LessonError(f"'{where}' names a head as stack.layer.head (e.g. decoder.3.1), got {text!r}.",
                          code="lesson_question_field", where=where, expected="stack.layer.head", got=str(text))
    return bits[0], int(bits[1]), int(bits[2])


def _field(table: Mapping, name: str, kind: type, where: str, default=None, required: bool = True):
    value = table.get(name, default)
    if value is None and not required:
        return None
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is tuple:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if not ok:
        expected = {int: "a whole number", str: "a text", tuple: "a list of texts"}[kind]
        raise LessonError(f"'{where}.{name}' must be {expected}, got {value!r}.", code="lesson_question_field",
                          where=f"{where}.{name}", expected=expected, got=repr(value))
    return tuple(value) if kind is tuple else value


def parse_question(table, where: str = "question") -> Question:
    """A question from its TOML table (see the module docstring for each kind's fields).

    Raises:
        LessonError: ``lesson_bad_field`` (not a table), ``lesson_question_kind`` (no or an unknown kind),
            ``lesson_question_field`` (a field missing, of the wrong type or out of its range; a head that is
            not ``stack.layer.head``; a mask :func:`models.parse_mask` refuses), ``lesson_unknown_field``,
            ``lesson_missing_language`` (the prompt).
    """
    if not isinstance(table, Mapping):
        raise LessonError(f"'{where}' must be a table.", code="lesson_bad_field", where=where, expected="table")
    kind = table.get("kind")
    if kind not in CLASSES:
        raise LessonError(f"'{where}.kind' must be one of {', '.join(KINDS)}, got {kind!r}.",
                          code="lesson_question_kind", where=f"{where}.kind", kind=str(kind), kinds=", ".join(KINDS))
    cls = CLASSES[kind]
    known = {f.name for f in fields(cls)} | {"kind"}
    for name in table:
        if name not in known:
            raise LessonError(f"'{where}' has a field '{name}' a {kind} question does not take "
                              f"({', '.join(sorted(known))}).",
                              code="lesson_unknown_field", where=f"{where}.{name}", known=", ".join(sorted(known)))
    args = {"prompt": texts(table.get("prompt"), f"{where}.prompt"),
            "model": _field(table, "model", str, where, required=False)}
    if cls is TopKey:
        args.update(layer=_field(table, "layer", int, where), head=_field(table, "head", int, where),
                    query=_field(table, "query", int, where), stack=_field(table, "stack", str, where, required=False))
    elif cls is Sink:
        args.update(stack=_field(table, "stack", str, where, required=False),
                    from_layer=_field(table, "from_layer", int, where, required=False))
    elif cls is TopHead:
        heads = _field(table, "heads", tuple, where)
        for i, h in enumerate(heads):
            parse_head(h, f"{where}.heads.{i + 1}")
        if not MIN_HEADS <= len(set(heads)) == len(heads) <= MAX_HEADS:
            raise LessonError(f"'{where}.heads' lists {MIN_HEADS} to {MAX_HEADS} different heads, got {len(heads)}.",
                              code="lesson_question_field", where=f"{where}.heads",
                              expected=f"{MIN_HEADS}-{MAX_HEADS} heads", got=str(len(heads)))
        args.update(heads=heads)
    else:
        args.update(mask=_field(table, "mask", str, where, default="native"),
                    heads_off=_field(table, "heads_off", tuple, where, default=[]))
        for i, h in enumerate(args["heads_off"]):
            parse_head(h, f"{where}.heads_off.{i + 1}")
        try:
            mode = models.parse_mask(args["mask"])
        except models.DikkatError as exc:
            raise LessonError(f"'{where}.mask': {exc}", code="lesson_question_field", where=f"{where}.mask",
                              expected="native, causal, bidirectional, sliding_window:W, strided:S, sink_window:W,K",
                              got=args["mask"]) from None
        if mode.kind == "native" and not args["heads_off"]:
            raise LessonError(f"'{where}' changes nothing: give a mask other than native, or heads_off.",
                              code="lesson_question_field", where=where, expected="mask or heads_off", got="native")
    for name in ("layer", "head", "from_layer"):
        if (args.get(name) or 0) < 0:
            raise LessonError(f"'{where}.{name}' counts from 0, got {args[name]}.", code="lesson_question_field",
                              where=f"{where}.{name}", expected="a whole number from 0", got=str(args[name]))
    if args.get("stack") is not None and args["stack"] not in STACKS:
        raise LessonError(f"'{where}.stack' must be one of {', '.join(STACKS)}, got {args['stack']!r}.",
                          code="lesson_question_field", where=f"{where}.stack", expected=", ".join(STACKS),
                          got=args["stack"])
    return cls(**args)


def default_stack(family: str, reads: str) -> str:
    """The stack a question names when it names none: the one that reads the input text (a decoder's, else the
    encoder's); for a speech model the decoder's (the transcript's tokens, not 20 ms audio frames)."""
    return "decoder" if family == "decoder" or reads != "text" else "encoder"


def check_question(question: Question, model: str, stacks: Mapping[str, tuple[int, int]], family: str,
                   reads: str, where: str = "question") -> None:
    """Check ``question`` against a model's shape, without loading it (a catalog entry: ``stacks`` from its
    family and ``layers × heads``; a loaded model: :attr:`models.LoadedModel.stacks`).

    Raises:
        LessonError: ``lesson_stack``, ``lesson_layer_range``, ``lesson_head_range``,
            ``lesson_question_text_model`` (top_head and loss_change need a model that reads text),
            ``lesson_question_loss`` (loss_change needs a next-token loss: a decoder).
    """
    if isinstance(question, (TopHead, LossChange)) and reads != "text":
        raise LessonError(f"A {question.kind} question switches heads off in a text model; '{model}' reads {reads}.",
                          code="lesson_question_text_model", where=where, model=model, kind=question.kind)
    if isinstance(question, LossChange) and family != "decoder":
        raise LessonError(f"A loss_change question needs a next-token loss: '{model}' is not a decoder.",
                          code="lesson_question_loss", where=where, model=model)
    heads = [parse_head(h, where) for h in getattr(question, "heads", ()) + getattr(question, "heads_off", ())]
    if isinstance(question, (TopKey, Sink)):
        stack = question.stack or default_stack(family, reads)
        heads.append((stack, question.layer if isinstance(question, TopKey) else question.from_layer or 0,
                      question.head if isinstance(question, TopKey) else 0))
    for stack, layer, head in heads:
        check_head(model, stacks, stack, layer, head, where)


def check_head(model: str, stacks: Mapping[str, tuple[int, int]], stack: str, layer: int, head: int | None,
               where: str) -> None:
    """``stack``, ``layer`` and ``head`` (None: not checked) exist in a model of these ``stacks``.

    Raises:
        LessonError: ``lesson_stack``, ``lesson_layer_range``, ``lesson_head_range``.
    """
    if stack not in stacks:
        raise LessonError(f"'{where}': '{model}' has no {stack} stack ({', '.join(stacks)}).", code="lesson_stack",
                          where=where, model=model, stack=stack, stacks=", ".join(stacks))
    layers, heads = stacks[stack]
    if not 0 <= layer < layers:
        raise LessonError(f"'{where}': '{model}' has layers 0 to {layers - 1}, not {layer}.", code="lesson_layer_range",
                          where=where, model=model, layer=layer, last=layers - 1)
    if head is not None and not 0 <= head < heads:
        raise LessonError(f"'{where}': '{model}' has heads 0 to {heads - 1}, not {head}.", code="lesson_head_range",
                          where=where, model=model, head=head, last=heads - 1)


# ---------------------------------------------------------------------------------------------- answering


def _reads(loaded: models.LoadedModel) -> str:
    return "text" if loaded.reads_text else "speech"


def _checked(loaded: models.LoadedModel, question: Question) -> None:
    check_question(question, loaded.name, loaded.stacks, loaded.family, _reads(loaded))


def _text(loaded: models.LoadedModel, state: Mapping | None) -> str:
    text = (state or {}).get("text")
    if not isinstance(text, str) or not text.strip():
        raise LessonError(f"A question on '{loaded.name}' is asked about the page's sentence: the state has no text.",
                          code="lesson_question_no_text", model=loaded.name)
    return text


def _analysis(loaded: models.LoadedModel, state: Mapping | None) -> models.Analysis:
    """The analysis a token question reads: the state's ``text``; for a speech model the Masks page's clip."""
    if loaded.reads_text:
        return models.analyze(loaded, _text(loaded, state))
    from models.speech import audio

    state = state or {}
    clip = str(state.get("masks_clip") or DEFAULT_CLIP)
    clips = sorted(p.name for p in AUDIO.glob("*.wav"))
    if clip not in clips:
        raise LessonError(f"A question on '{loaded.name}' listens to a shipped clip ({', '.join(clips)}), "
                          f"not {clip!r}.",
                          code="lesson_question_clip", model=loaded.name, clip=clip, clips=", ".join(clips))
    samples, rate = audio.read_wav(str(AUDIO / clip))
    return audio.analyze_audio(loaded, samples, rate, language=str(state.get("masks_audio_lang") or "en"),
                               target=str(state.get("masks_audio_tgt") or "").strip() or None).analysis


def _token_label(i: int, label: str) -> dict[str, str]:
    shown = label.strip() or repr(label)
    return {lang: f"{i} · {shown}" for lang in LANGS}


def _query(question: TopKey, n: int) -> int:
    if not -n <= question.query < n:
        raise LessonError(f"The question's query token {question.query} is not among the {n} tokens of the text.",
                          code="lesson_question_query_range", query=question.query, n=n)
    return question.query % n


def _token_choices(analysis: models.Analysis, stack: str, keys: np.ndarray | None = None) -> list[Choice]:
    tokens = analysis.axis_tokens(stack)[1]
    keys = np.arange(len(tokens)) if keys is None else keys
    if len(keys) > MAX_CHOICES:
        raise LessonError(f"The question would offer {len(keys)} tokens to choose from; at most {MAX_CHOICES} make a "
                          "question: use a shorter text.", code="lesson_question_choices", n=len(keys),
                          most=MAX_CHOICES)
    return [Choice(str(int(j)), _token_label(int(j), tokens[int(j)].label)) for j in keys]


def _stack(loaded: models.LoadedModel, question: TopKey | Sink) -> str:
    return question.stack or default_stack(loaded.family, _reads(loaded))


def _allowed_keys(analysis: models.Analysis, stack: str, layer: int, query: int) -> np.ndarray:
    """The keys ``query`` may attend in ``layer`` (its mask row; every key when no mask was recorded)."""
    n_keys = analysis.attentions[stack].shape[-1]
    masks = analysis.masks.get(stack)
    if masks is None:
        return np.arange(n_keys)
    row = np.asarray(masks[layer][query], dtype=bool)
    return np.flatnonzero(row) if row.any() else np.arange(n_keys)


def _head_label(stacks: Mapping, head: str) -> dict[str, str]:
    stack, layer, h = parse_head(head, "heads")
    out = {"en": f"layer {layer}, head {h}", "tr": f"katman {layer}, kafa {h}"}
    if len(stacks) > 1:
        out = {lang: f"{_STACK_WORDS[stack][lang]} {text}" for lang, text in out.items()}
    return out


def choices_for(loaded: models.LoadedModel, question: Question, state: Mapping | None = None) -> list[Choice]:
    """The choices a student picks from, in order.

    top_key: the keys the query token may attend (its mask row in that layer: a causal model's earlier tokens);
    sink: every key token; both labelled ``"index · token"`` and read from the state's text (one analysis).
    top_head: the question's heads; loss_change: :data:`BUCKETS`. The label is ``{"en", "tr"}``.

    Raises:
        LessonError: ``lesson_stack`` / ``lesson_layer_range`` / ``lesson_head_range`` (the question does not fit
            the model), ``lesson_question_no_text``, ``lesson_question_clip``, ``lesson_question_query_range``,
            ``lesson_question_choices`` (more than :data:`MAX_CHOICES` tokens), ``lesson_question_text_model``,
            ``lesson_question_loss``.
        models.DikkatError: from the analysis (e.g. an empty text).
    """
    _checked(loaded, question)
    if isinstance(question, TopHead):
        return [Choice(h, _head_label(loaded.stacks, h)) for h in question.heads]
    if isinstance(question, LossChange):
        return [Choice(b, dict(_BUCKET_LABELS[b])) for b in BUCKETS]
    assert isinstance(question, (TopKey, Sink))  # the token questions (CLASSES has four kinds)
    analysis = _analysis(loaded, state)
    stack = _stack(loaded, question)
    if isinstance(question, TopKey):
        query = _query(question, len(analysis.axis_tokens(stack)[0]))
        return _token_choices(analysis, stack, _allowed_keys(analysis, stack, question.layer, query))
    return _token_choices(analysis, stack)


def bucket(change: float) -> str:
    """The :data:`BUCKETS` entry of a loss change in nats (see :data:`SAME_NATS`, :data:`LOT_NATS`)."""
    if change < -SAME_NATS:
        return "falls"
    if change <= SAME_NATS:
        return "same"
    return "rises_little" if change < LOT_NATS else "rises_lot"


def sink_shares(analysis: models.Analysis, stack: str, from_layer: int | None = None) -> np.ndarray:
    """float64 ``(keys,)``: the attention each key token receives, averaged over every head and query row of
    layers ``from_layer`` (None: ``layers // 2``) to the last (a query's row sums to 1, so the shares do too)."""
    att = analysis.attentions[stack]
    layers = att.shape[0]
    first = layers // 2 if from_layer is None else from_layer
    total = np.zeros(att.shape[-1])
    for layer in range(first, layers):
        total += np.asarray(att[layer], dtype=np.float64).mean(axis=(0, 1))
    return total / max(layers - first, 1)


def measure(loaded: models.LoadedModel, question: Question, state: Mapping | None = None) -> Measured:
    """The model's own answer to ``question`` on the state's text (see the module docstring for each kind).

    top_key: ``a[layer, head, query]`` of :func:`models.analyze` (float32 ``(keys,)``), answer its argmax.
    sink: :func:`sink_shares`, answer its argmax. top_head: :func:`models.pruning.evaluate` of all heads on and of
    each listed head off (one batch), answer the largest rise. loss_change: ``analyze(mask, heads_off).loss -
    analyze().loss`` in nats, answer its :func:`bucket`.

    Returns:
        :class:`Measured`; its ``answer`` is a value of :func:`choices_for`'s choices.

    Raises:
        LessonError: as :func:`choices_for` (``lesson_question_choices`` only from there).
        models.DikkatError: from the engine (an empty text, a mask the model cannot take ...).
    """
    _checked(loaded, question)
    if isinstance(question, TopHead):
        return _measure_top_head(loaded, question, state)
    if isinstance(question, LossChange):
        return _measure_loss_change(loaded, question, state)
    assert isinstance(question, (TopKey, Sink))  # the token questions (CLASSES has four kinds)
    analysis = _analysis(loaded, state)
    stack = _stack(loaded, question)
    if isinstance(question, TopKey):
        query = _query(question, len(analysis.axis_tokens(stack)[0]))
        row = np.asarray(analysis.attentions[stack][question.layer, question.head, query], dtype=np.float64)
        keys = _allowed_keys(analysis, stack, question.layer, query)
        unit = "weight"
    else:
        row = sink_shares(analysis, stack, question.from_layer)
        keys = np.arange(len(row))
        unit = "share"
    best = int(keys[np.argmax(row[keys])])
    return Measured(str(best), float(row[best]), {str(int(j)): float(row[j]) for j in keys}, unit)


def _heads(texts_) -> list[tuple[str, int, int]]:
    return [parse_head(h, "heads") for h in texts_]


def _measure_top_head(loaded: models.LoadedModel, question: TopHead, state: Mapping | None) -> Measured:
    prep = pruning.prepare(loaded, _text(loaded, state))
    keep = pruning.keep_matrix(loaded, [()] + [(h,) for h in _heads(question.heads)])
    values = pruning.evaluate(loaded, prep, keep)
    rise = values[1:] - values[0]
    best = int(np.argmax(rise))
    unit = "1 - cos" if prep.kind == "embedding_distance" else "nats"
    return Measured(question.heads[best], float(rise[best]), dict(zip(question.heads, map(float, rise))), unit)


def _measure_loss_change(loaded: models.LoadedModel, question: LossChange, state: Mapping | None) -> Measured:
    text = _text(loaded, state)
    before = models.analyze(loaded, text).loss
    after = models.analyze(loaded, text, heads_off=_heads(question.heads_off), mask=question.mask).loss
    if before is None or after is None or not (math.isfinite(before) and math.isfinite(after)):
        raise LessonError(f"A loss_change question needs a next-token loss: '{loaded.name}' gives none for this text.",
                          code="lesson_question_loss", where="question", model=loaded.name)
    change = float(after - before)
    return Measured(bucket(change), change, {"before": float(before), "after": float(after)}, "nats")
