"""What a live class accepts, and its limits: room codes, teacher secrets, pages and their parameters,
questions, answers, measured results, student ids, and who a client is for the rate limits. Pure functions; both
stores call them before they write.

Guessing a room code (issue 29: "room codes are not guessable by enumeration at 30 tries/s"). A code is one of
``N = 31**6 = 887,503,681``; with ``R`` rooms open, one guess hits with probability ``R / N``, so an attacker needs
``N / R`` guesses on average (geometric law; drawing without repeats, ``(N + 1) / (R + 1)``, the same to 1 %), and
``k`` guesses hit at least one room with probability ``1 - (1 - R / N) ** k``. Wrong codes are counted twice
(:meth:`live.base.BaseStore.join_attempt`), and each bucket, once full, refuses every code, right or wrong, until
its window ends (so the limit tells nothing):

* per client address, :data:`JOIN_LIMIT` per :data:`JOIN_WINDOW_S` (150 per 10 minutes): opening new browser
  sessions does not reset it. A real class never gets there: 30 students behind one school router (one address)
  with 3 typos each make 90;
* for the whole server (every replica: one Redis key), :data:`SERVER_JOIN_LIMIT` per :data:`SERVER_JOIN_WINDOW_S`
  (600 per 10 minutes, 1 per second on average): however many addresses an attacker has. Enough for four such
  classes joining within the same 10 minutes with 5 typos per student (600).

What a bot trying 30 codes a second gets (one address: 0.25 tries/s; any number of addresses: 1 try/s):

=====================  =============  ==============================  ==============================
rooms open ``R``        tries needed   at 30/s, no limit               at 1/s (the server's bucket)
=====================  =============  ==============================  ==============================
1                       887.5 million  342 days; 0.15 % in 12 h        28 years; 0.005 % in 12 h
10                      88.75 million  34 days; 1.4 % in 12 h          2.8 years; 0.049 % in 12 h
100                     8.875 million  3.4 days; 14 % in 12 h          103 days; 0.49 % in 12 h
=====================  =============  ==============================  ==============================

(12 h: a room's life without activity, :data:`TTL_S`; from one address, 0.25 tries/s, ten rooms take 11 years.)
The price of the server's bucket: a flood of wrong codes from many addresses also keeps students who *type* a code
from joining until it stops. It does not touch a class that joins by its link or QR code (issue 44): the link carries
the room's link key (:func:`new_link_key`, 96 random bits: ``2**96 / R`` guesses on average, out of reach at any
rate), and a join with the right key is neither limited nor counted. Students already in a room, and their teacher,
are not affected either (following and answering do not go through a typed code), and a reloaded page takes its
seat again through its link (``?room=&key=&seat=``), not through a typed code.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import math
import re
import secrets

from .errors import InvalidAnswer, InvalidRequest

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: a code read off a projector is typed right
CODE_LENGTH = 6  # 31**6, about 887 million codes
TTL_S = 12 * 3600  # a room forgotten 12 h after its last activity
PRESENT_S = 10.0  # a student is present when seen this recently (heartbeats come more often)
KEEP_S = 3600.0  # a student not seen for an hour leaves the room (and frees a seat)
MAX_STUDENTS = 500
JOIN_LIMIT, JOIN_WINDOW_S = 150, 600.0  # wrong room codes per client address per 10 minutes (see above)
SERVER_JOIN_LIMIT, SERVER_JOIN_WINDOW_S = 600, 600.0  # wrong room codes on the whole server per 10 minutes
SERVER_JOIN_BUCKET = "join:server"  # its bucket (a client's is "join:<hash>", never this)
TEACHER_LIMIT, TEACHER_WINDOW_S = 5, 60.0  # wrong teacher tokens per client address per minute
MAX_ANSWER_CHARS = 80
MAX_CHOICES = 20
MAX_PARAMS = 64
MAX_PARAM_CHARS = 4000  # a sentence in a link: the classroom's max_chars (2000 by default) with room to spare
MAX_STATE_BYTES = 32_000
MAX_QUESTION_BYTES = 4096
MAX_MEASURED_BYTES = 4096

_PAGE = re.compile(r"[a-z][a-z0-9_]{0,39}")
_PARAM_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_STUDENT = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def new_code() -> str:
    """A random room code: :data:`CODE_LENGTH` characters of :data:`ALPHABET` (``secrets``)."""
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text) -> str | None:
    """``text`` as a room code (upper case, spaces and dashes dropped), or None when it cannot be one."""
    if not isinstance(text, str) or len(text) > 40:
        return None
    code = re.sub(r"[\s-]", "", text).upper()
    return code if len(code) == CODE_LENGTH and all(c in ALPHABET for c in code) else None


def hash_secret(secret: str) -> str:
    """What a store keeps of a teacher secret: its SHA-256, hex (the secret itself is never stored)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def secret_matches(given, stored_hash: str | None) -> bool:
    """Whether ``given`` is the secret whose hash is ``stored_hash`` (constant time; False for a missing or
    non-string secret, or a room without one)."""
    if not isinstance(given, str) or not given or not stored_hash:
        return False
    return hmac.compare_digest(hash_secret(given), stored_hash)


def token_matches(given, server_token: str) -> bool:
    """Whether ``given`` is the server's teacher token (constant time; False for a missing or non-string one)."""
    if not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(given.encode("utf-8"), server_token.encode("utf-8"))


def bucket(kind: str, client_key) -> str:
    """The rate-limit bucket of ``kind`` (``join``, ``teacher``) for a client: a hash, so any key (an address,
    :func:`client_address`; a session id where there is none) makes a short, safe name."""
    return f"{kind}:{hashlib.sha256(str(client_key).encode('utf-8')).hexdigest()[:32]}"


# the peers whose X-Forwarded-For header uvicorn (the server under Streamlit 1.67) believes: its FORWARDED_ALLOW_IPS
# default, which Dikkat leaves as it is
FORWARDED_ALLOW = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
LOOPBACK_CLIENT = "loopback"  # the key of every client whose address a proxy of this machine claims, unchecked


def _forwarded_host(entry: str) -> str:
    """One X-Forwarded-For entry without its port, as uvicorn reads it (``[::1]:80`` -> ``::1``, ``1.2.3.4:5`` ->
    ``1.2.3.4``)."""
    entry = entry.strip()
    if entry.startswith("[") and "]" in entry:
        return entry[1:entry.index("]")]
    if entry.count(":") == 1:
        return entry.split(":")[0]
    return entry


def _allowed(host: str) -> bool:
    try:
        return ipaddress.ip_address(host) in FORWARDED_ALLOW
    except ValueError:
        return False


def client_address(remote_ip, forwarded_for, behind_proxy: bool) -> str | None:
    """Who a client is for the rate limits: an address that a new browser session does not change.

    Streamlit 1.67 serves through uvicorn, whose ``ProxyHeadersMiddleware`` replaces the TCP peer by the rightmost
    ``X-Forwarded-For`` entry that is not 127.0.0.1 or ::1 (:data:`FORWARDED_ALLOW`) when the peer is one of them:
    ``remote_ip`` (Streamlit's ``client_context.remote_ip``) is the peer, unless the peer is on this machine and
    sent that header. Dikkat's nginx (``deploy/replicas.py``, ``make serve REPLICAS>1``) sets
    ``X-Forwarded-For $proxy_add_x_forwarded_for``: whatever the client sent, then the address that connected to
    nginx; only that last entry is nginx's own. So:

    * no header: ``remote_ip``, the peer;
    * a header uvicorn did not take (``remote_ip`` is not the entry it would take): the peer was elsewhere and its
      header is ignored: ``remote_ip``;
    * a header uvicorn took, with ``behind_proxy`` (:func:`live.config.behind_proxy`: the replicas behind Dikkat's
      nginx, which listen on 127.0.0.1 only, so their every peer is that nginx): the header's last entry, the
      address nginx saw (not uvicorn's pick, which for a client on this machine going through nginx would be an
      entry the client wrote);
    * a header uvicorn took without ``behind_proxy``: the peer is on this machine but is not Dikkat's nginx
      (``make run`` reached through a tunnel, say), so the header may be anyone's words: every such client is
      :data:`LOOPBACK_CLIENT`, one client (the server-wide bucket holds in any case).

    Args:
        remote_ip: the address Streamlit has for the connection, or None when it has none (no browser: AppTest).
        forwarded_for: the ``X-Forwarded-For`` header's values joined by ``,`` (``""`` or None when absent).
        behind_proxy: whether the app runs behind Dikkat's own nginx.

    Returns:
        an address (at most 64 characters), :data:`LOOPBACK_CLIENT`, or None when ``remote_ip`` is None.
    """
    if not isinstance(remote_ip, str) or not remote_ip:
        return None
    entries = [_forwarded_host(e) for e in str(forwarded_for or "").split(",")]
    entries = [e for e in entries if e]
    if not entries:
        return remote_ip[:64]
    taken = next((e for e in reversed(entries) if not _allowed(e)), entries[0])  # what uvicorn takes
    if remote_ip != taken:
        return remote_ip[:64]
    return entries[-1][:64] if behind_proxy else LOOPBACK_CLIENT


def client_key(session_id, remote_ip, forwarded_for, behind_proxy: bool) -> str:
    """The key the stores count a client's wrong codes and tokens under: ``ip:<address>``
    (:func:`client_address`), the same for every browser session from that address; ``session:<id>`` only where
    there is no address (no browser connection: AppTest).

    Args:
        session_id: the Streamlit session's id.
        remote_ip, forwarded_for, behind_proxy: as :func:`client_address`.
    """
    address = client_address(remote_ip, forwarded_for, behind_proxy)
    return f"ip:{address}" if address else f"session:{session_id}"


def _encoded(value, limit: int) -> str | None:
    """``value`` as JSON, or None when it is not plain data or takes more than ``limit`` bytes."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return text if len(text.encode("utf-8")) <= limit else None


LESSON_STEP = "lesson_step"  # the broadcast parameter naming a lesson's step: "<lesson id>:<step index from 0>"


QUESTION_STEP = "step"  # a question's own lesson step ("<lesson id>:<index>"), when the teacher asked it on one


def ends_question(old_params: dict | None, new_params: dict, question: dict | None = None) -> bool:
    """Whether a new state of the room ends its current question: the lesson's step changed (issue 50 point 3: a
    question belongs to its step, so Next, Previous or another lesson clear it on every screen, and a late joiner
    never meets the last step's question). A change of the page's widgets within one step, or outside a lesson
    (neither state names a step), keeps it.

    A question asked on a lesson step names it (:data:`QUESTION_STEP`): it ends when the new state names another
    step, whatever the state before named. A teacher who asks the moment a Previous or Next has been pressed asks
    before that run's page reaches the room: the room still names the step left, and comparing the two states
    would end the new question when the page arrives (seen in the browser tier: the class never saw it).
    """
    step = (question or {}).get(QUESTION_STEP)
    if isinstance(step, str):
        return new_params.get(LESSON_STEP) != step
    return (old_params or {}).get(LESSON_STEP) != new_params.get(LESSON_STEP)


def shown(params: dict | None, question: dict | None) -> bool:
    """Whether the room's current ``question`` is shown with its state ``params``: always, unless it names a lesson
    step (:data:`QUESTION_STEP`) that the state does not name yet (asked the moment the teacher pressed Next or
    Previous: it is shown with its step's page, never under the step before)."""
    step = (question or {}).get(QUESTION_STEP)
    return not isinstance(step, str) or (params or {}).get(LESSON_STEP) == step


def check_state(page, params) -> tuple[str, dict[str, str]]:
    """``(page, params)`` checked: a page name (lower case, digits, ``_``) and ``{str: str}`` of at most
    :data:`MAX_PARAMS` keys, each value at most :data:`MAX_PARAM_CHARS` characters. Returns a copy.

    Raises:
        InvalidRequest: anything else.
    """
    if not isinstance(page, str) or not _PAGE.fullmatch(page):
        raise InvalidRequest("The page name must be lower-case letters, digits or '_' (at most 40).",
                             code="live_invalid_page")
    params = {} if params is None else params
    if (not isinstance(params, dict) or len(params) > MAX_PARAMS
            or not all(isinstance(k, str) and _PARAM_KEY.fullmatch(k) and isinstance(v, str)
                       and len(v) <= MAX_PARAM_CHARS for k, v in params.items())):
        raise InvalidRequest(f"A page's parameters must be at most {MAX_PARAMS} names with text values of at most "
                             f"{MAX_PARAM_CHARS} characters.", code="live_invalid_params", limit=MAX_PARAMS,
                             chars=MAX_PARAM_CHARS)
    if _encoded([page, params], MAX_STATE_BYTES) is None:
        raise InvalidRequest(f"A page's state is at most {MAX_STATE_BYTES} bytes.", code="live_state_too_large",
                             limit=MAX_STATE_BYTES)
    return page, dict(params)


def answer_value(value):
    """An answer as it is counted: a string stripped (1 to :data:`MAX_ANSWER_CHARS` characters, no control
    characters) or a finite number (a whole float as an int).

    Raises:
        InvalidAnswer: anything else (bool, None, lists, NaN, ...).
    """
    if isinstance(value, str):
        value = value.strip()
        if not value or len(value) > MAX_ANSWER_CHARS or _CONTROL.search(value):
            raise InvalidAnswer(f"An answer is 1 to {MAX_ANSWER_CHARS} characters of text.",
                                code="live_answer_length", max_chars=MAX_ANSWER_CHARS)
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidAnswer("An answer must be a finite number.", code="live_answer_type")
            if value.is_integer() and abs(value) < 2 ** 53:
                return int(value)
        elif abs(value) >= 2 ** 53:
            raise InvalidAnswer("An answer must be a number of at most 15 digits.", code="live_answer_type")
        return value
    raise InvalidAnswer("An answer must be a short text or a number.", code="live_answer_type")


def check_question(question) -> dict:
    """A question checked and copied: a JSON object of at most :data:`MAX_QUESTION_BYTES`, without an ``id`` key
    (the store gives it one); its ``choices``, when present, 2 to :data:`MAX_CHOICES` distinct answers
    (:func:`answer_value`).

    Raises:
        InvalidRequest: anything else.
    """
    text = _encoded(question, MAX_QUESTION_BYTES) if isinstance(question, dict) and "id" not in question else None
    if text is None:
        raise InvalidRequest(f"A question is a JSON object of at most {MAX_QUESTION_BYTES} bytes, without an 'id' "
                             "(the room numbers its questions).", code="live_invalid_question",
                             limit=MAX_QUESTION_BYTES)
    copy = json.loads(text)
    if "choices" in copy:
        choices = copy["choices"]
        if not isinstance(choices, list) or not 2 <= len(choices) <= MAX_CHOICES:
            raise InvalidRequest(f"A question's choices are a list of 2 to {MAX_CHOICES} answers.",
                                 code="live_invalid_choices", max_choices=MAX_CHOICES)
        try:
            values = [answer_value(c) for c in choices]
        except InvalidAnswer:
            raise InvalidRequest(f"A question's choices are a list of 2 to {MAX_CHOICES} answers.",
                                 code="live_invalid_choices", max_choices=MAX_CHOICES) from None
        if len({value_key(v) for v in values}) != len(values):
            raise InvalidRequest(f"A question's choices are a list of 2 to {MAX_CHOICES} answers.",
                                 code="live_invalid_choices", max_choices=MAX_CHOICES)
        copy["choices"] = values
    return copy


def check_answer(value, question: dict):
    """:func:`answer_value` of ``value``, which must also be one of the question's ``choices`` if it has some.

    Raises:
        InvalidAnswer: not a valid answer, or not one of the choices.
    """
    value = answer_value(value)
    if "choices" in question and value_key(value) not in {value_key(c) for c in question["choices"]}:
        raise InvalidAnswer("This answer is not one of the question's choices.", code="live_answer_not_a_choice")
    return value


def check_measured(measured):
    """What the model measured, shown with the revealed counts: plain JSON data of at most
    :data:`MAX_MEASURED_BYTES`. Returns a copy.

    Raises:
        InvalidRequest: anything else.
    """
    text = _encoded(measured, MAX_MEASURED_BYTES)
    if text is None:
        raise InvalidRequest(f"What the model measured is shown as plain data of at most {MAX_MEASURED_BYTES} "
                             "bytes.", code="live_invalid_measured", limit=MAX_MEASURED_BYTES)
    return json.loads(text)


def is_student(student_id) -> bool:
    """Whether ``student_id`` is a student id (:func:`check_student`)."""
    return isinstance(student_id, str) and bool(_STUDENT.fullmatch(student_id))


def check_student(student_id) -> str:
    """``student_id`` (1 to 64 letters, digits, ``_`` or ``-``, e.g. ``secrets.token_urlsafe(16)``).

    Raises:
        InvalidRequest: anything else.
    """
    if not is_student(student_id):
        raise InvalidRequest("A student id is 1 to 64 letters, digits, '_' or '-'.", code="live_invalid_student")
    return student_id


def check_question_id(question_id) -> int | None:
    """``question_id`` as the positive int the stores use, or None when it cannot be one."""
    if isinstance(question_id, bool) or not isinstance(question_id, int) or question_id < 1:
        return None
    return question_id


def value_key(value) -> str:
    """An answer as a dictionary key that keeps its type (``3`` and ``"3"`` are different answers)."""
    return json.dumps(value, ensure_ascii=False)


def counts_of(values) -> dict:
    """``{answer: how many}`` of answer values (:func:`answer_value`), most frequent first."""
    tally: dict[str, list] = {}
    for value in values:
        key = value_key(value)
        tally.setdefault(key, [value, 0])[1] += 1
    return {value: n for value, n in sorted(tally.values(), key=lambda vn: (-vn[1], value_key(vn[0])))}


def new_link_key() -> str:
    """A room's link key (``secrets.token_urlsafe(12)``: 96 bits): the teacher's link and QR code carry it beside the
    code, and a join with it is not rate limited (issue 44: a flood of wrong typed codes never locks out a class
    that joins by its link). Unguessable, so it opens nothing to one who has only the code."""
    return secrets.token_urlsafe(12)


def link_key_matches(given, stored: str | None) -> bool:
    """Whether ``given`` is the room's link key (constant time; anything not a string is not)."""
    return isinstance(given, str) and bool(stored) and hmac.compare_digest(given.encode(), str(stored).encode())
