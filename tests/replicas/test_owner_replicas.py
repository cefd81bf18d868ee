"""Replicas sharing Redis agree on who owns an org module address: the earliest holder anywhere."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from gitreg.web.keys import ORGS
from tests.support.forges import FakeForge
from tests.support.orgs import API_TOKEN, NEWCOMER, OWNER, module_repo, org_config, served_by, until, versions_of
from tests.support.webhooks import WEBHOOKS

# Real Redis: left out of the fast subset (`-m "not slow"`).
pytestmark = pytest.mark.slow


@pytest.fixture
async def gitlab(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("gitlab", git_http, "acme", token=API_TOKEN).start()
    yield fake
    await fake.close()


def replica_config(gitlab, git_http, tmp_path, name: str, redis_url: str):
    """One replica: its own storage, the Redis every replica shares."""
    return org_config(
        gitlab,
        git_http,
        webhooks=WEBHOOKS,
        storage={"path": str(tmp_path / f"storage-{name}")},
        cache={"backend": "redis", "redis_url": redis_url},
        org={"refresh_seconds": 3600},
        index={"enabled": False},  # owners and versions answers: nothing here reads the index
    )


async def test_a_replica_started_after_a_newcomer_serves_the_owner_another_replica_held_first(
    serve_client, gitlab, git_http, tmp_path, redis_server, caplog
):
    caplog.set_level(logging.WARNING)
    module_repo(tmp_path, "team-b-vpc", ("1.0.0",))
    module_repo(tmp_path, "newcomer-vpc", ("9.9.9",))
    gitlab.add("terraform-aws-vpc", subgroup="team-b", key="owner", repo="team-b-vpc")
    config_a = replica_config(gitlab, git_http, tmp_path, "a", redis_server.url)
    config_b = replica_config(gitlab, git_http, tmp_path, "b", redis_server.url)
    a = await serve_client(config_a)
    await until(a.app[ORGS].complete)
    assert served_by(a) == OWNER

    # The newcomer (an older project whose path sorts first) appears; replica B starts after it,
    # on its own storage: by its own listing alone the newcomer would win the address.
    gitlab.add("terraform-aws-vpc", subgroup="aaa-newcomer", key="newcomer", repo="newcomer-vpc", rid=7)
    assert await a.app[ORGS].enumerate(0)
    b = await serve_client(config_b)
    await until(b.app[ORGS].complete)
    await until(lambda: served_by(b) == OWNER)
    assert await versions_of(b) == ["1.0.0"]
    assert dict(b.app[ORGS].report()[0].ignored)[NEWCOMER].startswith(f"conflict: acme/vpc/aws is held by {OWNER}")
    assert served_by(a) == OWNER
    adopted = [r.getMessage() for r in caplog.records if "held it first" in r.getMessage()]
    assert len(adopted) == 1 and OWNER in adopted[0]
    metrics = await (await b.get("/metrics")).text()
    assert 'gitreg_org_owners_adopted_total{org="gitlab:acme"} 1.0' in metrics
    assert await b.app[ORGS].enumerate(0)  # settled for good: a new enumeration keeps it
    assert served_by(b) == OWNER
    assert len([r for r in caplog.records if "held it first" in r.getMessage()]) == 1

    # Both keep it across restarts (each from its own orgs.json, and Redis).
    await a.close()
    await b.close()
    for config in (config_b, config_a):
        client = await serve_client(config)
        await until(client.app[ORGS].complete)
        assert await client.app[ORGS].enumerate(0)
        assert served_by(client) == OWNER
        assert await versions_of(client) == ["1.0.0"]
        await client.close()


async def test_an_owner_planted_in_redis_that_the_api_does_not_list_is_never_served(
    serve_client, gitlab, git_http, tmp_path, redis_server
):
    module_repo(tmp_path, "team-b-vpc", ("1.0.0",))
    gitlab.add("terraform-aws-vpc", subgroup="team-b", key="owner", repo="team-b-vpc")
    config = replica_config(gitlab, git_http, tmp_path, "a", redis_server.url)
    org = config.orgs[0]
    planted = f'["gitlab", "{org.api_url}", "acme", "acme/ghost/terraform-aws-vpc"]'
    writer = redis.asyncio.from_url(redis_server.url)
    await writer.hset("gitreg:owners", "acme/vpc/aws", f"0.0 {planted}")
    await writer.aclose()
    client = await serve_client(config)
    await until(client.app[ORGS].complete)
    await until(lambda: served_by(client) == OWNER)
    assert await versions_of(client) == ["1.0.0"]


async def test_a_first_listing_s_new_owners_are_all_recorded_in_redis_in_batches_and_earlier_ones_adopted(
    redis_server,
):
    """30,000 new owners after a first listing were 30,000 tasks on the serving loop (#22): they are
    queued and recorded REPUBLISH_BATCH to a pipeline, each earlier owner Redis holds adopted."""
    import json

    from gitreg.replicas.owning import SharedOwners
    from gitreg.replicas.pinning import REPUBLISH_BATCH

    client = redis.asyncio.from_url(redis_server.url)
    await client.hset("t:owners", "acme/m00007/aws", "1.0 earlier-holder")
    owners = SharedOwners(client, "t:owners", "t:channel", lambda kind, **fields: json.dumps(fields))
    adopted: list[tuple[str, str, float]] = []
    owners.on_owner.connect(lambda address, holder, since: adopted.append((address, holder, since)))
    calls = 0

    async def call(awaitable):
        nonlocal calls
        calls += 1
        return await awaitable

    count = REPUBLISH_BATCH * 2 + 7
    started = [owners.queue(f"acme/m{i:05d}/aws", f"holder-{i}", 2.0, "") for i in range(count)]
    assert started == [True] + [False] * (count - 1)  # one drain for them all
    await owners.drain(call)
    assert calls == 3  # round trips, not one per owner
    held = await client.hgetall("t:owners")
    assert len(held) == count and held[b"acme/m00007/aws"] == b"1.0 earlier-holder"
    assert held[b"acme/m00008/aws"] == b"2.0 holder-8"
    assert ("acme/m00007/aws", "earlier-holder", 1.0) in adopted

    async def down(awaitable):
        awaitable.close()
        raise ConnectionError("redis is down")

    assert owners.queue("acme/late/aws", "holder-late", 3.0, "")
    await owners.drain(down)  # dropped: the next (re)connect publishes every owner again
    assert owners.queue("acme/later/aws", "holder-later", 3.0, "")  # a new drain starts
    await owners.drain(call)
    assert await client.hget("t:owners", "acme/late/aws") is None
    assert await client.hget("t:owners", "acme/later/aws") == b"3.0 holder-later"
    await client.aclose()
