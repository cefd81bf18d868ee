"""The registry tokens gitreg issues (`terraform login`, and the pages' "Sign in with ..." sessions).

A token is `gitreg_` + 32 random bytes (URL-safe base64); only its SHA-256 is kept. Each record
says who (the host's username), through which `[[auth.forges]]` host, when it was made, when it
expires and whether it was revoked, and holds the host's OAuth access and refresh tokens sealed
(AES-GCM, identity/crypto.py) under a key derived from `[auth] signing_key`: never in clear on
disk or in Redis. What the token opens is what the host's access token can read (the core's
"can read" checks use `Principal.host_token`), so the host's token is refreshed when it expires
(GitLab's after 2 hours), and a refresh the host refuses (the grant was revoked there) ends the
registry token too.

Kept in `[storage] path/issued_tokens.json` (written whole, atomically, after each change), which
`gitreg tokens revoke` edits too: a running server looks at the file again every second, so a
revocation made by the CLI holds within a second (well within `recheck_seconds`). With Redis
(`[cache] backend = "redis"`) records are also shared (replicas/logins.py): a token issued on
one replica works on every other, and a revocation or a refreshed host token reaches each of
them within a second. A revocation is also appended to an authenticated log in Redis that each
replica reads before it takes a record from there (identity/revocations.py, shared_records.py), so
an older copy put back by a Redis writer is refused by a replica that never saw the token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp

from gitreg.config.model import Config, ForgeAuthConfig
from gitreg.core.errors import Overloaded, StorageFull
from gitreg.core.flight import InFlight
from gitreg.core.secrets import token_digest
from gitreg.forges import host_oauth as oauth
from gitreg.forges.host_oauth import HostGrant, OAuthError
from gitreg.identity import deadline
from gitreg.identity.backoff import HostBackoff
from gitreg.identity.crypto import Sealer
from gitreg.identity.model import Principal, host_of, person, safe_name
from gitreg.identity.shared_records import WATCH_SECONDS, SharedRecords
from gitreg.replicas.connection import RedisDown
from gitreg.replicas.logins import SharedLogins
from gitreg.storage.state import StateFile

log = logging.getLogger(__name__)

FILE_NAME = "issued_tokens.json"
_FORMAT = 1
TOKEN_PREFIX = "gitreg_"
# A page session's id, as its signed cookie names it: this and the SHA-256 (hex) of a session token
# nobody holds. Not a credential: the API never takes it (`principal` looks tokens up by their digest).
SESSION_PREFIX = "gitreg_session_"
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
# How often a used record is read again: from Redis (shared) and, locally, the file's mtime.
RECHECK_SECONDS = 1.0
# The host's access token is refreshed this long before it expires.
REFRESH_MARGIN_SECONDS = 60.0
# Records that expired longer ago than this are dropped from the file.
KEEP_EXPIRED_SECONDS = 7 * 86400.0

Kind = Literal["terraform", "session"]


@dataclass(frozen=True)
class IssuedRecord:
    """One issued token, as `gitreg tokens list` shows it; `host` is the sealed host grant."""

    id: str
    digest: str  # SHA-256 of the token, hex
    username: str
    forge: str  # the [[auth.forges]] url
    kind: Kind
    created: float
    expires: float
    revoked: float | None
    host: str
    updated: float  # last change: the newer copy of a record wins (file, memory, Redis)
    callback: str = ""  # gitreg's OAuth callback the grant was made for (GitLab's refresh names it again)

    def active(self, now: float) -> bool:
        """Neither revoked nor expired."""
        return self.revoked is None and self.expires > now

    def to_json(self) -> str:
        """The record as stored (file and Redis)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Any) -> IssuedRecord | None:
        """A record read back; None when it is not one gitreg wrote."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                return None
        if not isinstance(data, dict):
            return None
        texts = ("id", "digest", "username", "forge", "host")
        numbers = ("created", "expires", "updated")
        if not all(isinstance(data.get(k), str) and data[k] for k in texts):
            return None
        if not all(isinstance(data.get(k), float | int) for k in numbers) or data.get("kind") not in (
            "terraform",
            "session",
        ):
            return None
        revoked = data.get("revoked")
        callback = data.get("callback", "")
        if not isinstance(callback, str):
            return None
        if revoked is not None and not isinstance(revoked, float | int):
            return None
        return cls(
            id=data["id"],
            digest=data["digest"],
            username=data["username"],
            forge=data["forge"],
            kind=data["kind"],
            created=float(data["created"]),
            expires=float(data["expires"]),
            revoked=float(revoked) if revoked is not None else None,
            host=data["host"],
            updated=float(data["updated"]),
            callback=callback,
        )


def new_token() -> str:
    """A fresh registry token: `gitreg_` and 32 random bytes."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class IssuedTokens:
    """The issued tokens: issued, looked up (as a `login` Principal), listed and revoked.

    Implements identity.model.LoginTokens. Touch it from the event loop only.
    """

    def __init__(
        self,
        config: Config,
        path: Path,
        http: aiohttp.ClientSession | None = None,
        shared: SharedLogins | None = None,
    ) -> None:
        if config.auth.signing_key is None:
            raise ValueError("issued tokens need [auth] signing_key")
        self._forges = {f.url: f for f in config.auth.forges if f.oauth}
        self._sealer = Sealer(config.auth.signing_key, "host-tokens")
        self._http = http
        # Redis's copies, authenticated and checked against the revocation log (identity/shared_records.py).
        self._shared = SharedRecords(shared, config.auth.signing_key, self._learned) if shared is not None else None
        self._logins = shared
        self._records: dict[str, IssuedRecord] = {}  # by digest
        self._checked: dict[str, float] = {}  # digest -> when Redis was last asked
        self._refreshing: InFlight[str, HostGrant | None] = InFlight()  # digest -> its one refresh
        self._grants: dict[str, tuple[str, HostGrant]] = {}  # digest -> (sealed text, its grant)
        self._used_codes: dict[str, float] = {}  # code id -> until
        self._file = StateFile(path, _FORMAT, ".issued-", self._snapshot, unreadable="issued tokens are lost")
        self._seen_mtime: int | None = None
        self._republishing: asyncio.Future[None] | None = None
        self._watching: asyncio.Task[None] | None = None
        self._upgraded = False  # records an earlier gitreg wrote to Redis were written again (`_upgrade`)
        # Each host's back-off, shared with identity/forge.py's questions (set by the identity door).
        self.backoffs: dict[str, HostBackoff] = {}
        self._looked = 0.0

    # ---- persistence ---------------------------------------------------------------------

    def _snapshot(self) -> Any:
        cutoff = time.time() - KEEP_EXPIRED_SECONDS
        kept = [r for r in self._records.values() if r.expires > cutoff]

        now = time.time()
        codes = {c: until for c, until in self._used_codes.items() if until > now}

        learned = self._shared.log if self._shared is not None else None
        revocations = {d: e for d, e in learned.revoked.items() if e > now} if learned is not None else {}
        highs = dict(learned.highs) if learned is not None else {}

        def encode() -> str:
            tokens = [json.loads(r.to_json()) for r in kept]
            document = {"format": _FORMAT, "tokens": tokens, "used_codes": codes}
            return json.dumps({**document, "revocations": revocations, "logs": highs}, indent=1)

        return encode

    async def load(self) -> None:
        """Read the file (at start, and when another process changed it)."""
        self._seen_mtime = self._mtime()
        data = await self._file.load()
        items = data.get("tokens") if data is not None else None
        self._merge(IssuedRecord.from_json(item) for item in (items if isinstance(items, list) else []))
        codes = data.get("used_codes") if data is not None else None
        if isinstance(codes, dict):
            self._used_codes.update({c: float(u) for c, u in codes.items() if isinstance(u, float | int)})
        if self._shared is not None and data is not None:
            self._shared.log.remember(data.get("revocations"), data.get("logs"))
        await self.republish()

    def reconnected(self) -> None:
        """Redis is back (perhaps emptied, perhaps missing a revocation made while it was down): the
        file's revocations are put back, in the background."""
        if self._republishing is None or self._republishing.done():
            self._republishing = asyncio.ensure_future(self.republish())

    async def republish(self) -> None:
        """The file is authoritative: every revocation it holds (and every one this replica read in the log)
        is put back in the log when the log lacks it (emptied, cut), and its record in Redis (emptied, or
        given an older copy by whoever can write it), so no replica reading Redis takes the token again."""
        if self._shared is None:
            return
        now = time.time()
        revoked = [r for r in self._records.values() if r.revoked is not None and r.expires > now]
        try:
            await self._shared.heal((r.digest, r.expires) for r in revoked)
            for record in revoked:
                await self._shared.put(record.digest, record.to_json(), True, record.expires)
            if not self._upgraded:
                await self._upgrade()
        except RedisDown:
            return

    async def _upgrade(self) -> None:
        """Once: the active records this replica holds that Redis has as an earlier gitreg wrote them (no
        revocation log named, so no replica takes them) are merged with that copy and written again."""
        held = {r.digest for r in self._records.values() if r.active(time.time())}
        earlier = await self._shared.earlier(held) if self._shared is not None and held else {}
        self._merge(self._opened(digest, text) for digest, text in earlier.items())
        for digest in earlier:
            await self._publish(self._records[digest])
        self._upgraded = True

    def start_watching(self) -> None:
        """With Redis: read the revocation log every WATCH_SECONDS (revocations of tokens never seen here are
        learned, a log someone cut is healed), until `close`."""
        if self._shared is not None and self._watching is None:
            self._watching = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        shared = self._shared
        while shared is not None:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                await shared.watch()
            except RedisDown:
                continue
            self._heal_if_cut()

    def _heal_if_cut(self) -> None:
        if self._shared is not None and self._shared.cut_seen:
            self.reconnected()  # the same: the log lacks revocations this replica knows

    def _learned(self, digests: list[str]) -> None:
        """Revocations read in the log: the records held here are revoked too (and kept so on disk)."""
        now = time.time()
        for digest in digests:
            record = self._records.get(digest)
            if record is not None and record.revoked is None:
                self._records[digest] = replace(record, revoked=now)
        self._file.mark_dirty()  # (the learned revocations are kept in the file too)

    def _mtime(self) -> int | None:
        try:
            return os.stat(self._file.path).st_mtime_ns
        except OSError:
            return None

    def _merge(self, records: Iterable[IssuedRecord | None]) -> bool:
        """Take each record newer than the copy held; True when one was taken.

        A revocation is final whichever copy is newer (a replica whose clock runs ahead, or an older
        copy put back in Redis, cannot undo it): the earliest revocation of either copy stays.
        """
        changed = False
        for record in records:
            if record is None:
                continue
            held = self._records.get(record.digest)
            taken = record if held is None or record.updated > held.updated else held
            revoked = [r.revoked for r in (held, record) if r is not None and r.revoked is not None]
            if revoked and taken.revoked != min(revoked):
                taken = replace(taken, revoked=min(revoked))
            if taken.revoked is None and self._shared is not None and record.digest in self._shared.log.revoked:
                taken = replace(taken, revoked=time.time())  # the log says so (whatever copy was put back)
            if taken != held:
                self._records[record.digest] = taken
                changed = True
        return changed

    async def _save(self, record: IssuedRecord, durable: bool = False) -> None:
        """Keep `record` here, on disk and (with Redis) for every replica.

        `durable`: a new token must be on disk before anyone holds it (else `gitreg tokens revoke`
        could not find it): StorageFull (507) when the file cannot be written, and nothing kept.
        """
        held = self._records.get(record.digest)
        self._records[record.digest] = record
        self._file.mark_dirty()
        await self._file.flush()
        if durable and self._file.dirty:
            if held is None:
                del self._records[record.digest]
            else:
                self._records[record.digest] = held
            raise StorageFull(
                f"the login could not be kept on disk ({self._file.path.parent}): nothing was issued; "
                "free space there and log in again"
            )
        await self._publish(record)

    async def _publish(self, record: IssuedRecord) -> None:
        if self._shared is not None:
            try:
                await self._shared.put(record.digest, record.to_json(), record.revoked is not None, record.expires)
            except RedisDown as e:
                log.warning("issued token %s: not shared through redis (%s); this replica keeps it", record.id, e)

    @staticmethod
    def _opened(digest: str, text: str | None) -> IssuedRecord | None:
        """The record of `digest` Redis gave (its JSON, authenticated by SharedRecords), if it is one."""
        record = IssuedRecord.from_json(text) if text is not None else None
        return record if record is not None and record.digest == digest else None

    async def _look_again(self) -> None:
        """Every RECHECK_SECONDS: the file changed by another process (`gitreg tokens revoke`) is read again."""
        now = time.monotonic()
        if now - self._looked < RECHECK_SECONDS:
            return
        self._looked = now
        if self._mtime() != self._seen_mtime:
            await self.load()

    async def _from_shared(self, digest: str, force: bool = False) -> None:
        """With Redis: the shared copy of a record, read again at most once every RECHECK_SECONDS."""
        if self._shared is None:
            return
        now = time.monotonic()
        if not force and now - self._checked.get(digest, -RECHECK_SECONDS) < RECHECK_SECONDS:
            return
        self._checked[digest] = now
        if len(self._checked) > 100_000:
            self._checked.clear()
        try:
            text = await self._shared.get(digest)
        except RedisDown:
            return  # this replica's own copy answers
        if text is not None and self._merge([self._opened(digest, text)]):
            self._file.mark_dirty()
        self._heal_if_cut()

    async def load_shared(self) -> None:
        """With Redis: every shared record (`gitreg tokens list` and `revoke`); RedisDown when it is unreachable."""
        if self._shared is not None:
            found = await self._shared.all()
            self._merge(self._opened(digest, text) for digest, text in found.items())

    async def close(self) -> None:
        """Write what is pending, disconnect from Redis."""
        running = [f for f in (self._republishing, self._watching, *self._refreshing.futures()) if f is not None]
        for future in running:
            future.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self._file.flush()
        if self._logins is not None:
            await self._logins.close()

    # ---- issuing, looking up, revoking ----------------------------------------------------

    async def issue(
        self, forge: ForgeAuthConfig, username: str, grant: HostGrant, kind: Kind, seconds: float, callback: str
    ) -> str:
        """A new registry token for `username` on `forge`, standing for the host's `grant` (made for `callback`).

        For a page session (`kind="session"`) what is returned is the session's id (`SESSION_PREFIX`
        and the record's digest), for the signed cookie: the token itself is dropped here, so no
        cookie carries a credential that opens the API.
        """
        token = new_token()
        now = time.time()
        digest = token_digest(token).hex()
        record = IssuedRecord(
            id=secrets.token_hex(6),
            digest=digest,
            username=username,
            forge=forge.url,
            kind=kind,
            created=now,
            expires=now + seconds,
            revoked=None,
            host=self._seal(digest, grant),
            updated=now,
            callback=callback,
        )
        await self._save(record, durable=True)
        log.info("issued %s token %s for %s", kind, record.id, person(username, forge))
        return SESSION_PREFIX + digest if kind == "session" else token

    def _seal(self, digest: str, grant: HostGrant) -> str:
        plain = {"access": grant.access_token, "refresh": grant.refresh_token, "expires_at": grant.expires_at}
        return self._sealer.seal(json.dumps(plain).encode(), digest)

    def _unseal(self, record: IssuedRecord) -> HostGrant | None:
        """The host grant of `record`, decrypted once per version of the record (not per request)."""
        held = self._grants.get(record.digest)
        if held is not None and held[0] == record.host:
            return held[1]
        grant = self._decrypt(record)
        if grant is not None:
            if len(self._grants) > 10_000:
                self._grants.clear()
            self._grants[record.digest] = (record.host, grant)
        return grant

    def _decrypt(self, record: IssuedRecord) -> HostGrant | None:
        plain = self._sealer.open(record.host, record.digest)
        try:
            data = json.loads(plain) if plain is not None else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("access"), str):
            return None
        refresh = data.get("refresh")
        expires_at = data.get("expires_at")
        return HostGrant(
            access_token=data["access"],
            refresh_token=refresh if isinstance(refresh, str) else None,
            expires_at=float(expires_at) if isinstance(expires_at, float | int) else None,
        )

    async def principal(self, presented: str) -> Principal | None:
        """The `login` principal an issued, unexpired, unrevoked `terraform login` token stands for (host
        token fresh), else None. A page session's record never opens the API: it is named by
        `session_principal`, and its token was never handed to anyone.

        Overloaded (503) when the host's token must be refreshed and the host cannot be reached.
        """
        if not presented.startswith(TOKEN_PREFIX) or len(presented) > 200:
            return None
        return await self._principal(token_digest(presented.strip()).hex(), "terraform")

    async def session_principal(self, session_id: str) -> Principal | None:
        """The `login` principal of a page session (its id, `session_id`: what the signed cookie
        names), else None: expired, revoked, or not a session."""
        digest = session_id.removeprefix(SESSION_PREFIX)
        if not session_id.startswith(SESSION_PREFIX) or not _DIGEST_RE.fullmatch(digest):
            return None
        return await self._principal(digest, "session")

    async def _principal(self, digest: str, kind: Kind) -> Principal | None:
        await self._look_again()
        await self._from_shared(digest)
        record = self._records.get(digest)
        now = time.time()
        if record is None or record.kind != kind or not record.active(now):
            return None
        if self._shared is not None and digest in self._shared.log.revoked:
            return None  # revoked in the log (the record held here is marked so when it is next merged)
        forge = self._forges.get(record.forge)
        if forge is None:
            return None  # the host is no longer configured (or lost its OAuth application)
        grant = self._unseal(record)
        if grant is None:
            log.warning("issued token %s: its host tokens do not open (signing_key changed?); refused", record.id)
            return None
        if grant.expires_at is not None and grant.expires_at - REFRESH_MARGIN_SECONDS < now:
            grant = await self._refreshed(digest, forge)
            if grant is None:
                return None
        return Principal(kind="login", name=person(record.username, forge), forge=forge, host_token=grant.access_token)

    async def _refreshed(self, digest: str, forge: ForgeAuthConfig) -> HostGrant | None:
        """The host grant of `digest` renewed; None when the host refused. One refresh at a time per record,
        shared by every request that needs it; each waits at most what is left of its budget
        (identity/deadline.py), and the refresh goes on for the next one."""
        future = self._refreshing.join(digest, lambda: self._refresh_held(digest, forge))
        return await deadline.wait(
            future,
            lambda waited: deadline.late(
                f"the Git host {host_of(forge.url)}", "a renewal of this login's access", waited, oauth.CALL_SECONDS
            ),
        )

    async def _refresh_held(self, digest: str, forge: ForgeAuthConfig) -> HostGrant | None:
        await self._from_shared(digest, force=True)  # another replica may have refreshed it
        record = self._records[digest]
        grant = self._unseal(record)
        now = time.time()
        if grant is None or not record.active(now):
            return None
        if grant.expires_at is None or grant.expires_at - REFRESH_MARGIN_SECONDS >= now:
            return grant
        return await self._refresh(record, grant, forge)

    async def _refresh(self, record: IssuedRecord, grant: HostGrant, forge: ForgeAuthConfig) -> HostGrant | None:
        if grant.refresh_token is None or self._http is None:
            return None
        backoff = self.backoffs.get(forge.url)
        if backoff is not None:
            backoff.check()
        try:
            fresh = await oauth.refresh(self._http, forge, grant.refresh_token, record.callback)
        except OAuthError as e:
            if e.reason != "refused":
                retry = backoff.note(e.retry_after, "failing") if e.slow_down and backoff is not None else 30
                raise Overloaded(f"{e.message}; try again in {retry} s", retry_after=retry) from None
            who = safe_name(record.username)
            log.info("issued token %s of %s: the host refused its refresh (%s); revoked", record.id, who, e)
            now = time.time()
            await self._save(replace(record, revoked=now, updated=now))
            return None
        if fresh.refresh_token is None:  # GitHub keeps the old one when it sends none
            fresh = replace(fresh, refresh_token=grant.refresh_token)
        await self._save(replace(record, host=self._seal(record.digest, fresh), updated=time.time()))
        return fresh

    def records(self) -> list[IssuedRecord]:
        """Every record held, oldest first."""
        return sorted(self._records.values(), key=lambda r: (r.created, r.id))

    async def revoke(self, selector: str) -> list[IssuedRecord]:
        """Revoke the active tokens whose id or username is `selector`; those revoked."""
        now = time.time()
        hit = [r for r in self._records.values() if r.active(now) and selector in (r.id, r.username)]
        for record in hit:
            await self._save(replace(record, revoked=now, updated=now))
        return hit

    async def end_session(self, session_id: str) -> None:
        """Revoke the page session `session_id` names (signing out)."""
        record = self._records.get(session_id.removeprefix(SESSION_PREFIX))
        now = time.time()
        if record is not None and record.kind == "session" and record.active(now):
            await self._save(replace(record, revoked=now, updated=now))

    async def first_use(self, code_id: str, ttl_seconds: float) -> bool:
        """True the first time a one-time code (or a login's state) is used, across restarts (the file)
        and replicas (Redis). Without that certainty, no: with Redis configured and down, Overloaded
        (503); the file not written, StorageFull (507)."""
        now = time.time()
        for expired in [c for c, until in self._used_codes.items() if until < now]:
            del self._used_codes[expired]
        if code_id in self._used_codes:
            return False
        self._used_codes[code_id] = now + ttl_seconds
        self._file.mark_dirty()
        await self._file.flush()
        if self._file.dirty:
            raise StorageFull(
                f"a one-time login code could not be marked used on disk ({self._file.path.parent}); "
                "free space there and log in again"
            )
        if self._logins is not None:
            try:
                return await self._logins.first_use(code_id, ttl_seconds)
            except RedisDown as e:
                log.warning("a one-time login code could not be checked on every replica: %s", e)
                raise Overloaded("the replicas' shared store is unreachable; try the login again", 30) from None
        return True
