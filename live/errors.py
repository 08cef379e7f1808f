"""Every exception a live class raises, in one place.

All derive from :class:`LiveError`, which carries a ``code`` and the values the message names (``params``), as
:class:`models.DikkatError` does, so the interface can say the same in its own language
(``assets/i18n/live_errors.json``: ``errmsg_<code>`` with the params as placeholders, and ``err_LiveError`` as the
headline; a test checks every code raised in ``live/`` has a Turkish text with exactly those placeholders).
``str(exc)`` stays the English message.
"""

from __future__ import annotations


class LiveError(Exception):
    """Base class of every error raised by ``live``.

    Args:
        message: the English message (``str(exc)``).
        code: names the message for translation (``errmsg_<code>``), or None.
        **params: the values the message names, for the translated message.
    """

    def __init__(self, message: str = "", *, code: str | None = None, **params) -> None:
        super().__init__(message)
        self.code = code
        self.params = params


class NotTeacher(LiveError, PermissionError):
    """A teacher's operation without the room's teacher secret (wrong, missing), or a room created without the
    server's teacher token."""


class NoSuchRoom(LiveError, LookupError):
    """No room has this code (never made, closed, or expired)."""


class NoSuchQuestion(LiveError, LookupError):
    """The room has no question with this id."""


class QuestionClosed(LiveError):
    """An answer to a question that is revealed, or no longer the room's current question."""


class NotJoined(LiveError):
    """An answer from a student who has not joined the room (or left it an hour ago)."""


class RoomFull(LiveError):
    """The room already has as many students as it takes."""


class RateLimited(LiveError):
    """Too many wrong room codes (or teacher tokens) from one client in a short time; ``params["retry_s"]`` says
    when to try again."""


class InvalidRequest(LiveError, ValueError):
    """A page name, its parameters, a question, a measured result or a student id that the room does not take."""


class InvalidAnswer(InvalidRequest):
    """An answer that is not a short string or a number, or not one of the question's choices."""


class LiveUnavailable(LiveError):
    """The shared store cannot be used: Redis unreachable, or several app processes without Redis."""
