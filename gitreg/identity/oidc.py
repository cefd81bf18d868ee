"""CI jobs' OIDC ID tokens (`[[auth.oidc]]`): a JWT from a configured issuer is a registry token.

Verified by PyJWT (with cryptography), never by hand: the signature by a key of the issuer's
JWKS (found through `{issuer}/.well-known/openid-configuration`, its `jwks_uri` on the issuer's
own host), `iss` equal to the configured issuer, `aud` the configured audience, `exp` and `nbf`
(60 s leeway at most), the algorithm taken from the key (RS256 or ES256 only: never `none`,
never an HMAC keyed with a public key), `exp`, `nbf` and `iat` numbers (not numeric strings), and
every configured `claims` glob (`claim_matches`: `*` never crosses an `@`, so "acme/*@refs/heads/main"
is one ref, main, whatever the branch names hold). The keys are
cached and fetched again when a token names a `kid` they lack, at most once a minute. Every
request to the issuer goes through the forges' one API client (timeouts, size caps).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import jwt

from gitreg.config.model import ForgeAuthConfig, OidcConfig, OrgConfig
from gitreg.core.errors import IdentityUnavailable, Unauthorized
from gitreg.core.flight import InFlight
from gitreg.core.urls import GitUrl, parse
from gitreg.forges.base import ForgeClient, ForgeError, OrgStats
from gitreg.identity import deadline
from gitreg.identity.model import CiJob, Principal, host_of, safe_name

log = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "ES256")
LEEWAY_SECONDS = 60
# An unknown `kid` fetches the JWKS again at most this often (a flood of made-up kids costs nothing).
REFRESH_SECONDS = 60.0
# No CI system's ID token is anywhere near this long; a longer bearer is not looked at as a JWT.
MAX_JWT_CHARS = 16_384
# The claims that name the job's project, first found wins (GitLab CI, GitHub Actions, anything).
NAME_CLAIMS = ("project_path", "repository", "sub")
# The claims that name a repository on the issuer's Git host (GitLab CI, GitHub Actions): a clone URL.
REPOSITORY_CLAIMS = ("project_path", "repository")
# GitHub Actions on github.com signs with this issuer; on GitHub Enterprise Server the issuer is the host's own.
GITHUB_ACTIONS_HOST = "token.actions.githubusercontent.com"
# A project path a clone URL is made of: `group/sub/project`, `owner/repo` (nothing else reaches a URL).
_PROJECT_PATH_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}(?:/[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}){1,20}")
# The longest RSA key taken from a JWKS (issuers use 2048; 16,384 bits cost 12x the CPU per token).
MAX_KEY_BITS = 4096
# Discovery and JWKS together, on a request's path: inside Terraform's 10 s.
ASK_SECONDS = 8.0
# Claims that are times: numbers only (PyJWT takes a numeric string as one).
_TIME_CLAIMS = ("exp", "nbf", "iat")


def claim_matches(value: str, glob: str) -> bool:
    """`value` matches the `claims` glob `glob`, whole: `*` any run of characters but `@`, `?` one
    character but `@`, `\\x` the character x, anything else itself (no `[...]` classes).

    `@` separates a workflow from its ref (`job_workflow_ref`, `acme/x/.github/workflows/a.yml@refs/heads/main`)
    and git allows a branch named `feature@refs/heads/main`: a `*` that crossed it would let
    `acme/*@refs/heads/main` ("main only") accept another branch.
    """
    return _glob_regex(glob).fullmatch(value) is not None


@functools.lru_cache(maxsize=256)
def _glob_regex(glob: str) -> re.Pattern[str]:
    """The glob as a regex that never backtracks into a `*` (as fnmatch's: each `*` but the last takes
    the shortest run before what follows it, atomically), so a long claim costs linear time."""
    parts: list[list[str]] = [[]]  # the pieces between unescaped stars, as regex text
    escaped = False
    for char in glob:
        if escaped or char not in "\\*?":
            parts[-1].append(re.escape(char))
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "?":
            parts[-1].append("[^@]")
        else:
            parts.append([])
    pieces = ["".join(part) for part in parts]
    middle = "".join(f"(?>[^@]*?{piece})" for piece in pieces[1:-1])
    tail = f"[^@]*{pieces[-1]}" if len(pieces) > 1 else ""
    return re.compile(pieces[0] + middle + tail, re.DOTALL)


def unverified_claims(presented: str) -> dict[str, Any] | None:
    """The claims of a token that looks like a JWT (three parts, a JSON payload), unverified; else None."""
    if presented.count(".") != 2 or len(presented) > MAX_JWT_CHARS:
        return None
    try:
        claims: dict[str, Any] = jwt.decode(presented, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    return claims


class _Issuer:
    """One issuer's signing keys, fetched through its discovery document.

    Fetched at most once every REFRESH_SECONDS, whether the issuer answered or not (a down issuer
    is asked once a minute, not once per token: meanwhile its tokens are 503s). A token naming a
    `kid` not held while that minute runs schedules the one fetch at its end, so a key the issuer
    rotated in is found within a minute of the first token naming it, however many made-up kids
    came first. Each fetch (discovery, then JWKS) is given ASK_SECONDS in all, without retries.
    """

    def __init__(
        self,
        config: OidcConfig,
        session: Callable[[], aiohttp.ClientSession],
        stats: OrgStats,
        clock: Callable[[], float],
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.config = config
        self._clock = clock
        self._refresh = refresh_seconds
        self._session = session
        self._stats = stats
        found = parse(config.issuer)
        self.host = found.host if found is not None else ""
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._failed: str | None = None  # why the last fetch failed (None: it did not)
        self._flight: InFlight[str, dict[str, jwt.PyJWK]] = InFlight()
        self._scheduled: asyncio.TimerHandle | None = None

    def _client(self) -> ForgeClient:
        org = OrgConfig(provider="gitlab", api_url=self.config.issuer, group=self.host, namespace="-")
        client = ForgeClient(org, self._session(), self._stats)
        client.retry_delays = ()  # one try: the fetch's own budget (ASK_SECONDS) is the request's
        client.rate_wait_budget = 0.0  # an issuer saying "slow down" is a 503 now, not a wait
        return client

    async def key(self, kid: str) -> jwt.PyJWK | None:
        """The issuer's key `kid`, fetching the JWKS when it is unknown (at most once a minute; one fetch
        for every request that waits for it); IdentityUnavailable while the issuer cannot give any key."""
        found = self._keys.get(kid)
        if found is not None:
            return found
        running = self._flight.get("jwks")
        if running is None:
            now = self._clock()
            if self._fetched_at is not None and now - self._fetched_at < self._refresh:
                self._schedule(self._fetched_at + self._refresh - now)
                self._unavailable(self._fetched_at + self._refresh - now)
                return None
            running = self._start()
        with contextlib.suppress(ForgeError):  # (kept in _failed by _fetched)
            await deadline.wait(running, self._late)
        self._unavailable(self._refresh)
        return self._keys.get(kid)

    def _late(self, waited: float) -> IdentityUnavailable:
        """The 503 of a request whose budget ran out while the keys were fetched (kept for the retry)."""
        return deadline.late(f"the CI issuer {self.host}", "with its signing keys", waited, ASK_SECONDS)

    def _unavailable(self, wait: float) -> None:
        """IdentityUnavailable (503, naming the issuer) when no key is held because the last fetch failed."""
        if self._keys or self._failed is None:
            return
        retry = max(1, int(wait) + 1)
        raise IdentityUnavailable(
            f"the CI issuer {self.host} cannot be asked for its signing keys right now "
            f"({self._failed.replace('_', ' ')}); try again in {retry} s",
            retry_after=retry,
        )

    def _start(self) -> asyncio.Future[dict[str, jwt.PyJWK]]:
        self._fetched_at = self._clock()
        return self._flight.start("jwks", self._fetched())

    def _schedule(self, delay: float) -> None:
        """The one fetch at the end of this minute (a rotated key named by a token now is found then)."""
        if self._scheduled is None:
            self._scheduled = asyncio.get_running_loop().call_later(max(0.0, delay), self._on_time)

    def _on_time(self) -> None:
        self._scheduled = None
        if self._flight.get("jwks") is None:
            self._start().add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _fetched(self) -> dict[str, jwt.PyJWK]:
        try:
            async with asyncio.timeout(ASK_SECONDS):
                self._keys = await self._fetch()
        except TimeoutError:
            self._failed = f"no answer within {ASK_SECONDS:g} s"
            log.warning("oidc issuer %s: cannot read its keys: %s", self.host, self._failed)
            raise ForgeError("timeout", self._failed) from None
        except ForgeError as e:
            self._failed = e.reason
            log.warning("oidc issuer %s: cannot read its keys: %s", self.host, e.reason)
            raise
        self._failed = None
        return self._keys

    def close(self) -> None:
        """Cancel the scheduled fetch (the process is stopping)."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None

    async def _fetch(self) -> dict[str, jwt.PyJWK]:
        client = self._client()
        discovery, _ = await client.get_json(f"{self.config.issuer.rstrip('/')}/.well-known/openid-configuration")
        jwks_uri = discovery.get("jwks_uri") if isinstance(discovery, dict) else None
        target = parse(jwks_uri) if isinstance(jwks_uri, str) else None
        issuer = parse(self.config.issuer)
        if target is None or issuer is None or _origin(target) != _origin(issuer):
            raise ForgeError("bad_json", f"oidc:{self.host}: jwks_uri is not on the issuer's own host and port")
        if target.user is not None or target.password is not None:
            raise ForgeError("bad_json", f"oidc:{self.host}: jwks_uri carries user info")
        document, _ = await client.get_json(str(jwks_uri))
        return _signing_keys(document, self.host)


def _origin(url: GitUrl) -> tuple[str, str, int]:
    """(scheme, host, port), the port spelled out: where a JWKS may be fetched from."""
    return url.scheme, url.host, url.port or {"http": 80, "https": 443}.get(url.scheme, 0)


def _signing_keys(document: Any, host: str) -> dict[str, jwt.PyJWK]:
    """kid -> key of every RS256/ES256 signing key of a JWKS document (others skipped)."""
    keys: dict[str, jwt.PyJWK] = {}
    items = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise ForgeError("bad_json", f"oidc:{host}: the JWKS has no keys list")
    for item in items[:100]:
        if not isinstance(item, dict) or item.get("use", "sig") != "sig" or not isinstance(item.get("kid"), str):
            continue
        if item.get("kty") not in ("RSA", "EC"):
            continue  # never a symmetric ("oct") key: a JWKS is public
        try:
            key = jwt.PyJWK(item)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        if key.algorithm_name in ALGORITHMS and getattr(key.key, "key_size", 0) <= MAX_KEY_BITS:
            keys[item["kid"]] = key  # (a larger RSA key costs each forged token's check more CPU: skipped)
    return keys


class OidcIssuers:
    """The configured issuers; verifies a presented JWT against the one its `iss` names."""

    def __init__(
        self,
        entries: tuple[OidcConfig, ...],
        session: Callable[[], aiohttp.ClientSession],
        clock: Callable[[], float] = time.monotonic,
        refresh_seconds: float = REFRESH_SECONDS,
        forges: tuple[ForgeAuthConfig, ...] = (),
    ) -> None:
        self.stats = OrgStats()  # requests to the issuers, for /metrics
        self._issuers = {e.issuer: _Issuer(e, session, self.stats, clock, refresh_seconds) for e in entries}
        self._forges = forges  # `[[auth.forges]]`: a job of an issuer on one of their hosts has a clone URL

    def close(self) -> None:
        """Cancel every issuer's scheduled key fetch."""
        for issuer in self._issuers.values():
            issuer.close()

    @property
    def configured(self) -> bool:
        """True when any `[[auth.oidc]]` issuer is configured."""
        return bool(self._issuers)

    def issuer_of(self, presented: str) -> OidcConfig | None:
        """The configured issuer a JWT claims to come from (unverified); None when it is no JWT.

        A JWT of any other issuer is a 401 here: no Git host token is a JWT, so it is never
        handed to a Git host to try.
        """
        claims = unverified_claims(presented)
        if claims is None:
            return None
        issuer = claims.get("iss")
        found = self._issuers.get(issuer) if isinstance(issuer, str) else None
        if found is None:
            raise Unauthorized("the token is a JWT whose issuer (iss) this registry does not trust")
        return found.config

    async def principal(self, presented: str, config: OidcConfig) -> Principal:
        """The `oidc` principal of a token that verifies against `config`; Unauthorized otherwise."""
        issuer = self._issuers[config.issuer]
        try:
            header = jwt.get_unverified_header(presented)
        except jwt.PyJWTError:
            raise Unauthorized("the OIDC token is not a well-formed JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            raise Unauthorized(f"the OIDC token's algorithm must be one of {', '.join(ALGORITHMS)}")
        key = await issuer.key(kid) if isinstance(kid, str) else None
        if key is None:
            raise Unauthorized(f"the OIDC token is not signed by a key of {issuer.host}")
        if key.algorithm_name != alg:
            raise Unauthorized("the OIDC token's algorithm is not its key's")
        claims = _verified_claims(presented, key, config)
        for name, glob in config.claims:
            value = claims.get(name)
            if not isinstance(value, str) or not claim_matches(value, glob):
                raise Unauthorized(f"the OIDC token's {name} claim does not match what this registry allows")
        who = next((claims[c] for c in NAME_CLAIMS if isinstance(claims.get(c), str) and claims[c]), "job")
        namespaces = frozenset(config.namespaces) if config.namespaces is not None else None
        job = CiJob(safe_name(who), job_repository(claims, issuer.host, self._forges))
        return Principal("oidc", f"oidc:{job.project}", namespaces=namespaces, job=job)


def job_repository(claims: dict[str, Any], issuer_host: str, forges: tuple[ForgeAuthConfig, ...]) -> str | None:
    """The clone URL of the repository a verified CI token names (GitLab's `project_path`, GitHub's
    `repository`) when its issuer is a configured Git host's (GitHub Actions' issuer is github.com's),
    else None: what "can this reader read it" is asked of."""
    project = next((claims[c] for c in REPOSITORY_CLAIMS if isinstance(claims.get(c), str)), None)
    if project is None or not _PROJECT_PATH_RE.fullmatch(project) or ".." in project:
        return None
    for forge in forges:
        host = host_of(forge.url)
        github_com = issuer_host == GITHUB_ACTIONS_HOST and forge.provider == "github" and host == "github.com"
        if host and (host == issuer_host or github_com):
            return f"{forge.url}/{project}.git"
    return None


def _verified_claims(presented: str, key: jwt.PyJWK, config: OidcConfig) -> dict[str, Any]:
    """The claims of a token whose signature, iss, aud, exp and nbf hold; Unauthorized naming what did not."""
    claims = _decoded(presented, key, config)
    for name in _TIME_CLAIMS:
        value = claims.get(name)
        if name in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise Unauthorized(f"the OIDC token's {name} claim must be a number (seconds since 1970)")
    return claims


def _decoded(presented: str, key: jwt.PyJWK, config: OidcConfig) -> dict[str, Any]:
    try:
        return jwt.decode(
            presented,
            key.key,
            algorithms=[key.algorithm_name],
            audience=config.audience,
            issuer=config.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "iss", "aud"], "verify_signature": True},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized("the OIDC token has expired") from None
    except jwt.ImmatureSignatureError:
        raise Unauthorized("the OIDC token is not valid yet (nbf)") from None
    except jwt.InvalidAudienceError:
        raise Unauthorized(f"the OIDC token's aud must be {config.audience!r}") from None
    except jwt.InvalidIssuerError:
        raise Unauthorized("the OIDC token's iss is not the configured issuer") from None
    except jwt.MissingRequiredClaimError as e:
        raise Unauthorized(f"the OIDC token has no {e.claim} claim") from None
    except jwt.PyJWTError:
        raise Unauthorized("the OIDC token's signature is not valid") from None
