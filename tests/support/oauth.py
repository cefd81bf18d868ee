"""A fake Git host's OAuth: GitLab's or GitHub's authorize page and token endpoint, on the host's fake API.

Shaped as the providers document them:
- GitLab ("OAuth 2.0 identity provider API"): `GET /oauth/authorize` (client_id, redirect_uri,
  response_type=code, state, scope, code_challenge, code_challenge_method=S256),
  `POST /oauth/token` (authorization_code with code_verifier, or refresh_token; the answer
  `{"access_token", "token_type": "Bearer", "expires_in": 7200, "refresh_token", "scope",
  "created_at"}`; a refresh replaces the refresh token; errors 400 `{"error": "invalid_grant",
  "error_description"}`).
- GitHub ("Authorizing OAuth apps"): `GET /login/oauth/authorize`, `POST /login/oauth/access_token`
  (`Accept: application/json`: `{"access_token", "token_type": "bearer", "scope"}`, plus
  `expires_in`/`refresh_token` for expiring user tokens; errors come back with HTTP 200 and
  `{"error": "bad_verification_code", ...}`).

One Git host, as gitreg sees it: these pages are served by the host's fake REST API
(tests/support/forges.py's FakeForge, same port), and every access token the token endpoint
issues becomes a user of that API, so `GET /user`, "can read" (`GET /projects/:path`,
`GET /repos/{owner}/{repo}`) and the listings answer for it with the person's own visibility,
which the test changes at run time (`forge.grant`, `forge.revoke`). A revoked, replaced or
expired access token is refused there (401) from then on. `git_host()` builds the whole host:
bare repositories served over smart HTTP, its API and its OAuth, in threads. The consent page
approves as `approver` (the test sets who).
"""

from __future__ import annotations

import base64
import hashlib
import html
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
from aiohttp import web

from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.repos import GitRepo

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


class FakeOAuthHost:
    """GitLab's or GitHub's OAuth (the provider of `forge`), served by `forge`, whose users its tokens become."""

    def __init__(
        self, forge: FakeForge, approver: str = "alice", token_seconds: float = 7200.0, github_expiring: bool = False
    ) -> None:
        self.forge = forge
        self.provider = forge.provider
        self.approver = approver
        # GitLab's access tokens live 2 hours; a test shortens it to see refreshes.
        self.token_seconds = token_seconds
        # GitHub: expiring user tokens (a GitHub App's) or not (an OAuth App's).
        self.github_expiring = github_expiring
        self.refreshes = 0
        self.exchanges = 0
        self.grants: list[Grant] = []
        self._codes: dict[str, _Code] = {}
        self._lock = threading.Lock()
        forge.serve_page("GET", self.authorize_path, self._authorize_page)
        forge.serve_page("POST", self.authorize_path, self._approve)
        forge.serve_page(
            "POST", "/oauth/token" if self.provider == "gitlab" else "/login/oauth/access_token", self._token
        )

    # ---- what a gitreg config needs ------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The host's web URL (the `url` of an `[[auth.forges]]` entry)."""
        return self.forge.base_url

    @property
    def api_url(self) -> str:
        """The `api_url` of an `[[auth.forges]]` entry for this host."""
        return self.forge.api_url

    @property
    def down(self) -> bool:
        """True while the whole host (pages and API) answers 503, as a host in maintenance does."""
        return self.forge.mode == "down"

    @down.setter
    def down(self, value: bool) -> None:
        self.forge.mode = "down" if value else "ok"

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

    def repository(self, name: str) -> str:
        """The clone URL of repository `name` of the group, on this host (git over smart HTTP)."""
        url = self.forge.git.url(f"{GROUP}/{name}.git")
        return url.replace("://127.0.0.1:", f"://{self.forge.host_name}:", 1)

    def rules(self, namespace: str = "demo") -> list[dict[str, str]]:
        """`[[modules]]` rules for the host's repositories: module `<namespace>/<name>/null` each."""
        return [
            {"namespace": namespace, "name": name, "system": "null", "repository": self.repository(name)}
            for name in REPOSITORIES
        ]

    def modules_toml(self, namespace: str = "demo") -> str:
        """The same rules as `[[modules]]` tables."""
        return "".join(
            "[[modules]]\n" + "".join(f'{k} = "{v}"\n' for k, v in rule.items()) for rule in self.rules(namespace)
        )

    @property
    def authorize_path(self) -> str:
        return "/oauth/authorize" if self.provider == "gitlab" else "/login/oauth/authorize"

    def revoke(self, username: str) -> None:
        """The person revokes the application on the host: every token of theirs stops working."""
        with self._lock:
            for grant in self.grants:
                if grant.username == username:
                    grant.revoked = True
                    self.forge.revoke_token(grant.access)

    def expire_access_tokens(self) -> None:
        """Every access token expires now (as GitLab's do after 2 hours): the API refuses them."""
        with self._lock:
            for grant in self.grants:
                grant.expires_at = time.time() - 1
                self.forge.revoke_token(grant.access)

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
            # GitLab's OAuth access tokens carry no prefix; GitHub's user-to-server tokens start `ghu_`.
            access=secrets.token_hex(32) if self.provider == "gitlab" else "ghu_" + secrets.token_hex(16),
            refresh=secrets.token_hex(24) if expiring else None,
            expires_at=time.time() + self.token_seconds if expiring else None,
        )
        self.grants.append(grant)
        self.forge.add_user(username, grant.access)  # the host's API answers for it, as the person
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
                self.forge.revoke_token(grant.access)
                return web.json_response(self._token_body(self._new_grant(grant.username)))
        return self._oauth_error("invalid_grant", "The refresh token is invalid, expired or revoked")


GROUP = "acme"
# The group's repositories, each a module tagged v1.0.0; who may read which (changed by `forge.grant`/`revoke`).
REPOSITORIES = ("hello", "secret")
READERS = {"alice": ("hello",), "bob": ("hello", "secret")}


@contextmanager
def git_host(provider: str, root: Path, host: str = "127.0.0.1", **options: Any) -> Iterator[FakeOAuthHost]:
    """A whole Git host in threads: REPOSITORIES (bare, under `root`) over smart HTTP, its API (group GROUP,
    READERS' visibility) and its OAuth (`options`: FakeOAuthHost's), every URL on `host`."""
    for name in REPOSITORIES:
        repo = GitRepo(root, f"{GROUP}/{name}")
        repo.commit({"main.tf": f'output "name" {{ value = "{name}" }}\n', "README.md": f"# {name}\n"})
        repo.tag("v1.0.0")
    with GitHttpServer(root) as git:
        forge = FakeForge(provider, git, GROUP)
        forge.host_name = host
        for name in REPOSITORIES:
            forge.add(name, repo=f"{GROUP}/{name}")
        for username, names in READERS.items():
            forge.grant(username, *names)
        fake = FakeOAuthHost(forge, **options)
        with forge.in_thread():
            yield fake


# ---- a login as Terraform and a browser make it, against a gitreg test client ----------------


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge): PKCE as Terraform makes it."""
    verifier = secrets.token_urlsafe(40)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def terraform_params(challenge: str, port: int = 10005, **changes: str) -> dict[str, str]:
    """What Terraform's oauth2 library puts in its authorize URL."""
    return {
        "client_id": "terraform-cli",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "redirect_uri": f"http://localhost:{port}/login",
        "response_type": "code",
        "state": "f3a1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
        **changes,
    }


async def consent(host_url: str) -> str:
    """The person approves on the fake host's consent page: where the host sends the browser."""
    async with aiohttp.ClientSession() as http:
        async with http.get(host_url) as resp:
            assert resp.status == 200, await resp.text()
        parts = urlsplit(host_url)
        form = {k: v[0] for k, v in parse_qs(parts.query).items()}
        async with http.post(f"{parts.scheme}://{parts.netloc}{parts.path}", data=form, allow_redirects=False) as resp:
            assert resp.status == 302
            return resp.headers["Location"]


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + ("?" + parts.query if parts.query else "")


async def terraform_code(client: Any, params: dict[str, str]) -> str:
    """Terraform's localhost URL at the end of the browser's part of the flow."""
    resp = await client.get("/oauth/authorize", params=params, allow_redirects=False)
    assert resp.status == 302, await resp.text()
    back = await consent(resp.headers["Location"])
    resp = await client.get(path_of(back), allow_redirects=False)
    assert resp.status == 302, await resp.text()
    return resp.headers["Location"]


def redeem_form(code: str, verifier: str, port: int = 10005) -> dict[str, str]:
    return {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "redirect_uri": f"http://localhost:{port}/login",
        "client_id": "terraform-cli",
    }


async def login(client: Any) -> str:
    """A full `terraform login` as Terraform does it: the registry token."""
    verifier, challenge = pkce()
    back = await terraform_code(client, terraform_params(challenge))
    code = parse_qs(urlsplit(back).query)["code"][0]
    resp = await client.post("/oauth/token", data=redeem_form(code, verifier))
    assert resp.status == 200, await resp.text()
    return str((await resp.json())["access_token"])
