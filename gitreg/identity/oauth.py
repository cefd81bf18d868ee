"""The login flow through the Git host: `terraform login` (login.v1) and the pages' "Sign in with ...".

Terraform is an OAuth client of gitreg (client `terraform-cli`, authorization code with PKCE
S256, a redirect to `http://localhost:<10000-10010>/login`), and gitreg is an OAuth client of
the Git host. The flow:

1. `authorize`: Terraform's request is checked (client, response type, S256 challenge, state,
   the localhost redirect and its port); gitreg sends the browser to the host's authorize page
   with its own callback, its own PKCE verifier and its own `state`. That state is sealed
   (AES-GCM, identity/crypto.py: neither readable nor forgeable in the browser) and carries
   Terraform's request, the host and gitreg's verifier, for ten minutes: no replica has to
   remember it, any replica can take the callback.
2. `callback`: the host's code is exchanged server-side (with gitreg's verifier), `/user` says
   who it is; Terraform's browser is sent to its localhost URL with a one-time code, sealed the
   same way for a minute, bound to Terraform's challenge and redirect URI.
   A state is used once (the used-states set, as the used codes): one code exchange per state.
3. `redeem` (`/oauth/token`): the code opens only with the verifier whose S256 is the challenge,
   only with the same redirect URI and client, and only once (a used-codes set, shared through
   Redis); then a registry token is issued (identity/issued.py), valid the host's `token_days`.

A page sign-in is the same flow from the host's side, with the browser bound by a short cookie
(the state carries its digest: a callback URL handed to someone else signs nobody in), ending in
a session token for the cookie instead of a code.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp

from gitreg.config.model import ForgeAuthConfig
from gitreg.core.errors import GitregError, Overloaded
from gitreg.forges import host_oauth as oauth
from gitreg.forges.host_oauth import HostGrant, OAuthError
from gitreg.identity.backoff import HostBackoff
from gitreg.identity.crypto import Sealer
from gitreg.identity.issued import IssuedTokens
from gitreg.identity.model import safe_name

CLIENT_ID = "terraform-cli"
PORTS = (10000, 10010)
# What the discovery document advertises (relative URLs: Terraform resolves them against it).
LOGIN_V1 = {
    "client": CLIENT_ID,
    "grant_types": ["authz_code"],
    "authz": "/oauth/authorize",
    "token": "/oauth/token",
    "ports": list(PORTS),
}
STATE_SECONDS = 600.0  # the person has ten minutes on the host's consent page
CODE_SECONDS = 60.0  # Terraform redeems its code at once
_CHALLENGE_RE = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url(SHA-256), no padding
_VERIFIER_RE = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 section 4.1
_STATE_MAX = 512


class LoginRefused(GitregError):
    """A login request refused: the JSON error shape, with OAuth's own `error` code beside it."""

    status = 400

    def __init__(self, error: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.error = error
        self.status = status


@dataclass(frozen=True)
class TerraformRequest:
    """Terraform's authorize request, checked."""

    redirect_uri: str
    state: str
    challenge: str


def s256(verifier: str) -> str:
    """PKCE's S256: base64url(SHA-256(verifier)) without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def check_redirect(value: str) -> str:
    """`value` when it is `http://localhost:<port>/login` with a port in PORTS, else LoginRefused."""
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = None
    ok = (
        parts.scheme == "http"
        and parts.hostname == "localhost"
        and parts.netloc == f"localhost:{port}"
        and port is not None
        and PORTS[0] <= port <= PORTS[1]
        and parts.path == "/login"
        and not parts.query
        and not parts.fragment
    )
    if not ok:
        raise LoginRefused(
            "invalid_request",
            f"redirect_uri must be http://localhost:<port>/login with a port from {PORTS[0]} to {PORTS[1]}",
        )
    return value


def check_terraform_request(query: Any) -> TerraformRequest:
    """Terraform's `/oauth/authorize` query, checked; LoginRefused naming what is wrong."""
    if query.get("client_id") != CLIENT_ID:
        raise LoginRefused("unauthorized_client", f"client_id must be {CLIENT_ID}")
    if query.get("response_type") != "code":
        raise LoginRefused("unsupported_response_type", "response_type must be code")
    if query.get("code_challenge_method") != "S256":
        raise LoginRefused("invalid_request", "code_challenge_method must be S256 (PKCE; plain is refused)")
    challenge = query.get("code_challenge", "")
    if not _CHALLENGE_RE.fullmatch(challenge):
        raise LoginRefused("invalid_request", "code_challenge must be a base64url SHA-256 (43 characters)")
    state = query.get("state", "")
    if not state or len(state) > _STATE_MAX or not state.isprintable():
        raise LoginRefused("invalid_request", "state is required (at most 512 printable characters)")
    return TerraformRequest(check_redirect(query.get("redirect_uri", "")), state, challenge)


class LoginFlows:
    """The flow's steps; `tokens` issues what it ends with, `http` talks to the hosts (the app's session)."""

    def __init__(
        self, forges: tuple[ForgeAuthConfig, ...], signing_key: str, tokens: IssuedTokens, http: aiohttp.ClientSession
    ) -> None:
        self.forges = tuple(f for f in forges if f.oauth)
        self.tokens = tokens
        self.http = http
        self._states = Sealer(signing_key, "login-state")
        # Each host's back-off, shared with identity/forge.py's questions (set by the identity door).
        self.backoffs: dict[str, HostBackoff] = {}
        self._codes = Sealer(signing_key, "login-code")

    def forge(self, url: str | None) -> ForgeAuthConfig | None:
        """The OAuth host `url` names; the only one when `url` is None and there is one."""
        if url is None:
            return self.forges[0] if len(self.forges) == 1 else None
        return next((f for f in self.forges if f.url == url), None)

    def start(self, forge: ForgeAuthConfig, callback: str, flow: dict[str, Any]) -> str:
        """The host's authorize URL for `flow` (Terraform's request, or a page sign-in)."""
        verifier = secrets.token_urlsafe(48)
        # `id`: a state is single-use (`exchange`), so one state never makes the host's token endpoint
        # be POSTed more than once, with gitreg's client secret, whatever codes are sent with it.
        sealed = {"id": secrets.token_hex(16), "forge": forge.url, "verifier": verifier, "callback": callback, **flow}
        state = self._states.seal_json(sealed, "state", STATE_SECONDS)
        return oauth.authorize_url(forge, callback, state, s256(verifier))

    def terraform_flow(self, request: TerraformRequest) -> dict[str, Any]:
        """What a `terraform login` state carries of Terraform's request."""
        return {"tf": {"redirect_uri": request.redirect_uri, "state": request.state, "challenge": request.challenge}}

    @staticmethod
    def page_flow(target: str, nonce: str) -> dict[str, Any]:
        """What a page sign-in's state carries: where to go after, and the digest of the browser's nonce cookie."""
        return {"page": {"next": target, "nonce": hashlib.sha256(nonce.encode()).hexdigest()}}

    def open_state(self, state: str) -> dict[str, Any]:
        """The flow a state gitreg made carries; LoginRefused when it is not one (or is too old)."""
        flow = self._states.open_json(state, "state")
        if flow is None:
            raise LoginRefused(
                "invalid_request", "the login's state is not one gitreg made, or is older than 10 minutes"
            )
        return flow

    async def exchange(self, flow: dict[str, Any], code: str) -> tuple[ForgeAuthConfig, str, HostGrant]:
        """(the host, the username, the host's grant) for the host's `code`; LoginRefused else."""
        forge = self.forge(flow.get("forge"))
        if forge is None or not code or len(code) > 2048:
            raise LoginRefused("invalid_request", "the host's answer has no code, or names a host not configured")
        backoff = self.backoffs.get(forge.url)
        if backoff is not None:
            backoff.check()  # (before the state is spent: the person can come back with it)
        state_id = flow.get("id")
        if not isinstance(state_id, str) or not await self.tokens.first_use(f"state:{state_id}", STATE_SECONDS * 2):
            raise LoginRefused("invalid_request", "this login's state was already used: start the login again")
        try:
            grant = await oauth.exchange(self.http, forge, code, str(flow.get("verifier")), str(flow.get("callback")))
            # Made safe here, once: it is logged, shown, stored and selected by (`gitreg tokens revoke`).
            username = safe_name(await oauth.username(self.http, forge, grant.access_token))
        except OAuthError as e:
            if e.reason == "refused":
                raise LoginRefused("access_denied", e.message, 401) from None
            retry = backoff.note(e.retry_after, "failing") if e.slow_down and backoff is not None else 30
            raise Overloaded(f"{e.message}; try again in {retry} s", retry_after=retry) from None
        return forge, username, grant

    def terraform_code(self, flow: dict[str, Any], username: str, grant: HostGrant) -> str:
        """Terraform's localhost URL with a one-time code for this login, and Terraform's own state."""
        tf = flow["tf"]
        sealed = self._codes.seal_json(
            {
                "id": secrets.token_hex(16),
                "forge": flow["forge"],
                "callback": flow["callback"],
                "user": username,
                "grant": {"access": grant.access_token, "refresh": grant.refresh_token, "expires_at": grant.expires_at},
                "challenge": tf["challenge"],
                "redirect_uri": tf["redirect_uri"],
            },
            "code",
            CODE_SECONDS,
        )
        return f"{tf['redirect_uri']}?{urlencode({'code': sealed, 'state': tf['state']})}"

    @staticmethod
    def page_nonce_matches(flow: dict[str, Any], nonce: str | None) -> bool:
        """The browser that finished the sign-in is the one that started it (its nonce cookie)."""
        page = flow.get("page")
        if not isinstance(page, dict) or not nonce:
            return False
        return hmac.compare_digest(str(page.get("nonce")), hashlib.sha256(nonce.encode()).hexdigest())

    async def redeem(self, form: Any, client_id: str | None) -> tuple[str, float]:
        """`/oauth/token`: (registry token, seconds it lives) for a valid, unused code; LoginRefused else."""
        if form.get("grant_type") != "authorization_code":
            raise LoginRefused("unsupported_grant_type", "grant_type must be authorization_code")
        if client_id != CLIENT_ID:
            raise LoginRefused("invalid_client", f"client_id must be {CLIENT_ID}", 401)
        verifier = str(form.get("code_verifier", ""))
        if not _VERIFIER_RE.fullmatch(verifier):
            raise LoginRefused("invalid_request", "code_verifier is missing or not a PKCE verifier")
        data = self._codes.open_json(str(form.get("code", "")), "code")
        if data is None:
            raise LoginRefused("invalid_grant", "the code is not one gitreg issued, or it has expired")
        if not hmac.compare_digest(s256(verifier), str(data.get("challenge"))):
            raise LoginRefused("invalid_grant", "the code_verifier does not match the code_challenge")
        if form.get("redirect_uri") != data.get("redirect_uri"):
            raise LoginRefused("invalid_grant", "redirect_uri differs from the authorization request's")
        forge = self.forge(data.get("forge"))
        if forge is None:
            raise LoginRefused("invalid_grant", "the code's host is no longer configured")
        if not await self.tokens.first_use(str(data.get("id")), CODE_SECONDS * 2):
            raise LoginRefused("invalid_grant", "the code was already used")
        g = data["grant"]
        grant = HostGrant(g["access"], g.get("refresh"), g.get("expires_at"))
        seconds = forge.token_days * 86400.0
        token = await self.tokens.issue(forge, str(data["user"]), grant, "terraform", seconds, str(data["callback"]))
        return token, seconds
