"""`terraform login` (login.v1) and "Sign in with ..." against a fake Git host's OAuth, in process.

The real Terraform CLI, Redis replicas and Chromium drive the same flow in tests/e2e/test_login_e2e.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
import redis.asyncio as redis_async

from gitreg.identity.issued import FILE_NAME
from gitreg.observability.logs import AccessEntry, access_line
from gitreg.web.keys import IDENTITY
from tests.support.app import assert_error, make_config, served_app
from tests.support.oauth import (
    CLIENT_ID,
    CLIENT_SECRET,
    FakeOAuthHost,
    consent,
    git_host,
    login,
    path_of,
    pkce,
    redeem_form,
    terraform_code,
    terraform_params,
)
from tests.support.process import GitregProcess, run_gitreg
from tests.support.storage import fill, small_disk

STATIC = "static-token-for-automation-0123456789"
SIGNING_KEY = "k" * 40


@pytest.fixture
def gitlab(tmp_path: Path) -> Iterator[FakeOAuthHost]:
    """A GitLab: its OAuth, its API and the repositories of modules demo/hello/null (alice reads it) and
    demo/secret/null (only bob does)."""
    with git_host("gitlab", tmp_path / "gitlab") as fake:
        yield fake


def forge_table(fake: FakeOAuthHost, **extra: Any) -> dict[str, Any]:
    return {
        "provider": fake.provider,
        "url": fake.base_url,
        "api_url": fake.api_url,
        "oauth_client_id": CLIENT_ID,
        "oauth_client_secret": CLIENT_SECRET,
        **extra,
    }


# These tests read no list, search or details (the pages they ask say who is signed in): what
# `gitreg serve` builds with the index off.
NO_INDEX = {"enabled": False}


def login_config(tmp_path: Path, *fakes: FakeOAuthHost) -> Any:
    """The first host's repositories as modules, every host's OAuth for `terraform login`."""
    return make_config(
        fakes[0].rules(),
        storage={"path": str(tmp_path / "state")},
        auth={"tokens": [STATIC], "signing_key": SIGNING_KEY, "forges": [forge_table(f) for f in fakes]},
        index=NO_INDEX,
    )


async def assert_oauth_error(resp: Any, status: int, error: str, *fragments: str) -> None:
    """The one error shape, with OAuth's `error` beside `errors`."""
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert set(body) == {"errors", "error"} and body["error"] == error, body
    assert isinstance(body["errors"], list) and all(isinstance(e, str) and e for e in body["errors"])
    for fragment in fragments:
        assert fragment in body["errors"][0], body


def issued_file(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "state" / FILE_NAME
    return json.loads(path.read_text())["tokens"] if path.exists() else []


async def test_discovery_advertises_login_v1_only_with_an_oauth_forge(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    doc = await (await client.get("/.well-known/terraform.json")).json()
    assert doc["login.v1"] == {
        "client": "terraform-cli",
        "grant_types": ["authz_code"],
        "authz": "/oauth/authorize",
        "token": "/oauth/token",
        "ports": [10000, 10010],
    }
    other = {"path": str(tmp_path / "other")}
    plain = await serve_client(make_config([], auth={"tokens": [STATIC]}, storage=other, index=NO_INDEX))
    assert "login.v1" not in await (await plain.get("/.well-known/terraform.json")).json()


async def test_terraform_login_issues_a_registry_token_for_the_host_identity(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    verifier, challenge = pkce()
    resp = await client.get("/oauth/authorize", params=terraform_params(challenge), allow_redirects=False)
    host = urlsplit(resp.headers["Location"])
    sent = {k: v[0] for k, v in parse_qs(host.query).items()}
    # gitreg's own callback, state and PKCE toward the host; read scopes only
    assert host.path == "/oauth/authorize" and sent["scope"] == "read_api read_user openid"
    assert sent["redirect_uri"] == f"http://{client.server.host}:{client.server.port}/oauth/callback"
    assert sent["code_challenge"] != challenge and sent["code_challenge_method"] == "S256"
    assert "f3a1c2d4" not in sent["state"] and verifier not in resp.headers["Location"]
    back = await client.get(path_of(await consent(resp.headers["Location"])), allow_redirects=False)
    local = urlsplit(back.headers["Location"])
    assert (local.scheme, local.netloc, local.path) == ("http", "localhost:10005", "/login")
    answer = parse_qs(local.query)
    assert answer["state"] == ["f3a1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d"]
    resp = await client.post("/oauth/token", data=redeem_form(answer["code"][0], verifier))
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["token_type"] == "bearer" and body["expires_in"] == 30 * 86400
    token = body["access_token"]
    assert token.startswith("gitreg_") and len(token) >= 7 + 43
    assert "no-store" in resp.headers["Cache-Control"]
    # The token opens what alice can read on the host, and nothing else (which static tokens otherwise guard).
    versions = await client.get("/v1/modules/demo/hello/null/versions", headers={"Authorization": f"Bearer {token}"})
    assert versions.status == 200
    refused = await client.get("/v1/modules/demo/secret/null/versions", headers={"Authorization": f"Bearer {token}"})
    await assert_error(refused, 403, "alice@127.0.0.1 cannot read acme/secret on 127.0.0.1", "ask for access to it")
    # Only a digest is kept, and the host's tokens are not on disk in clear.
    (record,) = issued_file(tmp_path)
    text = (tmp_path / "state" / FILE_NAME).read_text()
    assert record["username"] == "alice" and record["kind"] == "terraform"
    assert token not in text and record["digest"] == hashlib.sha256(token.encode()).hexdigest()
    assert gitlab.grants[0].access not in text and str(gitlab.grants[0].refresh) not in text


async def test_a_used_code_a_wrong_verifier_or_another_redirect_issue_nothing(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    verifier, challenge = pkce()
    code = parse_qs(urlsplit(await terraform_code(client, terraform_params(challenge))).query)["code"][0]
    resp = await client.post("/oauth/token", data=redeem_form(code, secrets.token_urlsafe(40)))
    await assert_oauth_error(resp, 400, "invalid_grant", "code_verifier does not match")
    resp = await client.post("/oauth/token", data=redeem_form(code, verifier, port=10006))
    await assert_oauth_error(resp, 400, "invalid_grant", "redirect_uri")
    resp = await client.post("/oauth/token", data={**redeem_form(code, verifier), "client_id": "other"})
    await assert_oauth_error(resp, 401, "invalid_client")
    assert issued_file(tmp_path) == []
    assert (await client.post("/oauth/token", data=redeem_form(code, verifier))).status == 200
    replay = await client.post("/oauth/token", data=redeem_form(code, verifier))
    await assert_oauth_error(replay, 400, "invalid_grant", "already used")
    assert len(issued_file(tmp_path)) == 1
    forged = await client.post("/oauth/token", data=redeem_form(code[:-4] + "AAAA", verifier))
    await assert_oauth_error(forged, 400, "invalid_grant")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"redirect_uri": "http://evil.example:10005/login"}, "redirect_uri"),
        ({"redirect_uri": "http://127.0.0.1:10005/login"}, "redirect_uri"),
        ({"redirect_uri": "http://localhost:9999/login"}, "redirect_uri"),
        ({"redirect_uri": "http://localhost:10011/login"}, "redirect_uri"),
        ({"redirect_uri": "https://localhost:10005/login"}, "redirect_uri"),
        ({"redirect_uri": "http://localhost:10005/login@evil.example"}, "redirect_uri"),
        ({"redirect_uri": "http://user@localhost:10005/login"}, "redirect_uri"),
        ({"code_challenge_method": "plain"}, "S256"),
        ({"client_id": "someone-else"}, "client_id"),
        ({"state": ""}, "state"),
        ({"response_type": "token"}, "response_type"),
    ],
)
async def test_authorize_refuses_what_terraform_would_never_send(serve_client, tmp_path, gitlab, change, fragment):
    client = await serve_client(login_config(tmp_path, gitlab))
    _, challenge = pkce()
    resp = await client.get("/oauth/authorize", params=terraform_params(challenge, **change), allow_redirects=False)
    assert resp.status == 400
    body = await resp.json()
    assert fragment in body["errors"][0] and body["error"]


async def test_a_state_gitreg_did_not_make_is_refused_at_the_callback(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    _, challenge = pkce()
    resp = await client.get("/oauth/authorize", params=terraform_params(challenge), allow_redirects=False)
    back = urlsplit(await consent(resp.headers["Location"]))
    query = {k: v[0] for k, v in parse_qs(back.query).items()}
    tampered = await client.get("/oauth/callback", params={**query, "state": query["state"][:-3] + "xyz"})
    await assert_oauth_error(tampered, 400, "invalid_request", "state")
    made_up = await client.get("/oauth/callback", params={**query, "state": "anything"})
    await assert_oauth_error(made_up, 400, "invalid_request", "state")
    assert gitlab.exchanges == 0  # the host's code was never even exchanged


@pytest.mark.slow  # over a second (tests/ --durations)
async def test_revoked_and_expired_tokens_are_refused_with_401(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    token = await login(client)
    headers = {"Authorization": f"Bearer {token}"}
    assert (await client.get("/v1/modules/demo/hello/null/versions", headers=headers)).status == 200
    # gitreg tokens revoke, as a real process on the same storage: the server sees it within a second
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "state"}"\n[git]\nprotocols = ["http"]\n'
        f'[auth]\nsigning_key = "{SIGNING_KEY}"\n' + gitlab.forge_toml() + gitlab.modules_toml()
    )
    listed = run_gitreg("tokens", "list", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    assert "alice" in listed.stdout and f"gitlab:{gitlab.base_url.split('://')[1]}" in listed.stdout
    assert token not in listed.stdout + listed.stderr
    revoked = run_gitreg("tokens", "revoke", "alice", "--config", str(config))
    assert revoked.returncode == 0 and "revoked" in revoked.stdout, revoked.stderr
    again = run_gitreg("tokens", "revoke", "alice", "--config", str(config))
    assert again.returncode == 1 and "no active token" in again.stderr
    deadline = time.monotonic() + 3
    status = 200
    while time.monotonic() < deadline and status == 200:
        status = (await client.get("/v1/modules/demo/hello/null/versions", headers=headers)).status
    assert status == 401
    # an expired token: its record says so
    token2 = await login(client)
    flows = client.app[IDENTITY].logins
    assert flows is not None
    store = flows.tokens
    for record in store.records():
        if record.revoked is None:  # its token_days are over
            await store._save(dataclasses.replace(record, expires=time.time() - 1, updated=time.time()))
    resp = await client.get("/v1/modules/demo/hello/null/versions", headers={"Authorization": f"Bearer {token2}"})
    assert resp.status == 401


@pytest.mark.slow  # waits out the host's token lifetimes (seconds)
async def test_the_host_token_is_refreshed_and_a_refused_refresh_ends_the_token(aiohttp_client, tmp_path, gitlab):
    # Host tokens that live 61.5 s: gitreg refreshes one a minute before it expires, so 1.5 s after its issue.
    gitlab.token_seconds = 61.5
    clock = Clock()  # what the host's back-off is measured with
    client = await aiohttp_client(served_app(login_config(tmp_path, gitlab), clock=clock))
    token = await login(client)
    headers = {"Authorization": f"Bearer {token}"}
    assert (await client.get("/v1/modules/demo/hello/null/versions", headers=headers)).status == 200
    assert gitlab.refreshes == 0
    await asyncio.sleep(1.6)
    assert (await client.get("/v1/modules/demo/hello/null/versions", headers=headers)).status == 200
    assert gitlab.refreshes == 1 and len(gitlab.grants) == 2
    assert gitlab.grants[1].access not in (tmp_path / "state" / FILE_NAME).read_text()
    await asyncio.sleep(1.6)  # the new host token is due in turn, and the host is down: 503, never a 401
    gitlab.down = True
    resp = await client.get("/v1/modules/demo/hello/null/versions", headers=headers)
    assert resp.status == 503 and resp.headers["Retry-After"] == "10"  # the host backed off 10 s
    assert gitlab.base_url.split("://")[1] in (await resp.json())["errors"][0]  # names the host
    gitlab.down = False
    clock.now += 11
    gitlab.revoke("alice")  # the person revokes gitreg's application on the host
    assert (await client.get("/v1/modules/demo/hello/null/versions", headers=headers)).status == 401
    assert gitlab.refreshes == 2
    (record,) = issued_file(tmp_path)
    assert record["revoked"] is not None


async def test_several_oauth_hosts_let_the_person_pick_one(serve_client, tmp_path, gitlab):
    with git_host("github", tmp_path / "github") as github:
        client = await serve_client(login_config(tmp_path, gitlab, github))
        _, challenge = pkce()
        resp = await client.get("/oauth/authorize", params=terraform_params(challenge), allow_redirects=False)
        page = await resp.text()
        assert resp.status == 200 and "Sign in with GitLab" in page and "Sign in with GitHub" in page
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
        params = terraform_params(challenge, forge=github.base_url)
        resp = await client.get("/oauth/authorize", params=params, allow_redirects=False)
        host = urlsplit(resp.headers["Location"])
        assert host.netloc == urlsplit(github.base_url).netloc and host.path == "/login/oauth/authorize"
        assert parse_qs(host.query)["scope"] == ["repo"]


async def test_sign_in_with_gitlab_on_the_pages_then_sign_out(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    page = await (await client.get("/login")).text()
    assert "Sign in with GitLab" in page and 'name="token"' in page  # the token form stays
    resp = await client.get("/login/with/0", params={"next": "/?q=hello"}, allow_redirects=False)
    assert resp.status == 302
    nonce = resp.cookies["gitreg_signin"]
    assert nonce["samesite"] == "Lax" and nonce["httponly"] and nonce["path"] == "/oauth/callback"
    back = await consent(resp.headers["Location"])
    # another browser (no nonce cookie) cannot finish this sign-in
    url = f"http://{client.server.host}:{client.server.port}{path_of(back)}"
    async with aiohttp.ClientSession() as other, other.get(url) as stolen:
        assert stolen.status == 400
    landed = await client.get(path_of(back), allow_redirects=False)
    text = await landed.text()
    assert landed.status == 200 and "Signed in as alice" in text
    assert 'http-equiv="refresh" content="0; url=/?q=hello"' in text
    cookie = landed.cookies["gitreg_session"]
    assert cookie["samesite"] == "Strict" and cookie["httponly"]
    index = await client.get("/")
    assert index.status == 200 and "Signed in as <strong>alice@127.0.0.1</strong>" in await index.text()
    out = await client.post(
        "/logout", headers={"Origin": f"http://{client.server.host}:{client.server.port}"}, allow_redirects=False
    )
    assert out.status == 302
    (record,) = issued_file(tmp_path)
    assert record["kind"] == "session" and record["revoked"] is not None  # signing out ends the session's token


async def test_the_session_cookie_names_the_session_and_opens_no_api(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    resp = await client.get("/login/with/0", params={"next": "/"}, allow_redirects=False)
    landed = await client.get(path_of(await consent(resp.headers["Location"])), allow_redirects=False)
    assert landed.status == 200, await landed.text()
    value = landed.cookies["gitreg_session"].value
    assert (await client.get("/")).status == 200  # the pages take it
    # Neither the cookie, nor what it names, nor any part of it is a bearer the API takes.
    gitlab.forge.reset_counters()
    for bearer in (value, *value.split(".")):
        versions = await client.get(
            "/v1/modules/demo/hello/null/versions", headers={"Authorization": f"Bearer {bearer}"}
        )
        assert versions.status == 401, (bearer, await versions.text())
    (record,) = issued_file(tmp_path)
    assert record["kind"] == "session" and record["digest"] in value  # the session's name, not a token


async def test_a_person_has_one_name_whatever_credential_and_host_usernames_are_made_safe(
    serve_client, tmp_path, gitlab, caplog
):
    client = await serve_client(login_config(tmp_path, gitlab))
    issued = await login(client)
    pat = "glpat-alice-own-token-0001"
    gitlab.forge.add_user("alice", pat, sees=())
    for token in (issued, pat):  # the same person, through `terraform login` and through their own token
        refused = await client.get(
            "/v1/modules/demo/secret/null/versions", headers={"Authorization": f"Bearer {token}"}
        )
        await assert_error(refused, 403, "alice@127.0.0.1 cannot read acme/secret")
    gitlab.approver = 'eve" - [x] <b>forged</b>'  # printable (the host's name check), hostile in a log line
    caplog.set_level(logging.INFO, logger="gitreg")
    await login(client)
    issued_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("issued terraform token")]
    assert issued_lines and issued_lines[-1].endswith("for eve__-__x___b_forged_/b_@127.0.0.1"), issued_lines
    assert not any("<b>" in r.getMessage() for r in caplog.records)


def test_the_access_log_masks_oauths_code_and_state():
    code, state = "host-code-5f1e9a", "sealed-state-Zx81"
    path = f"/oauth/callback?code={code}&state={state}"
    entry = AccessEntry(0.0, "1.2.3.4", "GET", path, (1, 1), 302, 0, "", "", 0.1, "-")
    for line in (access_line(entry), json.dumps(entry.fields())):
        assert code not in line and state not in line and "/oauth/callback?code=***&state=***" in line


async def test_a_state_is_used_once_so_made_up_codes_cost_one_exchange(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    _, challenge = pkce()
    resp = await client.get("/oauth/authorize", params=terraform_params(challenge), allow_redirects=False)
    state = parse_qs(urlsplit(resp.headers["Location"]).query)["state"][0]  # an anonymous visitor's state
    gitlab.forge.reset_counters()
    first = await client.get("/oauth/callback", params={"code": "made-up-0", "state": state})
    await assert_oauth_error(first, 401, "access_denied")
    for i in range(1, 30):
        again = await client.get("/oauth/callback", params={"code": f"made-up-{i}", "state": state})
        await assert_oauth_error(again, 400, "invalid_request", "state was already used")
    assert len(gitlab.forge.requests("/oauth/token")) == 1  # was one POST (with the client secret) per code


def replica_config(tmp_path: Path, fake: FakeOAuthHost, redis_url: str, name: str) -> Any:
    return make_config(
        fake.rules(),
        storage={"path": str(tmp_path / name)},
        cache={"backend": "redis", "redis_url": redis_url, "redis_prefix": "revoke-test:"},
        auth={"signing_key": SIGNING_KEY, "forges": [forge_table(fake)]},
        index=NO_INDEX,
    )


async def status_within(client: Any, token: str, wanted: int, seconds: float = 3.0) -> int:
    """The status of the token's `versions` request, asked until it is `wanted` or `seconds` passed."""
    deadline = time.monotonic() + seconds
    while True:
        resp = await client.get("/v1/modules/demo/hello/null/versions", headers={"Authorization": f"Bearer {token}"})
        if resp.status == wanted or time.monotonic() > deadline:
            return resp.status
        await asyncio.sleep(0.2)


@pytest.mark.slow  # two replicas, real Redis, `gitreg tokens revoke` as a process
async def test_a_revocation_is_final_whatever_a_replicas_clock_or_redis_holds(
    serve_client, tmp_path, gitlab, redis_server
):
    a = await serve_client(replica_config(tmp_path, gitlab, redis_server.url, "state-a"))
    b = await serve_client(replica_config(tmp_path, gitlab, redis_server.url, "state-b"))
    token = await login(a)
    assert await status_within(b, token, 200) == 200  # shared through Redis
    # Replica b, its clock an hour ahead, rewrites the record (as a refresh of the host's token does).
    store_b = b.app[IDENTITY].logins.tokens
    (record,) = store_b.records()
    await store_b._save(dataclasses.replace(record, updated=time.time() + 3600))
    redis = redis_async.from_url(redis_server.url)
    (hash_key,) = [k for k in await redis.keys("revoke-test:*") if await redis.type(k) == b"hash"]
    active = await redis.hgetall(hash_key)  # what a Redis writer keeps, to put back later
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "state-a"}"\n[git]\nprotocols = ["http"]\n'
        f'[cache]\nbackend = "redis"\nredis_url = "{redis_server.url}"\nredis_prefix = "revoke-test:"\n'
        f'[auth]\nsigning_key = "{SIGNING_KEY}"\n' + gitlab.forge_toml() + gitlab.modules_toml()
    )
    revoked = run_gitreg("tokens", "revoke", "alice", "--config", str(config))
    assert revoked.returncode == 0 and "revoked" in revoked.stdout, revoked.stderr
    for replica in (a, b):
        assert await status_within(replica, token, 401) == 401
    # Whoever can write Redis puts the active record back, and forges one: nothing takes it.
    await redis.hset(hash_key, mapping=active)
    forged = {k: v.split(b".", 1)[1] if b"." in v else v for k, v in active.items()}
    assert forged != active
    for replica in (a, b):
        assert await status_within(replica, token, 200, seconds=2.5) == 401
    await redis.hset(hash_key, mapping=forged)
    for replica in (a, b):
        assert await status_within(replica, token, 200, seconds=2.5) == 401
    again = run_gitreg("tokens", "revoke", "alice", "--config", str(config))
    assert again.returncode == 1 and "no active token" in again.stderr
    await redis.aclose()


@pytest.mark.slow  # mounts a small tmpfs
async def test_a_login_that_cannot_be_kept_on_disk_is_a_507_and_issues_nothing(serve_client, tmp_path, gitlab):
    with small_disk(tmp_path / "state", "1m") as disk:
        client = await serve_client(login_config(tmp_path, gitlab))
        assert await login(client)  # room: a token, kept
        verifier, challenge = pkce()
        back = await terraform_code(client, terraform_params(challenge))
        code = parse_qs(urlsplit(back).query)["code"][0]
        filler = fill(disk)  # full between the browser's part and Terraform's redemption
        resp = await client.post("/oauth/token", data=redeem_form(code, verifier))
        await assert_oauth_error(resp, 507, "temporarily_unavailable", "could not be", "on disk")
        _, challenge = pkce()  # a new login while it is full: refused at its first step, clearly
        resp = await client.get("/oauth/authorize", params=terraform_params(challenge), allow_redirects=False)
        resp = await client.get(path_of(await consent(resp.headers["Location"])), allow_redirects=False)
        await assert_oauth_error(resp, 507, "temporarily_unavailable", "on disk")
        store = client.app[IDENTITY].logins.tokens
        assert len([r for r in store.records() if r.active(time.time())]) == 1  # never a memory-only token
        filler.unlink()
        assert await login(client)


@pytest.mark.slow  # a real gitreg process, killed and started again
def test_a_code_is_redeemed_once_across_a_kill_and_restart(tmp_path, gitlab):
    config = tmp_path / "gitreg.toml"
    # Logins and codes only: the index off (no index process to start twice).
    config.write_text(
        f'[storage]\npath = "{tmp_path / "state"}"\n[git]\nprotocols = ["http"]\n[index]\nenabled = false\n'
        f'[auth]\nsigning_key = "{SIGNING_KEY}"\n' + gitlab.forge_toml() + gitlab.modules_toml()
    )

    async def flow(base: str) -> tuple[str, str]:
        async with aiohttp.ClientSession(base) as http:
            verifier, challenge = pkce()
            resp = await http.get("/oauth/authorize", params=terraform_params(challenge), allow_redirects=False)
            back = await consent(resp.headers["Location"])
            resp = await http.get(path_of(back), allow_redirects=False)
            code = parse_qs(urlsplit(resp.headers["Location"]).query)["code"][0]
            resp = await http.post("/oauth/token", data=redeem_form(code, verifier))
            assert resp.status == 200, await resp.text()
            return code, verifier

    async def redeem(base: str, code: str, verifier: str) -> Any:
        async with aiohttp.ClientSession(base) as http:
            resp = await http.post("/oauth/token", data=redeem_form(code, verifier))
            return resp.status, await resp.json()

    first = GitregProcess("--config", str(config)).start()
    try:
        code, verifier = asyncio.run(flow(first.url))
    finally:
        first.stop(sig=signal.SIGKILL)
    with GitregProcess("--config", str(config)) as again:  # within the code's minute
        status, body = asyncio.run(redeem(again.url, code, verifier))
    assert status == 400 and body["error"] == "invalid_grant" and "already used" in body["errors"][0], body


@pytest.mark.slow  # two replicas, real Redis stopped
async def test_with_redis_down_no_replica_redeems_a_code_it_cannot_know_unused(
    serve_client, tmp_path, gitlab, redis_server
):
    a = await serve_client(replica_config(tmp_path, gitlab, redis_server.url, "state-a"))
    b = await serve_client(replica_config(tmp_path, gitlab, redis_server.url, "state-b"))
    verifier, challenge = pkce()
    code = parse_qs(urlsplit(await terraform_code(a, terraform_params(challenge))).query)["code"][0]
    redis_server.stop()
    for replica in (b, a):  # was 200 on both: one code, two tokens
        resp = await replica.post("/oauth/token", data=redeem_form(code, verifier))
        await assert_oauth_error(resp, 503, "temporarily_unavailable", "shared store")
        assert "Retry-After" in resp.headers


@pytest.mark.slow  # two replicas, real Redis stopped and started again empty
async def test_a_revocation_made_while_redis_was_down_reaches_every_replica_when_it_returns_empty(
    serve_client, tmp_path, gitlab, redis_server
):
    a = await serve_client(replica_config(tmp_path, gitlab, redis_server.url, "state-a"))
    b = await serve_client(replica_config(tmp_path, gitlab, redis_server.url, "state-b"))
    token = await login(a)
    assert await status_within(b, token, 200) == 200
    redis_server.stop()
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "state-a"}"\n[git]\nprotocols = ["http"]\n'
        f'[cache]\nbackend = "redis"\nredis_url = "{redis_server.url}"\nredis_prefix = "revoke-test:"\n'
        f'[auth]\nsigning_key = "{SIGNING_KEY}"\n' + gitlab.forge_toml() + gitlab.modules_toml()
    )
    revoked = run_gitreg("tokens", "revoke", "alice", "--config", str(config))
    assert revoked.returncode == 0 and "revoked" in revoked.stdout, revoked.stderr
    assert await status_within(a, token, 401) == 401  # its own file
    redis_server.start()  # back, empty
    assert await status_within(b, token, 401, seconds=20) == 401  # was still 200 after 24 s


async def test_a_host_failing_its_token_endpoint_is_backed_off_for_every_login(serve_client, tmp_path, gitlab):
    client = await serve_client(login_config(tmp_path, gitlab))
    callbacks = []
    for _ in range(3):  # three people on the host's consent page
        _, challenge = pkce()
        resp = await client.get("/oauth/authorize", params=terraform_params(challenge), allow_redirects=False)
        callbacks.append(path_of(await consent(resp.headers["Location"])))
    gitlab.forge.reset_counters()
    gitlab.down = True  # 503 for everything, the token endpoint included
    first = await client.get(callbacks[0], allow_redirects=False)
    await assert_oauth_error(first, 503, "temporarily_unavailable", "HTTP 503")
    assert 0 < int(first.headers["Retry-After"]) <= 10
    for path in callbacks[1:]:  # the host is backed off: no POST with the client secret meanwhile
        resp = await client.get(path, allow_redirects=False)
        await assert_oauth_error(resp, 503, "temporarily_unavailable", "asked gitreg to wait")
        assert 0 < int(resp.headers["Retry-After"]) <= 10
    assert len(gitlab.forge.requests("/oauth/token")) == 1
    versions = await client.get("/v1/modules/demo/hello/null/versions", headers={"Authorization": "Bearer glpat-x1"})
    await assert_error(versions, 503, "asked gitreg to wait")  # the same host's identity questions too


class Clock:
    """The app's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
