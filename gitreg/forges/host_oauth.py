"""The Git hosts' OAuth: where the authorize page is, the code exchange, refresh, and who the token is.

GitLab (docs "OAuth 2.0 identity provider API"): `/oauth/authorize` and `/oauth/token` on the
web URL, PKCE (S256), access tokens that expire after 2 hours with a refresh token that is
replaced at each refresh; `GET /api/v4/user` answers `username`. GitHub (docs "Authorizing
OAuth apps"): `/login/oauth/authorize` and `/login/oauth/access_token`, PKCE (S256), tokens
that expire (8 hours, with a refresh token) only for GitHub Apps with expiring user tokens;
its token endpoint answers errors with HTTP 200 and an `error` field; `GET /user` answers `login`.

Only read scopes are asked for (`SCOPES`): GitLab `read_api read_user openid`; GitHub `repo`,
the one OAuth App scope that reads private repositories (a GitHub App ignores it and has the
permissions it was made with: README "Access"). Every call goes to the configured host only,
on the caller's `aiohttp.ClientSession`, with the forges' user agent, timeout and a bounded
body; no token ever reaches a log line or an error message.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp

from gitreg.config.model import ForgeAuthConfig
from gitreg.forges.base import USER_AGENT
from gitreg.forges.base import retry_after_seconds as _retry_after

# What gitreg asks each host for: reading only.
SCOPES = {"gitlab": "read_api read_user openid", "github": "repo"}
_AUTHORIZE_PATHS = {"gitlab": "/oauth/authorize", "github": "/login/oauth/authorize"}
_TOKEN_PATHS = {"gitlab": "/oauth/token", "github": "/login/oauth/access_token"}
_USER_FIELDS = {"gitlab": "username", "github": "login"}
# One call (token endpoint, /user): on a request's path (a refresh when `terraform init` comes), so
# inside Terraform's 10 s; the host's label is in the 503's message.
CALL_SECONDS = 8.0
# A token answer or a /user object is a few kilobytes.
_MAX_BODY = 256 * 1024


class OAuthError(Exception):
    """An OAuth call to the host failed: `refused` (the host said no: a bad code, a revoked grant)
    or `unreachable` (down, timed out, an answer that is not what the host sends)."""

    def __init__(self, reason: str, message: str, slow_down: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        # The host said "slow down" (429), failed (5xx) or was silent: back it off (its Retry-After, if said).
        self.slow_down = slow_down
        self.retry_after = retry_after


@dataclass(frozen=True)
class HostGrant:
    """The host's OAuth tokens for one person: the access token, and how to renew it."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    # Wall-clock time the access token expires at; None: it does not expire (a GitHub OAuth App's).
    expires_at: float | None = None


def authorize_url(forge: ForgeAuthConfig, redirect_uri: str, state: str, challenge: str) -> str:
    """The host's authorize page for gitreg's OAuth application, with PKCE (S256) and read scopes."""
    query = {
        "client_id": forge.oauth_client_id or "",
        "redirect_uri": redirect_uri,
        "response_type": "code",
        "scope": SCOPES[forge.provider],
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    return f"{forge.url}{_AUTHORIZE_PATHS[forge.provider]}?{urlencode(query)}"


async def exchange(
    session: aiohttp.ClientSession, forge: ForgeAuthConfig, code: str, verifier: str, redirect_uri: str
) -> HostGrant:
    """The host's tokens for an authorization `code` (with gitreg's PKCE `verifier`)."""
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier}
    return await _token(session, forge, form)


async def refresh(
    session: aiohttp.ClientSession, forge: ForgeAuthConfig, refresh_token: str, redirect_uri: str
) -> HostGrant:
    """New tokens for a refresh token (GitLab replaces the refresh token too); `refused` when the grant is gone."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "redirect_uri": redirect_uri}
    return await _token(session, forge, form)


async def username(session: aiohttp.ClientSession, forge: ForgeAuthConfig, access_token: str) -> str:
    """Who the host's `access_token` belongs to (`GET /user`): GitLab's `username`, GitHub's `login`."""
    headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json", "User-Agent": USER_AGENT}
    status, data = await _call(session, "GET", f"{forge.api_url}/user", headers, None, forge)
    if status in (401, 403):
        raise OAuthError("refused", f"{forge.label}: the host does not accept the OAuth token (HTTP {status})")
    name = data.get(_USER_FIELDS[forge.provider]) if status == 200 and isinstance(data, dict) else None
    if not isinstance(name, str) or not 0 < len(name) <= 255 or not name.isprintable():
        raise OAuthError("unreachable", f"{forge.label}: GET /user answered HTTP {status} without a username")
    return name


async def _token(session: aiohttp.ClientSession, forge: ForgeAuthConfig, form: dict[str, str]) -> HostGrant:
    """POST the token endpoint with the application's credentials; the tokens, or OAuthError."""
    body = {**form, "client_id": forge.oauth_client_id or "", "client_secret": forge.oauth_client_secret or ""}
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    url = f"{forge.url}{_TOKEN_PATHS[forge.provider]}"
    status, data = await _call(session, "POST", url, headers, body, forge)
    if not isinstance(data, dict):
        raise OAuthError("unreachable", f"{forge.label}: the token endpoint answered HTTP {status}, not JSON")
    error = data.get("error")
    if status in (400, 401) or (status == 200 and error):
        # OAuth's own error code only (e.g. invalid_grant, bad_verification_code): never a description
        # that could echo what we sent.
        code = error if isinstance(error, str) and error.isidentifier() and len(error) < 64 else "refused"
        raise OAuthError("refused", f"{forge.label}: the host refused the grant ({code})")
    access = data.get("access_token")
    if status != 200 or not isinstance(access, str) or not access:
        raise OAuthError("unreachable", f"{forge.label}: the token endpoint answered HTTP {status} without a token")
    refresh_token = data.get("refresh_token")
    expires_in = data.get("expires_in")
    expires_at = None
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and 0 < expires_in < 10**9:
        expires_at = time.time() + float(expires_in)
    return HostGrant(
        access_token=access,
        refresh_token=refresh_token if isinstance(refresh_token, str) and refresh_token else None,
        expires_at=expires_at,
    )


async def _call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: dict[str, str],
    form: dict[str, str] | None,
    forge: ForgeAuthConfig,
) -> tuple[int, Any]:
    """(status, parsed JSON or None) of one call to the host; OAuthError when it cannot be had (with
    `slow_down` for a 429, a 5xx, a timeout or no connection)."""
    try:
        async with session.request(
            method,
            url,
            headers=headers,
            data=form,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=CALL_SECONDS),
        ) as resp:
            body = await resp.content.read(_MAX_BODY + 1)
            status = resp.status
            retry_after = _retry_after(resp.headers.get("Retry-After"))
    except TimeoutError:
        raise OAuthError("unreachable", f"{forge.label}: no answer within {CALL_SECONDS:g} s", slow_down=True) from None
    except aiohttp.ClientError as e:
        message = f"{forge.label}: cannot reach the host: {type(e).__name__}"
        raise OAuthError("unreachable", message, slow_down=True) from None
    if status == 429 or status >= 500:  # "slow down", or failing: never an answer to read
        message = f"{forge.label}: the host answered HTTP {status}"
        raise OAuthError("unreachable", message, slow_down=True, retry_after=retry_after)
    if len(body) > _MAX_BODY:
        raise OAuthError("unreachable", f"{forge.label}: the host's answer is larger than {_MAX_BODY} bytes")
    try:
        return status, json.loads(body) if body else None
    except (ValueError, RecursionError):
        return status, None
