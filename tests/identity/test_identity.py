"""Access follows the Git host: a GitLab or GitHub token is a registry token for what its user can read.

The Git hosts' REST APIs are fakes shaped like their documentation (tests/support/forges.py:
`GET /user`, `GET /projects/:path`, `GET /repos/{owner}/{repo}`, group and org listings filtered
per user); everything else is real: bare repositories behind git over smart HTTP, the registry
app, its resolver and index. The clock the identities trust answers by is the app's own (CLOCK),
so "recheck_seconds later" needs no sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
import redis.asyncio

from gitreg.config.parse import parse_config
from gitreg.identity.model import Principal
from gitreg.observability.logs import AccessEntry, access_line
from gitreg.web.app import create_app
from gitreg.web.keys import IDENTITY
from tests.support.app import assert_error, indexed
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.repos import GitRepo

ADMIN = "static-admin-token-6b1f0e3a9c"
ORG_TOKEN = {"gitlab": "glpat-org-listing-token-0001", "github": "ghp_orgListingToken0001"}
ALICE = {"gitlab": "glpat-alice-3Jk9sQ2mZ7xW", "github": "ghp_alice4Vb8Nq1Lr6Yt"}
BOB = {"gitlab": "glpat-bob-8Hd2Lp5Xc1Va", "github": "github_pat_11BOB0Qz7Kp2Mv5Rt"}
NET, DNS = "terraform-aws-net", "terraform-aws-dns"


class Clock:
    """The app's clock (monotonic seconds), moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Site:
    client: Any
    forge: FakeForge
    git: GitHttpServer
    clock: Clock
    provider: str

    @property
    def alice(self) -> str:
        return ALICE[self.provider]

    @property
    def bob(self) -> str:
        return BOB[self.provider]

    async def versions(self, token: str, name: str = "net") -> Any:
        return await self.client.get(f"/v1/modules/acme/{name}/aws/versions", headers=bearer(token))

    async def listed(self, token: str, url: str = "/v1/modules") -> list[str]:
        resp = await self.client.get(url, headers=bearer(token))
        assert resp.status == 200, await resp.text()
        return [m["id"].rsplit("/", 1)[0] for m in (await resp.json())["modules"]]

    def api_calls(self, kind: str) -> int:
        marker = {"user": "/user", "read": "/projects/" if self.provider == "gitlab" else "/repos/"}[kind]
        return sum(1 for r in self.forge.requests() if r.path.endswith(marker) or (kind == "read" and marker in r.path))


def repositories(tmp_path: Path) -> Path:
    root = tmp_path / "repos"
    for name in (NET, DNS):
        repo = GitRepo(root, f"acme/{name}")
        repo.commit(
            {"main.tf": f'output "name" {{ value = "{name}" }}\n', "README.md": f"# {name}\n\nThe {name} module.\n"}
        )
        repo.tag("v1.0.0")
    return root


def config_for(forge: FakeForge, tmp_path: Path, **auth: Any) -> Any:
    return parse_config(
        {
            "git": {"protocols": ["http"], "timeout_seconds": 10},
            "storage": {"path": str(tmp_path / "state")},
            "orgs": [
                {
                    "provider": forge.provider,
                    "api_url": forge.api_url,
                    "group": "acme",
                    "namespace": "acme",
                    "token": ORG_TOKEN[forge.provider],
                }
            ],
            "auth": {
                "tokens": [ADMIN],
                "forges": [
                    {"provider": forge.provider, "url": forge.base_url, "api_url": forge.api_url, "recheck_seconds": 10}
                ],
                **auth,
            },
        }
    )


@pytest.fixture(params=["gitlab", "github"])
async def site(request, tmp_path, aiohttp_client) -> AsyncIterator[Site]:
    provider = request.param
    with GitHttpServer(repositories(tmp_path)) as git:
        forge = await FakeForge(provider, git, "acme", token=ORG_TOKEN[provider]).start()
        for name in (NET, DNS):
            forge.add(name, repo=f"acme/{name}")
        forge.add_user("alice", ALICE[provider], sees=(NET,))
        forge.add_user("bob", BOB[provider], sees=(NET, DNS))
        clock = Clock()
        client = await aiohttp_client(create_app(config_for(forge, tmp_path), clock=clock))
        assert (await client.get("/v1/modules/acme/net/aws/versions", headers=bearer(ADMIN))).status == 200
        await indexed(client)
        forge.reset_counters()
        yield Site(client, forge, git, clock, provider)
        await forge.close()


# --- who can install what ----------------------------------------------------------------------


@pytest.mark.slow
async def test_a_host_token_installs_what_its_user_can_read_and_is_refused_the_rest(site):
    resp = await site.versions(site.alice)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["modules"][0]["versions"] == [{"version": "1.0.0"}]
    resp = await site.client.get("/v1/modules/acme/net/aws/1.0.0/download", headers=bearer(site.alice))
    assert resp.status == 200 and "X-Terraform-Get" in resp.headers
    text = await assert_error(
        await site.versions(site.alice, "dns"), 403, "alice@127.0.0.1 cannot read acme/terraform-aws-dns"
    )
    assert "acme/dns/aws" in text
    # Bob sees both; a static token still opens everything.
    assert (await site.versions(site.bob, "dns")).status == 200
    assert (await site.versions(ADMIN, "dns")).status == 200


@pytest.mark.slow
async def test_a_github_app_installation_token_reads_the_repositories_it_was_given(tmp_path, aiohttp_client):
    with GitHttpServer(repositories(tmp_path)) as git:
        forge = await FakeForge("github", git, "acme", token=ORG_TOKEN["github"]).start()
        for name in (NET, DNS):
            forge.add(name, repo=f"acme/{name}")
        installation = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
        forge.add_user("acme-bot[installation]", installation, sees=(NET,))
        client = await aiohttp_client(create_app(config_for(forge, tmp_path)))
        assert (await client.get("/v1/modules/acme/net/aws/versions", headers=bearer(installation))).status == 200
        resp = await client.get("/v1/modules/acme/dns/aws/versions", headers=bearer(installation))
        await assert_error(resp, 403, "app:acme@127.0.0.1 cannot read acme/terraform-aws-dns")
        await indexed(client)
        resp = await client.get("/v1/modules", headers=bearer(installation))
        assert [m["id"] for m in (await resp.json())["modules"]] == ["acme/net/aws/1.0.0"]
        assert forge.requests("/user") == []  # an installation has no user: never asked
        await forge.close()


@pytest.mark.slow
async def test_lists_and_search_show_only_what_the_host_lets_the_user_see(site):
    assert await site.listed(ADMIN) == ["acme/dns/aws", "acme/net/aws"]
    assert await site.listed(site.alice) == ["acme/net/aws"]
    assert await site.listed(site.bob) == ["acme/dns/aws", "acme/net/aws"]
    assert await site.listed(site.alice, "/v1/modules/search?q=dns") == []
    assert await site.listed(site.alice, "/v1/modules/acme") == ["acme/net/aws"]
    assert await site.listed(site.alice, "/v1/modules/search?q=module") == ["acme/net/aws"]
    # Details of a module they cannot read: 403, as for an install.
    await assert_error(await site.client.get("/v1/modules/acme/dns/aws", headers=bearer(site.alice)), 403)


@pytest.mark.slow
async def test_the_host_is_asked_once_per_identity_and_repository_per_recheck_window(site):
    for _ in range(5):
        assert (await site.versions(site.alice)).status == 200
        assert (
            await site.client.get("/v1/modules/acme/net/aws/1.0.0/download", headers=bearer(site.alice))
        ).status == 200
    for _ in range(3):
        await site.listed(site.alice)
    assert site.api_calls("user") == 1
    assert site.api_calls("read") == 1
    listing = "/groups/acme/projects" if site.provider == "gitlab" else "/orgs/acme/repos"
    assert len(site.forge.requests(listing)) == 1
    site.clock.now += 11  # past recheck_seconds = 10: asked again, once
    for _ in range(3):
        assert (await site.versions(site.alice)).status == 200
    assert site.api_calls("user") == 2 and site.api_calls("read") == 2


@pytest.mark.slow
async def test_removing_a_user_from_a_project_cuts_access_within_recheck_seconds_and_restoring_restores_it(site):
    assert (await site.versions(site.alice)).status == 200
    assert await site.listed(site.alice) == ["acme/net/aws"]
    site.forge.revoke("alice", NET)
    assert (await site.versions(site.alice)).status == 200  # the host's answer is trusted for 10 s
    site.clock.now += 11
    await assert_error(await site.versions(site.alice), 403, "cannot read acme/terraform-aws-net")
    assert await site.listed(site.alice) == []
    site.forge.grant("alice", NET)
    site.clock.now += 11
    assert (await site.versions(site.alice)).status == 200
    assert await site.listed(site.alice) == ["acme/net/aws"]


@pytest.mark.slow
async def test_unknown_and_revoked_host_tokens_are_401_with_the_json_shape(site):
    prefix = "glpat-" if site.provider == "gitlab" else "ghp_"
    resp = await site.versions(prefix + "nobody-knows-this-token")
    await assert_error(resp, 401, "not valid")
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await site.versions(site.alice)).status == 200
    site.forge.revoke_token(site.alice)
    site.clock.now += 11
    await assert_error(await site.versions(site.alice), 401, "not valid")


@pytest.mark.slow
async def test_a_token_of_one_kind_of_host_is_never_sent_to_another(site):
    other = ALICE["github" if site.provider == "gitlab" else "gitlab"]
    await assert_error(await site.versions(other), 401)
    # A JWT (a CI job's ID token of an issuer not configured here) is no Git host token either.
    ci_token = jwt.encode({"iss": "https://gitlab.example.com", "aud": "x"}, "k" * 32, algorithm="HS256")
    await assert_error(await site.versions(ci_token), 401, "issuer")
    assert site.forge.requests() == []  # never handed to a host that did not issue it


@pytest.mark.slow
async def test_gitregs_own_tokens_are_never_sent_to_a_git_host(site):
    # Made up, or issued by a registry whose records this replica has not seen: no host issued it.
    for token in ("gitreg_" + "A" * 43, "gitreg_session_" + "0" * 64):
        await assert_error(await site.versions(token), 401, "not valid")
    assert site.forge.requests() == []


@pytest.mark.slow
async def test_a_failing_host_is_asked_once_per_token_and_window(site):
    site.forge.mode = "down"
    prefix = "glpat-" if site.provider == "gitlab" else "ghp_"
    for _ in range(5):
        resp = await site.versions(prefix + "unknown-while-the-host-fails")
        await assert_error(resp, 503, "127.0.0.1")
        assert int(resp.headers["Retry-After"]) > 0
    assert site.api_calls("user") == 1  # was 3 per request (retries), nothing remembered
    site.clock.now += 11  # the window (recheck_seconds here) passed: asked again, once
    await assert_error(await site.versions(prefix + "unknown-while-the-host-fails"), 503)
    assert site.api_calls("user") == 2
    site.forge.mode = "ok"
    site.clock.now += 11
    assert (await site.versions(site.alice)).status == 200


@pytest.mark.slow
async def test_the_host_down_is_a_503_naming_it_once_its_answers_expire_and_static_tokens_keep_working(site):
    assert (await site.versions(site.alice)).status == 200
    site.forge.mode = "down"
    assert (await site.versions(site.alice)).status == 200  # trusted answers still serve
    site.clock.now += 11
    resp = await site.versions(site.alice)
    text = await assert_error(resp, 503, "127.0.0.1")
    assert "Git host" in text and int(resp.headers["Retry-After"]) > 0
    assert "WWW-Authenticate" not in resp.headers  # never a 401: the token may be fine
    assert (await site.versions(ADMIN)).status == 200
    site.forge.mode = "ok"
    site.clock.now += 11  # the failure is remembered for the window too (one call per token and window)
    assert (await site.versions(site.alice)).status == 200


@pytest.mark.slow  # waits out the 8 s the host is given
async def test_a_host_that_does_not_answer_is_a_503_before_terraform_gives_up(site):
    # Terraform waits 10 s for a registry answer: a silent host must not outlast it.
    site.forge.mode = "hang"
    started = time.monotonic()
    resp = await site.versions(site.alice)
    waited = time.monotonic() - started
    text = await assert_error(resp, 503, "127.0.0.1", "did not answer")
    assert "Git host" in text and int(resp.headers["Retry-After"]) > 0
    assert waited < 10, waited
    assert (await site.versions(ADMIN)).status == 200


@pytest.mark.slow
async def test_metrics_count_requests_by_credential_kind_never_by_person(site):
    assert (await site.versions(site.alice)).status == 200
    assert (await site.versions(ADMIN)).status == 200
    text = await (await site.client.get("/metrics")).text()
    assert 'gitreg_requests_by_credential_total{kind="forge"} 1.0' in text
    assert 'gitreg_requests_by_credential_total{kind="static"}' in text
    assert "alice" not in text
    host = f"{site.provider}:127.0.0.1:{site.forge.base_url.rsplit(':', 1)[1]}"
    assert f'gitreg_identity_api_calls_total{{host="{host}"}} 2.0' in text  # who, then can-read


@pytest.mark.slow
async def test_no_host_token_appears_in_a_log_line_or_an_error_body(site, caplog):
    caplog.set_level(logging.DEBUG)
    bodies = []
    for token in (site.alice, site.bob, "glpat-unknown-0000", "ghp_unknown0000"):
        for name in ("net", "dns", "nothing"):
            bodies.append(await (await site.versions(token, name)).text())
    site.forge.mode = "down"
    site.clock.now += 11
    bodies.append(await (await site.versions(site.alice)).text())
    logged = "\n".join(r.getMessage() + repr(r.args) for r in caplog.records)
    for token in (site.alice, site.bob, "glpat-unknown-0000", "ghp_unknown0000"):
        assert token not in logged
        assert all(token not in body for body in bodies)


@pytest.mark.slow
async def test_a_module_whose_repository_is_on_another_host_is_not_opened_by_a_host_token(tmp_path, aiohttp_client):
    root = repositories(tmp_path)
    with GitHttpServer(root) as git:
        forge = await FakeForge("gitlab", git, "acme").start()
        forge.add(NET, repo=f"acme/{NET}")
        forge.add_user("alice", ALICE["gitlab"], sees=(NET,))
        # Same repository path, served from `localhost`: not the forge's host (127.0.0.1).
        elsewhere = git.url(f"acme/{NET}.git").replace("127.0.0.1", "localhost")
        config = parse_config(
            {
                "git": {"protocols": ["http"]},
                "storage": {"path": str(tmp_path / "state")},
                "auth": {"forges": [{"provider": "gitlab", "url": forge.base_url}]},
                "modules": [
                    {"namespace": "acme", "name": "net", "system": "aws", "repository": git.url(f"acme/{NET}.git")},
                    {"namespace": "other", "name": "net", "system": "aws", "repository": elsewhere},
                ],
            }
        )
        client = await aiohttp_client(create_app(config))
        resp = await client.get("/v1/modules/acme/net/aws/versions", headers=bearer(ALICE["gitlab"]))
        assert resp.status == 200, await resp.text()
        resp = await client.get("/v1/modules/other/net/aws/versions", headers=bearer(ALICE["gitlab"]))
        await assert_error(resp, 403, "only modules whose repository is on 127.0.0.1")
        # [[modules]] rules on the host: one membership listing decides what lists show.
        await indexed(client)
        resp = await client.get("/v1/modules", headers=bearer(ALICE["gitlab"]))
        assert [m["id"] for m in (await resp.json())["modules"]] == ["acme/net/aws/1.0.0"]
        assert len(forge.requests("/api/v4/projects")) >= 1
        await forge.close()


@pytest.mark.slow
async def test_replicas_share_the_hosts_can_read_answers_through_redis(tmp_path, aiohttp_client, redis_server):
    with GitHttpServer(repositories(tmp_path)) as git:
        forge = await FakeForge("gitlab", git, "acme", token=ORG_TOKEN["gitlab"]).start()
        for name in (NET, DNS):
            forge.add(name, repo=f"acme/{name}")
        forge.add_user("alice", ALICE["gitlab"], sees=(NET,))
        replicas = []
        for i in range(2):
            cache = {"backend": "redis", "redis_url": redis_server.url, "redis_prefix": "gitreg-identity-test:"}
            config = parse_config(
                {
                    "git": {"protocols": ["http"]},
                    "index": {"enabled": False},  # (nothing here reads the index: no index process per replica)
                    "storage": {"path": str(tmp_path / f"replica-{i}")},
                    "cache": cache,
                    "orgs": [
                        {
                            "provider": "gitlab",
                            "api_url": forge.api_url,
                            "group": "acme",
                            "namespace": "acme",
                            "token": ORG_TOKEN["gitlab"],
                        }
                    ],
                    "auth": {
                        "signing_key": "s" * 40,
                        "forges": [{"provider": "gitlab", "url": forge.base_url, "recheck_seconds": 60}],
                    },
                }
            )
            replicas.append(await aiohttp_client(create_app(config)))
        forge.reset_counters()
        store = redis.asyncio.from_url(redis_server.url)
        for client in replicas:
            for name, status in (("net", 200), ("dns", 403)):
                resp = await client.get(f"/v1/modules/acme/{name}/aws/versions", headers=bearer(ALICE["gitlab"]))
                assert resp.status == status, await resp.text()
            # The answers reach Redis just after they are given (written in the background).
            for _ in range(250):
                if len(await store.keys("gitreg-identity-test:access:*")) == 2:
                    break
                await asyncio.sleep(0.02)
        # Each project asked once across both replicas (the second read Redis); Redis holds no token.
        assert len(forge.requests("/api/v4/projects/")) == 2
        keys = await store.keys("gitreg-identity-test:access:*")
        assert len(keys) == 2 and [await store.get(k) for k in keys] == [b"1", b"1"]  # the answer is in the name
        # A Redis writer cannot flip an answer, nor keep one for good: "no" stays no, on a replica that
        # starts now too (it reads Redis, having no answer of its own).
        for k in keys:
            await store.persist(k)
            await store.set(k, "1")
        fresh = await aiohttp_client(create_app(config))
        resp = await fresh.get("/v1/modules/acme/dns/aws/versions", headers=bearer(ALICE["gitlab"]))
        assert resp.status == 403, await resp.text()
        assert (await fresh.get("/v1/modules/acme/net/aws/versions", headers=bearer(ALICE["gitlab"]))).status == 200
        assert len(forge.requests("/api/v4/projects/")) == 2  # both answers read from Redis, as written
        for key in await store.keys("*"):
            value = await store.type(key) == b"string" and await store.get(key)
            assert ALICE["gitlab"].encode() not in key + (value or b"")
        await store.aclose()
        await forge.close()


@pytest.mark.slow
async def test_a_host_saying_slow_down_is_backed_off_host_wide_with_503s_and_retry_after(site):
    site.forge.rate_limit_next(1, seconds=20)
    resp = await site.versions(site.alice)
    await assert_error(resp, 503, "127.0.0.1", "rate limited")
    assert 15 <= int(resp.headers["Retry-After"]) <= 21
    for token in (site.bob, *(f"{site.bob}-{i}" for i in range(20))):  # anyone's token, meanwhile
        resp = await site.versions(token)
        await assert_error(resp, 503, "127.0.0.1", "asked gitreg to wait")
        assert 0 < int(resp.headers["Retry-After"]) <= 21
    await assert_error(await site.versions(site.alice), 503, "127.0.0.1")  # (its own answer, remembered)
    assert len(site.forge.requests()) == 1  # was up to 4 calls per request, none remembered
    site.clock.now += 21
    assert (await site.versions(site.bob)).status == 200


@pytest.mark.slow
async def test_a_host_answering_5xx_is_backed_off_host_wide(site):
    site.forge.mode = "down"
    await assert_error(await site.versions(site.alice), 503, "127.0.0.1")
    prefix = "glpat-" if site.provider == "gitlab" else "ghp_"
    for token in (site.bob, prefix + "x0123456789", "no-prefix-0123456789"):
        await assert_error(await site.versions(token), 503, "asked gitreg to wait")
    assert len(site.forge.requests()) == 1
    site.forge.mode = "ok"
    site.clock.now += 11
    assert (await site.versions(site.bob)).status == 200


@pytest.mark.slow
async def test_a_hostile_username_is_shown_with_safe_characters_only(site):
    token = "glpat-eve-0000000001" if site.provider == "gitlab" else "ghp_eve000001"
    site.forge.add_user('eve" - [x]\nGET /admin', token, sees=(NET,))
    text = await assert_error(await site.versions(token, "dns"), 403)
    assert "eve__-__x__GET_/admin@127.0.0.1 cannot read" in text
    line = access_line(AccessEntry(0.0, "1.2.3.4", "GET", "/", (1, 1), 200, 0, "", "", 0.1, 'a b"\n[c]'))
    assert line.startswith("1.2.3.4 - a_b___c_ [")


class IssuedTokens:
    """A tiny `LoginTokens` (what `terraform login` issued): one registry token standing for alice's host token."""

    def __init__(self, issued: str, principal: Principal) -> None:
        self.issued = issued
        self.found = principal
        self.asked = 0

    async def principal(self, presented: str) -> Principal | None:
        self.asked += 1
        return self.found if presented == self.issued else None


@pytest.mark.slow
async def test_a_terraform_login_token_reads_what_the_host_says_its_person_can(tmp_path, aiohttp_client):
    with GitHttpServer(repositories(tmp_path)) as git:
        forge = await FakeForge("gitlab", git, "acme", token=ORG_TOKEN["gitlab"]).start()
        for name in (NET, DNS):
            forge.add(name, repo=f"acme/{name}")
        oauth_token = "gitlab-oauth-access-token-for-alice-0001"  # GitLab OAuth tokens carry no prefix
        forge.add_user("alice", oauth_token, sees=(NET,))
        config = config_for(forge, tmp_path)
        person = Principal("login", "alice@127.0.0.1", forge=config.auth.forges[0], host_token=oauth_token)
        issued = IssuedTokens("gitreg-issued-registry-token-0001", person)
        client = await aiohttp_client(create_app(config))
        client.app[IDENTITY].login = issued  # in place of the issued tokens (no OAuth application here)
        headers = bearer(issued.issued)
        assert (await client.get("/v1/modules/acme/net/aws/versions", headers=headers)).status == 200
        resp = await client.get("/v1/modules/acme/dns/aws/versions", headers=headers)
        await assert_error(resp, 403, "alice@127.0.0.1 cannot read acme/terraform-aws-dns")
        await indexed(client)
        resp = await client.get("/v1/modules", headers=headers)
        assert [m["id"] for m in (await resp.json())["modules"]] == ["acme/net/aws/1.0.0"]
        # The static token is tried first, then the issued ones: a static token never reaches them.
        assert (await client.get("/v1/modules/acme/dns/aws/versions", headers=bearer(ADMIN))).status == 200
        assert issued.asked == 3
        text = await (await client.get("/metrics")).text()
        assert 'gitreg_requests_by_credential_total{kind="login"} 3.0' in text
        # The host was asked with the host token the login stands for, never with the issued token.
        assert all(issued.issued not in str(r.headers) for r in forge.requests())
        assert any(oauth_token in r.headers.get("Authorization", "") for r in forge.requests("/projects/"))
        await forge.close()
