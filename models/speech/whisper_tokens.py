"""Whisper's text side: the language and task tokens of its decoder prompt, the alignment heads its
checkpoint names, and its byte-level token alphabet."""

from __future__ import annotations



from ..errors import UnknownLanguageError, UnsupportedOperationError

from ..loading.model import LoadedModel


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-character table (Radford et al. 2019, ``encoder.py``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def _check_whisper(loaded: LoadedModel) -> None:
    if getattr(loaded.model.config, "model_type", None) != "whisper" or loaded.processor is None:
        raise UnsupportedOperationError(
            f"Model '{loaded.name}' is not a Whisper speech model: analyze_audio() needs one (e.g. 'whisper-base').",
            code="not_whisper", model=loaded.name
        )


def language_token(loaded: LoadedModel, language: str) -> int:
    """Token id of a language for the decoder prompt: ``"tr"``, ``"<|tr|>"`` or ``"turkish"``.

    Raises:
        UnsupportedOperationError: ``loaded`` is not a Whisper model.
        UnknownLanguageError: the model has no such language (the message lists the codes).
    """
    _check_whisper(loaded)
    lang_to_id = getattr(loaded.model.generation_config, "lang_to_id", None) or {}
    code = language.strip().lower()
    if not code.startswith("<|"):
        try:
            from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

            code = TO_LANGUAGE_CODE.get(code, code)
        except ImportError:  # pragma: no cover - older layout
            pass
        code = f"<|{code}|>"
    if code not in lang_to_id:
        known = ", ".join(sorted(k.strip("<|>") for k in lang_to_id))
        raise UnknownLanguageError(f"Whisper does not know the language '{language}'. Known codes: {known}.",
                                   code="unknown_language", language=language, known=known)
    return int(lang_to_id[code])


def prompt_ids(loaded: LoadedModel, language: str) -> list[int]:
    """The decoder prompt ``[<|startoftranscript|>, <|lang|>, <|transcribe|>, <|notimestamps|>]``
    (OpenAI ``whisper/tokenizer.py``, ``sot_sequence_including_notimestamps``) as 4 token ids.

    Raises:
        UnsupportedOperationError: not a Whisper model. UnknownLanguageError: unknown ``language``.
    """
    gc = loaded.model.generation_config
    sot = int(gc.decoder_start_token_id)
    transcribe = int(getattr(gc, "task_to_id", {}).get("transcribe", 50359))
    no_ts = int(getattr(gc, "no_timestamps_token_id", 50363))
    return [sot, language_token(loaded, language), transcribe, no_ts]


def alignment_heads(loaded: LoadedModel) -> list[tuple[int, int]]:
    """Cross-attention ``(layer, head)`` pairs that OpenAI found to track the speech in time (used by
    Whisper's word timestamps, ``whisper/timing.py``); every head of the second half of the cross-attention
    layers when the generation config does not list them (empty for a model without cross-attention)."""
    heads = getattr(loaded.model.generation_config, "alignment_heads", None)
    if heads:
        return [(int(layer), int(h)) for layer, h in heads]
    layers, n_heads = loaded.stacks.get("cross", (0, 0))
    return [(layer, h) for layer in range(layers // 2, layers) for h in range(n_heads)]
