"""Observed installs: a CI job's OIDC-authenticated `download` is recorded (project, repository, version, when).

The issuer is the fake CI issuer (tests/support/oidc.py), the modules real git repositories over
smart HTTP, the app real; Redis is a real redis-server. Time is the services' wall clock, injected.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gitreg.config.parse import parse_config
from gitreg.web.app import create_app
from gitreg.web.keys import INSTALLS
from tests.support.githttp import GitHttpServer
from tests.support.oidc import AUDIENCE, FakeIssuer
from tests.support.repos import GitRepo

STATIC = "static-registry-token-7d1e0c55"
DAY = 86_400.0


class Clock:
    """Unix time the test moves."""

    def __init__(self) -> None:
        self.now = 1_790_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def issuer() -> AsyncIterator[FakeIssuer]:
    fake = await FakeIssuer().start()
    yield fake
    await fake.close()


@pytest.fixture
def git(tmp_path: Path):
    root = tmp_path / "repos"
    repo = GitRepo(root, "acme-vpc")
    repo.commit({"main.tf": 'variable "cidr" {}\n'})
    repo.tag("v1.0.0")
    repo.commit({"main.tf": 'variable "cidr" {}\nvariable "name" {}\n'})
    repo.tag("v1.1.0")
    with GitHttpServer(root) as server:
        yield server


def config(issuer: FakeIssuer, git: GitHttpServer, state: Path, download: str = "git", **cache: Any) -> Any:
    return parse_config(
        {
            "git": {"protocols": ["http"]},
            "storage": {"path": str(state)},
            "cache": cache,
            "auth": {
                "tokens": [STATIC],
                "signing_key": "k" * 40,
                # The CI issuer runs on the Git host's host: its jobs' projects are repositories there.
                "forges": [{"provider": "gitlab", "url": issuer.issuer}],
                "oidc": [{"issuer": issuer.issuer, "audience": AUDIENCE, "namespaces": ["acme"]}],
            },
            "modules": [
                {
                    "namespace": "acme",
                    "name": "vpc",
                    "system": "aws",
                    "repository": git.url("acme-vpc.git"),
                    "download": download,
                }
            ],
        }
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def download(client, version: str, token: str | None) -> None:
    headers = bearer(token) if token else {}
    resp = await client.get(f"/v1/modules/acme/vpc/aws/{version}/download", headers=headers)
    assert resp.status == 200, await resp.text()


@pytest.mark.parametrize("mode", ["git", pytest.param("archive", marks=pytest.mark.slow)])  # (archive: a build)
async def test_a_ci_jobs_download_is_an_install_and_a_static_tokens_is_not(issuer, git, tmp_path, aiohttp_client, mode):
    clock = Clock()
    client = await aiohttp_client(create_app(config(issuer, git, tmp_path / "state", mode), wall_clock=clock))
    await download(client, "1.0.0", STATIC)
    assert client.app[INSTALLS].of("acme/vpc/aws") == []
    await download(client, "1.0.0", issuer.sign(issuer.claims()))  # GitLab CI: project_path acme/infra
    clock.now += 60
    github = issuer.claims(project_path=None, repository="acme/app", sub="repo:acme/app:ref:refs/heads/main")
    await download(client, "1.1.0", issuer.sign(github))
    found = [(i.project, i.repository, i.address, i.version, i.at) for i in client.app[INSTALLS].of("acme/vpc/aws")]
    assert found == [
        ("acme/app", f"{issuer.issuer}/acme/app.git", "acme/vpc/aws", "1.1.0", clock.now),
        ("acme/infra", f"{issuer.issuer}/acme/infra.git", "acme/vpc/aws", "1.0.0", clock.now - 60),
    ]


async def test_an_anonymous_download_of_an_open_registry_is_no_install(git, tmp_path, aiohttp_client):
    open_config = parse_config(
        {
            "git": {"protocols": ["http"]},
            "storage": {"path": str(tmp_path / "state")},
            "modules": [
                {
                    "namespace": "acme",
                    "name": "vpc",
                    "system": "aws",
                    "repository": git.url("acme-vpc.git"),
                    "download": "git",
                }
            ],
        }
    )
    client = await aiohttp_client(create_app(open_config))
    await download(client, "1.0.0", None)
    assert client.app[INSTALLS].of("acme/vpc/aws") == []


async def test_one_entry_per_project_and_version_keeps_the_newest_time(issuer, git, tmp_path, aiohttp_client):
    clock = Clock()
    client = await aiohttp_client(create_app(config(issuer, git, tmp_path / "state"), wall_clock=clock))
    token = issuer.sign(issuer.claims())
    for asked in ("1.0.0", "v1.0.0", "1.0.0"):
        await download(client, asked, token)
        clock.now += 10
    [only] = client.app[INSTALLS].of("acme/vpc/aws")
    assert (only.project, only.version, only.at) == ("acme/infra", "1.0.0", clock.now - 10)


async def test_installs_are_kept_90_days_and_survive_a_restart(issuer, git, tmp_path, aiohttp_client):
    clock = Clock()
    state = tmp_path / "state"
    client = await aiohttp_client(create_app(config(issuer, git, state), wall_clock=clock))
    await download(client, "1.0.0", issuer.sign(issuer.claims()))
    clock.now += 30 * DAY
    await download(client, "1.1.0", issuer.sign(issuer.claims()))
    await client.close()  # shutdown writes what is in memory
    assert (state / "installs.json").is_file()

    clock.now += 61 * DAY  # 91 days after the first, 61 after the second
    again = await aiohttp_client(create_app(config(issuer, git, state), wall_clock=clock))
    assert [(i.project, i.version) for i in again.app[INSTALLS].of("acme/vpc/aws")] == [("acme/infra", "1.1.0")]
    clock.now += 30 * DAY
    assert again.app[INSTALLS].of("acme/vpc/aws") == []


async def test_a_damaged_or_hostile_installs_file_is_no_install_and_no_failure(issuer, git, tmp_path, aiohttp_client):
    clock = Clock()
    state = tmp_path / "state"
    state.mkdir()
    good = ["acme/infra", None, "1.0.0", clock.now - DAY]
    rows = [good, ["<script>", None, "1.0.0", clock.now], ["a/b", "javascript:alert(1)", "1.0.0", clock.now]]
    rows += [["a/b", None, "1.0.0", "soon"], ["a/b", None, "1.0.0", float("1e300")], "x", ["a/b"]]
    (state / "installs.json").write_text(json.dumps({"format": 1, "installs": {"acme/vpc/aws": rows, "x": 3}}))
    client = await aiohttp_client(create_app(config(issuer, git, state), wall_clock=clock))
    assert [(i.project, i.version) for i in client.app[INSTALLS].of("acme/vpc/aws")] == [("acme/infra", "1.0.0")]


async def test_a_module_keeps_at_most_its_newest_installs(issuer, git, tmp_path, aiohttp_client):
    from gitreg.usage.installs import MAX_PER_MODULE

    clock = Clock()
    client = await aiohttp_client(create_app(config(issuer, git, tmp_path / "state"), wall_clock=clock))
    installs = client.app[INSTALLS]
    for n in range(MAX_PER_MODULE + 50):  # as many projects' jobs (hostile or not)
        clock.now += 1
        installs.record(f"acme/p{n}", None, "acme/vpc/aws", "1.0.0")
    found = installs.of("acme/vpc/aws")
    assert len(found) == MAX_PER_MODULE
    assert found[0].project == f"acme/p{MAX_PER_MODULE + 49}" and found[-1].project == "acme/p50"


@pytest.mark.slow
async def test_two_replicas_over_redis_see_each_others_installs(issuer, git, tmp_path, aiohttp_client, redis_server):
    clock = Clock()
    cache = {"backend": "redis", "redis_url": redis_server.url, "redis_prefix": "gitreg-installs-test:"}
    a = await aiohttp_client(create_app(config(issuer, git, tmp_path / "a", **cache), wall_clock=clock))
    b = await aiohttp_client(create_app(config(issuer, git, tmp_path / "b", **cache), wall_clock=clock))
    await download(a, "1.0.0", issuer.sign(issuer.claims()))
    clock.now += 5
    await download(b, "1.1.0", issuer.sign(issuer.claims(project_path="acme/web")))
    for client in (a, b):
        found: list[tuple[str, str]] = []
        for _ in range(50):
            clock.now += 3  # (a module's shared installs are read again at most every 2 s)
            found = [(i.project, i.version) for i in await client.app[INSTALLS].current("acme/vpc/aws")]
            if len(found) == 2:
                break
            await asyncio.sleep(0.1)
        assert found == [("acme/web", "1.1.0"), ("acme/infra", "1.0.0")]


@pytest.mark.slow
async def test_what_redis_holds_that_gitreg_never_wrote_is_not_shown(
    issuer, git, tmp_path, aiohttp_client, redis_server
):
    import redis.asyncio as aioredis

    clock = Clock()
    prefix = "gitreg-installs-hostile:"
    cache = {"backend": "redis", "redis_url": redis_server.url, "redis_prefix": prefix}
    client = await aiohttp_client(create_app(config(issuer, git, tmp_path / "a", **cache), wall_clock=clock))
    planted = {
        json.dumps(["acme/ok", None, "1.0.0"]): clock.now - 1,
        json.dumps(["<img src=x>", None, "1.0.0"]): clock.now,
        json.dumps(["acme/x", "file:///etc/passwd", "1.0.0"]): clock.now,
        json.dumps(["acme/y", None, "1.0.0"]): clock.now + 400 * DAY,
        "not json": clock.now,
        json.dumps({"project": "acme/z"}): clock.now,
    }
    r = aioredis.from_url(redis_server.url)
    await r.zadd(f"{prefix}installs:acme/vpc/aws", planted)
    await r.aclose()
    found = [(i.project, i.repository) for i in await client.app[INSTALLS].current("acme/vpc/aws")]
    assert found == [("acme/ok", None)]


def test_a_jobs_repository_is_known_only_on_a_configured_git_host_and_from_a_plain_project_path():
    from gitreg.config.model import ForgeAuthConfig
    from gitreg.identity.oidc import job_repository

    gitlab = ForgeAuthConfig("gitlab", "https://gitlab.example.com", "https://gitlab.example.com/api/v4")
    github = ForgeAuthConfig("github", "https://github.com", "https://api.github.com")
    forges = (gitlab, github)
    gitlab_job = {"project_path": "platform/net/app", "sub": "project_path:platform/net/app:ref_type:branch:ref:main"}
    assert job_repository(gitlab_job, "gitlab.example.com", forges) == "https://gitlab.example.com/platform/net/app.git"
    actions = {"repository": "acme/app", "sub": "repo:acme/app:ref:refs/heads/main"}
    assert job_repository(actions, "token.actions.githubusercontent.com", forges) == "https://github.com/acme/app.git"
    assert job_repository(actions, "ci.elsewhere.example", forges) is None  # an issuer no Git host here is
    assert job_repository(actions, "token.actions.githubusercontent.com", (gitlab,)) is None
    for hostile in ("acme/../../etc", "acme app/x", "acme/app?x=1", "acme", "acme/app.git#x", "/acme/app"):
        assert job_repository({"project_path": hostile}, "gitlab.example.com", forges) is None, hostile


@pytest.mark.slow
async def test_installs_recorded_while_redis_is_down_reach_the_other_replica_when_it_returns(
    issuer, git, tmp_path, aiohttp_client, redis_server
):
    clock = Clock()
    cache = {"backend": "redis", "redis_url": redis_server.url, "redis_prefix": "gitreg-installs-down:"}
    a = await aiohttp_client(create_app(config(issuer, git, tmp_path / "a", **cache), wall_clock=clock))
    b = await aiohttp_client(create_app(config(issuer, git, tmp_path / "b", **cache), wall_clock=clock))
    redis_server.kill()
    await download(a, "1.0.0", issuer.sign(issuer.claims()))  # served and recorded, Redis or not
    assert [i.project for i in await a.app[INSTALLS].current("acme/vpc/aws")] == ["acme/infra"]
    assert await b.app[INSTALLS].current("acme/vpc/aws") == []
    redis_server.start()  # empty: it kept nothing (no persistence)
    found: list[str] = []
    for _ in range(100):
        clock.now += 3
        found = [i.project for i in await b.app[INSTALLS].current("acme/vpc/aws")]
        if found:
            break
        await asyncio.sleep(0.1)
    assert found == ["acme/infra"]
