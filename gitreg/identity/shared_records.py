"""Issued records as Redis holds them: authenticated, and taken only together with the revocation log.

A record in Redis is `<mac>.<log id>.<seq>.<json>`: the HMAC (a key derived from `[auth]
signing_key`) covers the token's digest, the log it names and the JSON, so a Redis writer can
neither make nor alter one, nor move one to another token; the log part is what lets a replica
refuse an authentic record put back after its revocation (identity/revocations.py). What is read
without a valid MAC, or naming a log it cannot be checked against, is ignored (logged).

Every call may raise RedisDown (replicas/connection.py): the caller answers from its own file.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Iterable

from gitreg.identity.revocations import READ_SLICE, RevocationLog
from gitreg.replicas.logins import SharedLogins

log = logging.getLogger(__name__)

# Every running replica reads the log's new entries this often, besides when it reads a record: it
# learns revocations of tokens it never saw, and puts back what someone cut from the log.
WATCH_SECONDS = 2.0
# The round trips a full read of the log may take (a million entries): bounded, however a writer grows it.
ALL_SLICES = 1000


class SharedRecords:
    """The issued-records hash and the revocation log of one Redis, as identity/issued.py uses them.

    `learned(digests)` is told of revocations read in the log (to revoke the records held here).
    """

    def __init__(self, shared: SharedLogins, signing_key: str, learned: Callable[[list[str]], None]) -> None:
        self.shared = shared
        self.log = RevocationLog(signing_key)
        self._key = hashlib.sha256(b"gitreg-issued-records\0" + signing_key.encode()).digest()
        self._learned = learned
        self._first: str | None = None  # the log's first item as last read (a made-up one is replaced)
        self.cut_seen = False  # the log was read shorter than before: `heal` it

    # ---- records -------------------------------------------------------------------------

    def _mac(self, digest: str, log_id: str, seq: int, text: str) -> str:
        message = f"{digest}\0{log_id}\0{seq}\0{text}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def _open(self, digest: str, value: str | None) -> str | None:
        """The JSON of a record Redis holds for `digest` when gitreg wrote it for that digest and the log it
        names says nothing against it; else None."""
        if value is None:
            return None
        mac, _, rest = value.partition(".")
        log_id, _, rest = rest.partition(".")
        seq, _, text = rest.partition(".")
        authentic = text and seq.isdigit() and len(seq) <= 12
        if not authentic or not hmac.compare_digest(mac, self._mac(digest, log_id, int(seq), text)):
            why = (
                "written by an earlier gitreg (no revocation log)"
                if log_id.startswith("{")
                else "not signed by this registry"
            )
            log.warning("issued token record in redis for %s...: %s; ignored", digest[:8], why)
            return None
        refused = self.log.refusal(log_id, int(seq))
        if refused is not None:
            log.warning("issued token record in redis for %s...: %s; ignored", digest[:8], refused)
            return None
        return text

    async def get(self, digest: str) -> str | None:
        """The JSON of the record of `digest` in Redis (None: none, or not to be taken), the log's new
        entries read in the same round trip."""
        return self._open(digest, await self._read(digest))

    async def put(self, digest: str, text: str, revoked: bool, expires: float) -> None:
        """Store the record of `digest` (its JSON); a revoked one is appended to the log first."""
        await self._ensure_log()
        if revoked and digest not in self.log.logged:
            await self.shared.append(self.log.entry(digest, expires))
            await self._read(None)
        log_id, seq = self.log.log_id or "", self.log.max_seq
        await self.shared.put(digest, f"{self._mac(digest, log_id, seq, text)}.{log_id}.{seq}.{text}")

    async def all(self) -> dict[str, str]:
        """Every record in Redis that may be taken, as JSON by digest (`gitreg tokens list` and `revoke`)."""
        await self._read(None)
        found = await self.shared.all()
        opened = {digest: self._open(digest, value) for digest, value in found.items()}
        return {digest: text for digest, text in opened.items() if text is not None}

    async def earlier(self, held: set[str]) -> dict[str, str]:
        """The JSON of the records of `held` digests that an earlier gitreg wrote (`<mac>.<json>`, no log:
        authentic, but never taken as they are), for the replica holding them to write them again."""
        found = await self.shared.all()
        out = {}
        for digest in held & found.keys():
            mac, _, text = found[digest].partition(".")
            made = hmac.new(self._key, f"{digest}\0{text}".encode(), hashlib.sha256).hexdigest()
            if text.startswith("{") and hmac.compare_digest(mac, made):
                out[digest] = text
        return out

    # ---- the log ---------------------------------------------------------------------------

    async def _read(self, digest: str | None, slices: int = 3) -> str | None:
        """Read the log's new entries, up to `slices` round trips of READ_SLICE, and in the
        first, the raw record of `digest`."""
        record, length, trips = None, 0, 0
        while True:
            found, first, length, entries = await self.shared.read(digest, self.log.read, READ_SLICE)
            record = found if trips == 0 else record
            trips += 1
            self._first = first
            log_id = self.log.log_of(first)
            if log_id != self.log.log_id or length < self.log.read:
                again = self.log.read > 0
                self.log.start_over(log_id)  # replaced, deleted or cut: from its start
                if again:
                    continue
            learned = self.log.absorb(entries, time.time())
            if learned:
                self._learned(learned)
            if self.log.read >= length or trips == slices:
                break
        if self.log.read >= length and self.log.cut():
            self.cut_seen = True  # (the owner heals it: it knows its own revocations)
        return record

    async def _ensure_log(self) -> None:
        """The log read up to now, started first when there is none (or its first item is made up)."""
        await self._read(None, slices=ALL_SLICES)
        if self.log.log_id is None:
            _, first = self.log.first_entry()
            await self.shared.start_log(first, self._first)
            await self._read(None, slices=ALL_SLICES)

    async def watch(self) -> None:
        """Read the log's new entries (`cut_seen` then says whether it was cut); forget expired revocations."""
        await self._read(None, slices=ALL_SLICES)
        self.log.forget_expired(time.time())

    async def heal(self, revoked: Iterable[tuple[str, float]]) -> None:
        """Append every unexpired revocation this replica knows (`revoked`: its own revoked records, and what
        it learned) that the log does not hold now: a log cut or replaced gets them back."""
        await self._ensure_log()
        now = time.time()
        known = {**self.log.revoked, **dict(revoked)}
        missing = [(d, e) for d, e in known.items() if e > now and d not in self.log.logged]
        if missing:
            await self.shared.append(*(self.log.entry(d, e, after=i) for i, (d, e) in enumerate(missing)))
            await self._read(None)
            log.warning("the revocation log in redis lacked %d revocations this replica knows: appended", len(missing))
        self.log.settle()
        self.cut_seen = False
