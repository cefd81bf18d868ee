"""Signature verdicts shared through a real Redis (#35): one replica verifies, the others read its verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from gitreg.web.keys import REGISTRY
from tests.support.app import make_config
from tests.support.repos import GitRepo
from tests.support.signing import allowed_signers, ssh_key, ssh_signed_tag

pytestmark = pytest.mark.slow
VERSIONS = "/v1/modules/acme/vpc/aws/versions"


def replica(repo: GitRepo, allowed: Path, tmp_path: Path, name: str, redis_url: str) -> Any:
    module = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": repo.url, "download": "git"}
    return make_config(
        [module],
        signing={"allowed_signers": str(allowed), "require": True},
        cache={"backend": "redis", "redis_url": redis_url},
        auth={"signing_key": "a-shared-signing-key-of-32-characters!"},
        storage={"path": str(tmp_path / f"state-{name}")},
        index={"enabled": False},  # versions answers only: the verdicts counted are theirs alone
    )


@pytest.fixture
def signed_repo(tmp_path: Path) -> tuple[GitRepo, Path]:
    key = ssh_key(tmp_path / "keys", "alice")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"alice@example.com": key})
    repo = GitRepo(tmp_path / "repos", "vpc")
    repo.commit({"main.tf": "# one\n"})
    ssh_signed_tag(repo, "v1.0.0", key)
    repo.commit({"main.tf": "# two\n"})
    repo.tag("v1.1.0", annotated=True)
    return repo, allowed


async def listed(client: Any) -> list[str]:
    resp = await client.get(VERSIONS)
    assert resp.status == 200, await resp.text()
    return [v["version"] for v in (await resp.json())["modules"][0]["versions"]]


async def test_a_second_replica_takes_the_first_ones_verdicts_without_verifying_again(
    serve_client, signed_repo, tmp_path, redis_server
):
    repo, allowed = signed_repo
    first = await serve_client(replica(repo, allowed, tmp_path, "a", redis_server.url))
    assert await listed(first) == ["1.0.0"]
    assert first.app[REGISTRY].signatures.verified == 2
    second = await serve_client(replica(repo, allowed, tmp_path, "b", redis_server.url))
    assert await listed(second) == ["1.0.0"]
    assert second.app[REGISTRY].signatures.verified == 0


async def test_a_verdict_planted_in_redis_without_our_hmac_is_verified_again(
    serve_client, signed_repo, tmp_path, redis_server
):
    repo, allowed = signed_repo
    first = await serve_client(replica(repo, allowed, tmp_path, "a", redis_server.url))
    assert await listed(first) == ["1.0.0"]
    writer = redis.asyncio.from_url(redis_server.url)
    try:
        fields = await writer.hkeys("gitreg:signatures")
        assert len(fields) == 2
        forged = '{"status": "signed", "signer": "alice@example.com", "fingerprint": "", "format": "ssh", '
        forged += '"signed": "tag", "object": "", "reason": ""}'
        for field in fields:  # whoever writes to Redis says every version is signed
            await writer.hset("gitreg:signatures", field, "0" * 64 + "." + forged)
    finally:
        await writer.aclose()
    second = await serve_client(replica(repo, allowed, tmp_path, "b", redis_server.url))
    assert await listed(second) == ["1.0.0"]  # 1.1.0 is still not served
    assert second.app[REGISTRY].signatures.verified == 2
