"""A Git host's identities (`[[auth.forges]]`): whom a token belongs to, what it can read, what it sees.

Every answer is the host's, asked with the person's or job's own token through the forges'
one API client (pages, rate limits, size caps), and trusted for the forge's `recheck_seconds`:
- who: `GET /user`, per token digest (a 401/403 means "not this host's token");
- can read: GitLab `GET /projects/:path`, GitHub `GET /repos/{owner}/{repo}`, per (token digest,
  repository); with Redis and `[auth] signing_key` the answer is shared with the other replicas,
  authenticated (an HMAC names it: `_shared_keys`);
- what it sees: the `[[orgs]]` of this host listed with the token (the host returns only what it
  may see), plus one membership listing when `[[modules]]` rules serve repositories on this host.
A repository on another host is never opened by this host's token. A host that cannot answer,
once what it said expired, is a 503 naming the host (IdentityUnavailable), never a 401.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import aiohttp

from gitreg.config.model import ForgeAuthConfig, OrgConfig
from gitreg.core.errors import Forbidden, IdentityUnavailable
from gitreg.core.secrets import digest
from gitreg.forges.base import ForgeClient, ForgeError, ForgeNotFound, OrgStats
from gitreg.forges.hosts import user_client
from gitreg.forges.records import RepoRecord
from gitreg.identity import deadline
from gitreg.identity.answers import Answers
from gitreg.identity.backoff import HostBackoff
from gitreg.identity.issued import TOKEN_PREFIX
from gitreg.identity.model import Principal, host_of, person, safe_name
from gitreg.identity.visibility import Visibility, repository_path
from gitreg.replicas.base import SharedState

log = logging.getLogger(__name__)
T = TypeVar("T")
# What a 503 for a host that cannot answer tells the client to wait.
RETRY_SECONDS = 30
# A single answer (who is this, can it read that): its own cap. A request waits for all of its answers
# together at most deadline.REQUEST_SECONDS, inside Terraform's 10 s.
ASK_SECONDS = 8.0
# Failures that back the whole host off: rate limited, 5xx or unreachable ("error"), silent.
BACK_OFF_REASONS = frozenset({"rate_limited", "error", "timeout"})
# A person's listing of the orgs (pages and search; many API pages for a large group). A request waits
# for it only what is left of its budget (identity/deadline.py); the listing goes on for the retry.
LISTING_SECONDS = 60.0

# Tokens that name their issuer: a GitHub token never goes to a GitLab host, nor the reverse
# (trying a token on a host that did not issue it would hand it to that host).
_GITHUB_TOKEN_RE = re.compile(r"(gh[pousr]_|github_pat_)")
_GITLAB_TOKEN_RE = re.compile(r"gl[a-z]{2,8}-")


class ForgeAccess:
    """One `[[auth.forges]]` host and what it said about the tokens presented to it."""

    def __init__(
        self,
        forge: ForgeAuthConfig,
        orgs: tuple[OrgConfig, ...],
        session: Callable[[], aiohttp.ClientSession],
        shared: SharedState,
        clock: Callable[[], float] = time.monotonic,
        signing_key: str | None = None,
    ) -> None:
        self.forge = forge
        # What names the "can read" answers shared through Redis (see _shared_keys).
        self._access_key = (
            hashlib.sha256(b"gitreg-shared-access\0" + signing_key.encode()).digest() if signing_key else None
        )
        self.host = host_of(forge.url)
        # The org listings this host's tokens see (their own token replaced by the person's).
        self.orgs = tuple(o for o in orgs if o.provider == forge.provider and o.api_url.rstrip("/") == forge.api_url)
        # Where this host's repositories may be cloned from: its web and API hosts, and its orgs' clone hosts.
        self.hosts = frozenset({self.host, host_of(forge.api_url), *(h for o in self.orgs for h in o.clone_hosts)}) - {
            ""
        }
        self.rules_here = False  # set by Identities: [[modules]] rules serve repositories on this host
        self.stats = OrgStats()  # every API call made with a person's token, for /metrics
        self._session = session
        self._shared = shared
        self._clock = clock
        # Asked nothing while it says "slow down" or fails (shared with the OAuth calls: Identities).
        self.backoff = HostBackoff(self.host, clock)
        # What the host said, failures included (one call per token and window while it fails).
        self.who: Answers[bytes, str | None] = Answers(clock=clock, failed_seconds=RETRY_SECONDS)
        self.reads: Answers[tuple[bytes, str], bool] = Answers(clock=clock, failed_seconds=RETRY_SECONDS)
        self.seen: Answers[bytes, frozenset[str]] = Answers(limit=1000, clock=clock, failed_seconds=RETRY_SECONDS)

    def accepts(self, token: str) -> bool:
        """False when the token names another kind of host (a `ghp_...` token is no GitLab token), or is
        gitreg's own (`gitreg_`: issued here, or made up to look so; no host ever issued one)."""
        if token.startswith(TOKEN_PREFIX):
            return False
        if _GITHUB_TOKEN_RE.match(token):
            return self.forge.provider == "github"
        if _GITLAB_TOKEN_RE.match(token):
            return self.forge.provider == "gitlab"
        return True

    def _client(self, token: str, org: OrgConfig | None = None) -> ForgeClient:
        return user_client(self.forge, token, self._session(), self.stats, org)

    async def _asked(self, what: str, work: Coroutine[Any, Any, T], seconds: float = ASK_SECONDS) -> T:
        """`work` within `seconds`; a host's failure (down, silent, rate limited, garbage) as
        IdentityUnavailable. A host that answered 429/5xx, said Retry-After or did not answer is backed
        off as a whole: until then every question is that 503, with its Retry-After, and no call."""
        try:
            self.backoff.check()
        except IdentityUnavailable:
            work.close()  # never started: no call
            raise
        try:
            # Terraform gives a registry request 10 s: a host that does not answer becomes a 503 it
            # can show (and retry once), not a client-side timeout after the org client's retries.
            async with asyncio.timeout(seconds):
                return await work
        except TimeoutError:
            log.warning("%s: cannot ask %s: no answer within %g s", self.forge.label, what, seconds)
            self.backoff.note(None, f"no answer within {seconds:g} s")
            raise IdentityUnavailable(
                f"the Git host {self.host} did not answer {what} within {seconds:g} s; try again in {RETRY_SECONDS} s",
                retry_after=RETRY_SECONDS,
            ) from None
        except ForgeError as e:
            log.warning("%s: cannot ask %s: %s", self.forge.label, what, e.reason)
            retry = RETRY_SECONDS
            if e.reason in BACK_OFF_REASONS:
                retry = self.backoff.note(e.retry_after, e.reason.replace("_", " "))
            raise IdentityUnavailable(
                f"the Git host {self.host} cannot be asked {what} right now ({e.reason.replace('_', ' ')}); "
                f"try again in {retry} s",
                retry_after=retry,
            ) from None

    def _late(self, what: str, waited: float, cap: float = ASK_SECONDS) -> IdentityUnavailable:
        """The 503 of a request whose budget ran out while this host was asked `what` (kept for the retry)."""
        return deadline.late(f"the Git host {self.host}", what, waited, cap)

    async def username(self, token: str, key: bytes) -> str | None:
        """The host's username for `token` (asked once per recheck_seconds), or None when the host refuses it."""

        async def ask() -> str | None:
            name = await self._asked("who this token belongs to", self._client(token).username())
            return safe_name(name) if isinstance(name, str) else None

        late = lambda waited: self._late("who this token belongs to", waited)  # noqa: E731 - built only if late
        return await self.who.get(key, self.forge.recheck_seconds, ask, late)

    def principal(self, name: str, token: str) -> Principal:
        """The `forge` principal of a token this host said belongs to `name`."""
        return Principal("forge", person(name, self.forge), forge=self.forge, host_token=token)

    async def check_read(self, principal: Principal, repository: str, what: str) -> None:
        """Forbidden unless the host says the principal's token can read `repository` (`what`'s: "module a/b/c")."""
        token = principal.host_token or ""
        found = repository_path(repository)
        if found is None or found[0] not in self.hosts:
            raise Forbidden(
                f"{principal.name} may read only modules whose repository is on {self.host}; {what}'s is not"
            )
        path = found[1]
        key = (digest(token), path)

        async def ask() -> bool:
            shared = self._shared_keys(key[0], path)
            for answer, shared_key in shared.items():
                if await self._shared.access(shared_key):
                    return answer
            allowed = await self._asked(f"whether {principal.name} can read {path}", self._client(token).can_read(path))
            if shared:
                self._shared.remember_access(shared[allowed], True, self.forge.recheck_seconds)
            return allowed

        late = lambda waited: self._late(f"whether {principal.name} can read {path}", waited)  # noqa: E731
        if not await self.reads.get(key, self.forge.recheck_seconds, ask, late):
            raise Forbidden(
                f"{principal.name} cannot read {path} on {self.host}, the repository of {what}: "
                "ask for access to it there (gitreg follows the Git host's permissions)"
            )

    def _shared_keys(self, token_key: bytes, path: str) -> dict[bool, str]:
        """The Redis keys that say "yes" and "no" for (token, path) in this recheck window ({}: nothing
        shared without `[auth] signing_key`).

        Each is an HMAC (a key derived from the signing key) of the token's digest, the path, the
        answer and the window: the answer is in the key's name, which only gitreg can make, and the
        window bounds it however Redis keeps it. A Redis writer can delete an answer (the host is
        asked again), never flip one, nor make one outlive its window.
        """
        if self._access_key is None:
            return {}
        window = int(time.time() // self.forge.recheck_seconds)
        made = {}
        for answer in (True, False):
            message = b"\0".join([token_key, path.encode(), b"1" if answer else b"0", str(window).encode()])
            made[answer] = hmac.new(self._access_key, message, hashlib.sha256).hexdigest()
        return made

    async def visibility(self, principal: Principal) -> Visibility:
        """What the principal sees: the repositories the host lists for its token (once per recheck_seconds)."""
        token = principal.host_token or ""
        what = "which repositories this token sees"

        async def ask() -> frozenset[str]:
            paths: set[str] = set()
            for org in self.orgs:
                listed = await self._asked(what, self._listing(token, org), LISTING_SECONDS)
                paths.update(r.full_name.lower() for r in listed)
            if self.rules_here:
                records = await self._asked(what, self._client(token).member_repositories(), LISTING_SECONDS)
                paths.update(r.full_name.lower() for r in records)
            return frozenset(paths)

        late = lambda waited: self._late(what, waited, LISTING_SECONDS)  # noqa: E731
        paths = await self.seen.get(digest(token), self.forge.recheck_seconds, ask, late)
        return Visibility(hosts=self.hosts, paths=paths)

    async def _listing(self, token: str, org: OrgConfig) -> list[RepoRecord]:
        try:
            return await self._client(token, org).list_repositories()
        except ForgeNotFound:
            return []  # the group itself is hidden from this person
