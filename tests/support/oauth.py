"""A fake Git host's OAuth: GitLab's or GitHub's authorize page, token endpoint and `/user`.

Shaped as the providers document them:
- GitLab ("OAuth 2.0 identity provider API"): `GET /oauth/authorize` (client_id, redirect_uri,
  response_type=code, state, scope, code_challenge, code_challenge_method=S256),
  `POST /oauth/token` (authorization_code with code_verifier, or refresh_token; the answer
  `{"access_token", "token_type": "Bearer", "expires_in": 7200, "refresh_token", "scope",
  "created_at"}`; a refresh replaces the refresh token; errors 400 `{"error": "invalid_grant",
  "error_description"}`), `GET /api/v4/user` (`{"id", "username", ...}`, 401 otherwise).
- GitHub ("Authorizing OAuth apps"): `GET /login/oauth/authorize`, `POST /login/oauth/access_token`
  (`Accept: application/json`: `{"access_token", "token_type": "bearer", "scope"}`, plus
  `expires_in`/`refresh_token` for expiring user tokens; errors come back with HTTP 200 and
  `{"error": "bad_verification_code", ...}`), `GET /user` (`{"login", "id", ...}`).

The consent page approves as `approver` (the test sets who). It serves `/user` for its own
OAuth tokens itself (tests/support/forges.py's FakeForge has no user table; the per-user
visibility there is the core's). Runs in a thread of its own, for a gitreg subprocess.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import html
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

CLIENT_ID = "gitreg-test-app"
CLIENT_SECRET = "gitreg-test-app-secret-7f3e"


@dataclass
class Grant:
    """One person's authorization of the application: its tokens, revocable as a whole."""

    username: str
    access: str
    refresh: str | None
    expires_at: float | None
    revoked: bool = False


@dataclass
class _Code:
    username: str
    redirect_uri: str
    challenge: str
    used: bool = False


@dataclass
class FakeOAuthHost:
    """GitLab (`provider="gitlab"`) or GitHub OAuth, with `users` who may approve."""

    provider: str
    users: dict[str, int] = field(default_factory=lambda: {"alice": 11, "bob": 12})
    approver: str = "alice"
    # GitLab's access tokens live 2 hours; a test shortens it to see refreshes.
    token_seconds: float = 7200.0
    # GitHub: expiring user tokens (a GitHub App's) or not (an OAuth App's).
    github_expiring: bool = False
    # The host name in its URLs: "localhost" puts it on another site than a gitreg on 127.0.0.1
    # (SameSite compares sites: scheme and host, not ports).
    host: str = "127.0.0.1"
    base_url: str = ""
    refreshes: int = 0
    down: bool = False  # every request answers 503, as a host in maintenance does
    exchanges: int = 0
    grants: list[Grant] = field(default_factory=list)
    _codes: dict[str, _Code] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- what a gitreg config needs ------------------------------------------------------

    @property
    def api_url(self) -> str:
        """The `api_url` of an `[[auth.forges]]` entry for this host."""
        return f"{self.base_url}/api/v4" if self.provider == "gitlab" else self.base_url

    def forge_toml(self, **extra: Any) -> str:
        """An `[[auth.forges]]` table for this host, with the test application's credentials."""
        lines = [
            "[[auth.forges]]",
            f'provider = "{self.provider}"',
            f'url = "{self.base_url}"',
            f'api_url = "{self.api_url}"',
            f'oauth_client_id = "{CLIENT_ID}"',
            f'oauth_client_secret = "{CLIENT_SECRET}"',
            *(f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in extra.items()),
        ]
        return "\n".join(lines) + "\n"

    @property
    def authorize_path(self) -> str:
        return "/oauth/authorize" if self.provider == "gitlab" else "/login/oauth/authorize"

    def revoke(self, username: str) -> None:
        """The person revokes the application on the host: every token of theirs stops working."""
        with self._lock:
            for grant in self.grants:
                if grant.username == username:
                    grant.revoked = True

    def expire_access_tokens(self) -> None:
        """Every access token expires now (as GitLab's do after 2 hours)."""
        with self._lock:
            for grant in self.grants:
                grant.expires_at = time.time() - 1

    # ---- the endpoints -------------------------------------------------------------------

    def _oauth_error(self, error: str, description: str, status: int = 400) -> web.Response:
        body = {"error": error, "error_description": description}
        if self.provider == "github":  # GitHub answers errors with 200
            return web.json_response({**body, "error_uri": "https://docs.github.com/apps"}, status=200)
        return web.json_response(body, status=status)

    async def _authorize_page(self, request: web.Request) -> web.Response:
        q = request.query
        if q.get("client_id") != CLIENT_ID:
            return web.Response(status=400, text="unknown client_id")
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256":
            return web.Response(status=400, text="response_type=code and S256 PKCE required")
        fields = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in q.items()
        )
        who, scopes = html.escape(self.approver), html.escape(q.get("scope", ""))
        page = (
            "<!doctype html><html lang=en><title>Authorize</title><body>"
            f"<p>Authorize gitreg to read as {who}? Scopes: {scopes}</p>"
            f'<form method="post" action="{self.authorize_path}">{fields}'
            '<button id="approve" type="submit">Authorize</button></form></body></html>'
        )
        return web.Response(text=page, content_type="text/html")

    async def _approve(self, request: web.Request) -> web.Response:
        form = await request.post()
        code = secrets.token_hex(16)
        redirect_uri = str(form["redirect_uri"])
        with self._lock:
            self._codes[code] = _Code(self.approver, redirect_uri, str(form["code_challenge"]))
        target = f"{redirect_uri}?{urlencode({'code': code, 'state': str(form['state'])})}"
        raise web.HTTPFound(target)

    def _new_grant(self, username: str) -> Grant:
        expiring = self.provider == "gitlab" or self.github_expiring
        grant = Grant(
            username=username,
            access=("glpat-oauth-" if self.provider == "gitlab" else "ghu_") + secrets.token_hex(16),
            refresh=secrets.token_hex(24) if expiring else None,
            expires_at=time.time() + self.token_seconds if expiring else None,
        )
        self.grants.append(grant)
        return grant

    def _token_body(self, grant: Grant) -> dict[str, Any]:
        body: dict[str, Any] = {"access_token": grant.access, "scope": "read_api read_user openid"}
        if self.provider == "gitlab":
            body.update(token_type="Bearer", created_at=int(time.time()))
        else:
            body.update(token_type="bearer", scope="repo")
        if grant.refresh is not None:
            body.update(refresh_token=grant.refresh, expires_in=int(self.token_seconds))
        return body

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return self._oauth_error("invalid_client", "Client authentication failed", 401)
        with self._lock:
            if form.get("grant_type") == "refresh_token":
                return self._refresh(str(form.get("refresh_token", "")))
            code = self._codes.get(str(form.get("code", "")))
            if code is None or code.used or code.redirect_uri != form.get("redirect_uri"):
                return self._oauth_error("invalid_grant", "The provided authorization grant is invalid")
            verifier = str(form.get("code_verifier", ""))
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if challenge != code.challenge:
                return self._oauth_error("invalid_grant", "The code verifier does not match")
            code.used = True
            self.exchanges += 1
            return web.json_response(self._token_body(self._new_grant(code.username)))

    def _refresh(self, refresh_token: str) -> web.Response:
        self.refreshes += 1
        for grant in self.grants:
            if grant.refresh == refresh_token and not grant.revoked:
                grant.revoked = True  # the old tokens are replaced
                return web.json_response(self._token_body(self._new_grant(grant.username)))
        return self._oauth_error("invalid_grant", "The refresh token is invalid, expired or revoked")

    async def _user(self, request: web.Request) -> web.Response:
        presented = request.headers.get("Authorization", "").removeprefix("Bearer ")
        with self._lock:
            grant = next((g for g in self.grants if g.access == presented), None)
            live = (
                grant is not None and not grant.revoked and (grant.expires_at is None or grant.expires_at > time.time())
            )
        if grant is None or not live:
            message = {"message": "401 Unauthorized"} if self.provider == "gitlab" else {"message": "Bad credentials"}
            return web.json_response(message, status=401)
        if self.provider == "gitlab":
            return web.json_response({"id": self.users[grant.username], "username": grant.username, "state": "active"})
        return web.json_response({"login": grant.username, "id": self.users[grant.username], "type": "User"})

    @web.middleware
    async def _maintenance(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.down:
            return web.Response(status=503, text="<html><body>503 Service Unavailable</body></html>")
        response: web.StreamResponse = await handler(request)
        return response

    def app(self) -> web.Application:
        """The aiohttp application: the host's OAuth pages and `/user`."""
        app = web.Application(middlewares=[self._maintenance])
        app.router.add_get(self.authorize_path, self._authorize_page)
        app.router.add_post(self.authorize_path, self._approve)
        app.router.add_post("/oauth/token" if self.provider == "gitlab" else "/login/oauth/access_token", self._token)
        app.router.add_get("/api/v4/user" if self.provider == "gitlab" else "/user", self._user)
        return app

    @contextmanager
    def in_thread(self) -> Iterator[FakeOAuthHost]:
        """Serve on 127.0.0.1 from a thread with its own event loop; stopped on leaving."""
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(self.app(), access_log=None)
        started = threading.Event()

        async def start() -> None:
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            self.base_url = f"http://{self.host}:{runner.addresses[0][1]}"

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(start())
            started.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert started.wait(10), "the fake OAuth host did not start"
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
