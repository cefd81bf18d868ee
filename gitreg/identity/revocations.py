"""The revocation log: what every replica reads before it takes an issued token's record from Redis.

Issued records are shared through Redis (identity/issued.py), authenticated by an HMAC under a key
derived from `[auth] signing_key`. That stops a Redis writer from making or changing a record, not
from putting back an *older* authentic one: an active copy of a token revoked since. A replica that
holds the revocation in its own file refuses it; one that never saw the token would take it. So
each revocation is also appended to a log in Redis (a list, `<prefix>login-revocations`), and a
record is taken from Redis only together with the log it names:

- the log's first entry names it (a random id); entry n says "the token of this digest is revoked"
  (or is that first entry), and carries n: each entry is authenticated with the log's id and its
  number (HMAC, a key of its own derived from the signing key), so a writer can neither make one,
  nor move one to another log or number;
- a record in Redis carries the log's id and the highest entry number its writer had read: the
  token's revocation, if any, is a later entry. A replica reading a record reads the log's new
  entries in the same round trip (once a second per token at most, as it reads the record), and
  every running replica reads it every WATCH_SECONDS besides; what it learned is kept in its file.

What a Redis writer without the signing key can do then: a revoked record put back is refused
wherever the log has its revocation; the log deleted or replaced: every record naming it is
refused (a new log has another id); an entry deleted from the middle: the records written before
it are refused (a missing number); a made-up or altered entry is skipped. What remains: a writer
who cuts the log back to the length a record names (keeping its first entries) and puts that
record back is believed by a replica that has not read the log since the revocation (one started
afterwards with an empty file) until a replica that read the cut entries (or holds the revocation
in its file) sees the log shorter than it was and appends its revocations again (`heal`): within
WATCH_SECONDS while one runs. Every refusal denies a token (as deleting its record does); none
resurrects one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

LOG_NAME = "log"  # the first entry's name (a revocation's is a digest)
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
# How many logs' high-water marks a replica keeps (a log replaced, then put back cut, is still known).
KEEP_LOGS = 16
# Entries read per round trip: a log a writer made huge is read in slices, never whole.
READ_SLICE = 1000


@dataclass(frozen=True)
class Entry:
    """One authentic entry: number `seq` of log `log`, naming `name` (a digest, or LOG_NAME) until `expires`."""

    log: str
    seq: int
    name: str
    expires: float


class RevocationLog:
    """This replica's view of the shared log (touched from the event loop only).

    `revoked`: every revocation learned, digest -> the token's expiry (kept in the file). `log_id`,
    `read` (list entries read), `max_seq` and the numbers seen describe the log now in Redis.
    """

    def __init__(self, signing_key: str) -> None:
        self._key = hashlib.sha256(b"gitreg-revocation-log\0" + signing_key.encode()).digest()
        self.revoked: dict[str, float] = {}
        self.log_id: str | None = None
        self.read = 0
        self.max_seq = 0
        self._missing: set[int] = set()  # numbers below max_seq no entry has (someone deleted them)
        self.logged: set[str] = set()  # digests the current log revokes
        # The highest number read of each of the last logs (by id), kept in the file: a log read shorter
        # than that was cut by someone, perhaps put back after another replaced it (`heal`).
        self.highs: dict[str, int] = {}

    # ---- entries -------------------------------------------------------------------------

    def _mac(self, log: str, seq: int, name: str, payload: str) -> str:
        return hmac.new(self._key, f"{log}\0{seq}\0{name}\0{payload}".encode(), hashlib.sha256).hexdigest()

    def first_entry(self) -> tuple[str, str]:
        """(id, entry) of a new log's first entry."""
        log = secrets.token_hex(16)
        return log, f"{self._mac(log, 1, LOG_NAME, log)}.1.{LOG_NAME}.{log}"

    def entry(self, digest: str, expires: float, after: int = 0) -> str:
        """Entry `max_seq + 1 + after` of the current log: the token of `digest` (expiring at `expires`) is revoked."""
        seq, payload = self.max_seq + 1 + after, str(int(expires))
        return f"{self._mac(self.log_id or '', seq, digest, payload)}.{seq}.{digest}.{payload}"

    def log_of(self, first: str | None) -> str | None:
        """The id a log's first entry names, if it is authentic."""
        found = self._parse(first, None)
        return found.log if found is not None and found.seq == 1 and found.name == LOG_NAME else None

    def _parse(self, text: str | None, log: str | None) -> Entry | None:
        """An authentic entry of log `log` (None: a first entry, which names its own), else None."""
        mac, _, rest = (text or "").partition(".")
        seq_text, _, rest = rest.partition(".")
        name, _, payload = rest.partition(".")
        if not seq_text.isdigit() or len(seq_text) > 12 or not payload or len(payload) > 64:
            return None
        log = payload if log is None else log
        if not hmac.compare_digest(mac, self._mac(log, int(seq_text), name, payload)):
            return None
        if name == LOG_NAME:
            return Entry(log, int(seq_text), name, 0.0) if payload == log else None
        if not _DIGEST_RE.fullmatch(name) or not payload.isdigit():
            return None
        return Entry(log, int(seq_text), name, float(payload))

    # ---- reading -------------------------------------------------------------------------

    def start_over(self, log: str | None) -> None:
        """Forget what was read of the log (it was replaced, deleted or cut): read `log` from its start."""
        self.log_id, self.read, self.max_seq = log, 0, 0
        self._missing.clear()
        self.logged.clear()

    def absorb(self, entries: list[str | None], now: float) -> list[str]:
        """Take the entries read after `read` (in list order); the digests newly learned revoked."""
        learned = []
        for text in entries:
            self.read += 1
            found = self._parse(text, self.log_id) if self.log_id is not None else None
            if found is None:
                continue  # made up, altered, or of another log
            if found.seq > self.max_seq:
                self._missing.update(range(self.max_seq + 1, found.seq))
                self.max_seq = found.seq
            else:
                self._missing.discard(found.seq)
            if found.name == LOG_NAME:
                continue  # the first entry (number 1)
            self.logged.add(found.name)
            if found.name not in self.revoked and found.expires > now:
                learned.append(found.name)
            self.revoked[found.name] = max(found.expires, self.revoked.get(found.name, 0.0))
        return learned

    def cut(self) -> bool:
        """True when the log now read is shorter than this replica read it before (someone cut it): then
        its revocations are appended again (`heal`). Records the high-water mark otherwise."""
        if self.log_id is None:
            return False
        if self.max_seq < self.highs.get(self.log_id, 0):
            return True
        self.settle()
        return False

    def settle(self) -> None:
        """The log as read now is the high-water mark of its id (the last KEEP_LOGS logs are remembered)."""
        if self.log_id is None:
            return
        self.highs.pop(self.log_id, None)
        self.highs[self.log_id] = self.max_seq
        while len(self.highs) > KEEP_LOGS:
            del self.highs[next(iter(self.highs))]

    def refusal(self, log: str, seq: int) -> str | None:
        """Why a record naming (log `log`, entries up to `seq`) cannot be taken from Redis; None: it can."""
        if log != self.log_id:
            return "the revocation log it names is gone"
        if seq > self.max_seq:
            return "the revocation log is shorter than when it was written"
        if self._missing and max(self._missing) > seq:
            return "an entry of the revocation log written after it is missing"
        return None

    def remember(self, revoked: object, highs: object) -> None:
        """What the file kept: revocations learned (digest -> expiry) and high-water marks (log id -> number)."""
        if isinstance(revoked, dict):
            for digest, expires in revoked.items():
                if isinstance(digest, str) and _DIGEST_RE.fullmatch(digest) and isinstance(expires, int | float):
                    self.revoked[digest] = max(float(expires), self.revoked.get(digest, 0.0))
        if isinstance(highs, dict):
            for log, seq in list(highs.items())[-KEEP_LOGS:]:
                if isinstance(log, str) and isinstance(seq, int) and seq > self.highs.get(log, 0):
                    self.highs[log] = seq

    def forget_expired(self, now: float) -> None:
        """Drop revocations of tokens that have expired anyway."""
        for digest in [d for d, expires in self.revoked.items() if expires <= now]:
            del self.revoked[digest]
