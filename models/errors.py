"""Every exception the engine raises, in one place.

All derive from :class:`DikkatError`, so a caller (the Streamlit pages, a notebook) can catch the
family with one ``except`` and show ``str(exc)``: each message names the model or the input at fault
and says what to do next.

A message a user of the app can meet also carries a ``code`` and the values it names (``params``), so
the interface can say the same in its own language (``assets/i18n/errors.json``: ``errmsg_<code>``, with
the params as placeholders; a test checks every code raised has a translation with exactly those
placeholders). ``str(exc)`` stays the English message.
"""

from __future__ import annotations


class DikkatError(Exception):
    """Base class of every error raised by ``models``.

    Args:
        message: the English message (``str(exc)``).
        code: names the message for translation (``errmsg_<code>`` in the interface strings), or None.
        **params: the values the message names (model, token counts, ...), for the translated message.
    """

    def __init__(self, message: str = "", *, code: str | None = None, **params) -> None:
        super().__init__(message)
        self.code = code
        self.params = params


class InvalidArgumentError(DikkatError, ValueError):
    """An argument of the wrong type or out of range (``max_tokens``, ``top_k``, ``device`` ...)."""


class UnknownModelError(DikkatError, KeyError):
    """The name is neither a catalog key, an existing folder, nor a Hugging Face model id."""

    def __str__(self) -> str:  # KeyError would print the repr with quotes
        return str(self.args[0]) if self.args else "unknown model"


class ModelNotInstalledError(DikkatError):
    """A catalog model whose package is not installed (the message says how to install it)."""


class HubUnreachableError(DikkatError):
    """A Hugging Face id was asked for while the hub cannot be reached (offline, or the id does not exist)."""


class HubDownloadTooLargeError(HubUnreachableError):
    """A Hugging Face repository whose files to download pass the size cap (``DIKKAT_HUB_MAX_GIB``)."""


class ModelNotAllowedError(UnknownModelError):
    """A model this server does not offer (classroom mode: only the catalog and the teacher's list)."""


class NoUsableModelError(DikkatError):
    """A folder (or hub repository) without a usable model: no config, only pickle weights, corrupt files."""


class NoAttentionWeightsError(DikkatError):
    """The architecture computes no attention weights (state-space models, ...), refuses to return them, or
    returns something that is not a map over the tokens (local windows, recurrent states, extra key slots,
    layers of different head counts)."""


class ModelOutOfMemoryError(DikkatError, MemoryError):
    """Loading or running the model ran out of (GPU or host) memory."""


class EmptyTextError(DikkatError, ValueError):
    """The text to analyse is empty or only whitespace."""


class BatchNotSupportedError(DikkatError, TypeError):
    """More than one text was passed to a call that analyses one text at a time."""


class InvalidMaskError(DikkatError, ValueError):
    """A mask specification that cannot be applied (bad shape, unknown kind, width < 1)."""


class UnsupportedOperationError(DikkatError):
    """The model's capture path cannot do what was asked (e.g. replace the mask on the fallback path)."""


class InvalidHeadError(DikkatError, ValueError):
    """A (stack, layer, head) triple that does not exist in the model."""


class IndexOutOfRangeError(DikkatError, IndexError):
    """An integer index (a layer, head, row or query of stored attention weights) outside its axis. An IndexError
    too, so that Python's sequence protocol (iteration, ``range(len(x))[i]``) works on the stores as on arrays.
    Codes ``index_layer``, ``index_head``, ``index_row``, ``index_key`` (params ``index``, ``size``: the axis's
    length) and ``index_axes`` (``index``: indices given, ``size``: axes) (:mod:`models.analysis.indexing`)."""


class InvalidAudioError(DikkatError, ValueError):
    """Audio that cannot be analysed: empty, not finite, an unreadable or unsupported WAV file."""


class UnknownLanguageError(DikkatError, ValueError):
    """A language code the speech model does not know (the message lists the known codes)."""


class AttentionTooLargeError(DikkatError, MemoryError):
    """Every layer's (or one layer's) attention weights at once would exceed the memory allowed for them:
    index a layer, a head or a block of rows instead (``a.attentions[stack][layer, head]``)."""


class UndefinedError(DikkatError, ValueError):
    """A number that does not exist for these values (Spearman's ρ when one ranking is constant, a share of an
    empty row): raised with the reason instead of returning NaN, so that no page shows a bare "nan"."""


class WordMismatchError(DikkatError, ValueError):
    """The two sentences of the word-order experiment (:func:`models.lessons.positions.word_order_experiment`)
    do not consist of the same words."""


class InvalidCorpusError(DikkatError, ValueError):
    """A corpus that cannot be read for a head atlas: empty, too large, not text, a missing column, or in a
    language the model's tokenizer cannot represent (:mod:`models.atlas.corpus`)."""


class AtlasFilesGoneError(DikkatError, FileNotFoundError):
    """A file of a head atlas on disk (its manifest, a part, its labels) went, or was cut short, while the atlas was
    read: a cleaned cache, an upload's atlas removed, a part deleted by hand (:func:`models.atlas.store.reading`).
    What is still on disk stays; the next build reads the missing texts again."""
