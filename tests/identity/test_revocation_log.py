"""Revocation that nothing undoes, on a replica that never saw the token: the revocation log in Redis.

Two (and more) replicas on a real Redis, a fake GitLab's OAuth for `terraform login`, the real
`gitreg tokens revoke`, and a test playing whoever can write Redis without the signing key: it
keeps the authentic record of an active token, and after the revocation puts it back, empties
the revocation log, or cuts the log back to what it was when the token was issued.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis_async

from gitreg.identity.shared_records import WATCH_SECONDS
from tests.support.app import make_config
from tests.support.oauth import CLIENT_ID, CLIENT_SECRET, FakeOAuthHost, git_host, login
from tests.support.process import run_gitreg

SIGNING_KEY = "r" * 40
PREFIX = "revlog-test:"
RECORDS = f"{PREFIX}logins"
LOG = f"{PREFIX}login-revocations"


@pytest.fixture
def gitlab(tmp_path: Path) -> Iterator[FakeOAuthHost]:
    with git_host("gitlab", tmp_path / "gitlab") as fake:
        yield fake


def replica(tmp_path: Path, fake: FakeOAuthHost, redis_url: str, name: str) -> Any:
    forge = {
        "provider": fake.provider,
        "url": fake.base_url,
        "api_url": fake.api_url,
        "oauth_client_id": CLIENT_ID,
        "oauth_client_secret": CLIENT_SECRET,
    }
    return make_config(
        fake.rules(),
        storage={"path": str(tmp_path / name)},
        cache={"backend": "redis", "redis_url": redis_url, "redis_prefix": PREFIX},
        auth={"signing_key": SIGNING_KEY, "forges": [forge]},
        index={"enabled": False},  # versions answers only: what `gitreg serve` builds with the index off
    )


def revoke(tmp_path: Path, fake: FakeOAuthHost, redis_url: str, who: str) -> None:
    """`gitreg tokens revoke <who>`, a real process on replica a's storage."""
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "state-a"}"\n[git]\nprotocols = ["http"]\n'
        f'[cache]\nbackend = "redis"\nredis_url = "{redis_url}"\nredis_prefix = "{PREFIX}"\n'
        f'[auth]\nsigning_key = "{SIGNING_KEY}"\n' + fake.forge_toml() + fake.modules_toml()
    )
    done = run_gitreg("tokens", "revoke", who, "--config", str(config))
    assert done.returncode == 0 and "revoked" in done.stdout, done.stderr


async def status(client: Any, token: str) -> int:
    resp = await client.get("/v1/modules/demo/hello/null/versions", headers={"Authorization": f"Bearer {token}"})
    return resp.status


async def statuses(client: Any, token: str, seconds: float, until: int | None = None) -> set[int]:
    """Every status the token's request got over `seconds` (asked every 0.2 s); with `until`, only
    until it got that status (what `until in statuses(...)` asserts is then known)."""
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and until not in seen:
        seen.add(await status(client, token))
        await asyncio.sleep(0.2)
    return seen


@pytest.mark.slow  # four replicas, real Redis, `gitreg tokens revoke` as a process
async def test_a_revoked_record_put_back_is_refused_by_a_replica_that_never_saw_the_token(
    serve_client, tmp_path, gitlab, redis_server
):
    a = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-a"))
    b = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-b"))
    token = await login(a)
    other = await login(a)  # a second token of alice's, issued after: revoked together
    assert await status(a, token) == 200
    redis = redis_async.from_url(redis_server.url)
    active = await redis.hgetall(RECORDS)  # the writer keeps the authentic active records...
    as_issued = await redis.lrange(LOG, 0, -1)  # ...and the log as it was then
    revoke(tmp_path, gitlab, redis_server.url, "alice")
    assert 401 in await statuses(a, token, 1.5, until=401)
    # The writer puts the active records back. Replica b never saw either token: it reads Redis only.
    await redis.hset(RECORDS, mapping=active)
    assert await statuses(b, token, 2.5) == {401}  # was 200: the re-planted record was taken
    assert await statuses(b, other, 1.0) == {401}
    assert len(await redis.lrange(LOG, 0, -1)) == len(as_issued) + 2

    # The writer deletes the first token's revocation from the middle of the log and puts the records
    # back: a replica started after it finds a number missing after the records' and takes neither.
    revocations = await redis.lrange(LOG, len(as_issued), -1)
    await redis.lrem(LOG, 1, revocations[0])
    await redis.hset(RECORDS, mapping=active)
    fresh = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-e"))
    for presented in (token, other):
        assert await statuses(fresh, presented, 1.0) == {401}
    await redis.rpush(LOG, revocations[0])  # (put back: the next steps start from a whole log)

    # The writer empties the log and puts the records back again: nothing names the log they name.
    await redis.delete(LOG)
    await redis.hset(RECORDS, mapping=active)
    c = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-c"))  # starts after: saw nothing
    for client in (b, c):
        assert await statuses(client, token, 1.5) == {401}

    # The writer cuts the log back to what it was when the tokens were issued, and puts them back: the
    # replicas that read the revocations append them again within WATCH_SECONDS.
    await redis.delete(LOG)
    await redis.rpush(LOG, *as_issued)
    await redis.hset(RECORDS, mapping=active)
    # (All of it: the log grows with the first replica's heal, and a replica started then was seen taking the token.)
    await asyncio.sleep(WATCH_SECONDS + 1.5)
    assert len(await redis.lrange(LOG, 0, -1)) > len(as_issued)
    d = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-d"))  # saw nothing either
    assert await statuses(d, token, 1.5) == {401}
    assert await statuses(d, other, 1.0) == {401}
    await redis.aclose()


@pytest.mark.slow  # two replicas, real Redis
async def test_a_made_up_log_entry_or_first_entry_revokes_nothing_and_blocks_no_revocation(
    serve_client, tmp_path, gitlab, redis_server
):
    a = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-a"))
    b = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-b"))
    token = await login(a)
    kept = await login(a)
    redis = redis_async.from_url(redis_server.url)
    records = await redis.hgetall(RECORDS)
    digests = sorted(d.decode() for d in records)
    entries = await redis.lrange(LOG, 0, -1)
    # Entries made up by the writer: a MAC of its own, another entry's MAC moved, garbage.
    mac, _, _ = entries[0].decode().partition(".")
    await redis.rpush(LOG, f"{'0' * 64}.2.{digests[0]}.9999999999", f"{mac}.2.{digests[1]}.9999999999", "x" * 100)
    for client, presented in ((b, token), (b, kept), (a, kept)):
        assert await statuses(client, presented, 1.0) == {200}
    active = await redis.hgetall(RECORDS)
    revoke(tmp_path, gitlab, redis_server.url, "alice")
    await redis.hset(RECORDS, mapping=active)  # put back: b still refuses (the revocation is read past the junk)
    assert await statuses(b, token, 2.5) == {401}
    assert await statuses(b, kept, 1.0) == {401}
    await redis.aclose()


@pytest.mark.slow  # a replica on real Redis, its commands counted
async def test_a_known_good_token_costs_no_redis_round_trip_per_request(serve_client, tmp_path, gitlab, redis_server):
    a = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-a"))
    token = await login(a)
    assert await status(a, token) == 200
    redis = redis_async.from_url(redis_server.url)
    await redis.config_resetstat()
    started = time.monotonic()
    for _ in range(50):
        assert await status(a, token) == 200
    took = time.monotonic() - started
    stats = await redis.info("commandstats")
    trips = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    # One read (the record and the log's new entries together) per second of requests, and the watch's.
    assert trips.get("exec", 0) <= 2 * took / WATCH_SECONDS + took + 2, (took, trips)
    assert trips.get("exec", 0) >= trips.get("hget", 0) and trips.get("lrange", 0) == trips.get("exec", 0)
    await redis.aclose()


@pytest.mark.slow  # three replicas, real Redis
async def test_records_an_earlier_gitreg_wrote_are_written_again_by_the_replica_holding_them(
    serve_client, tmp_path, gitlab, redis_server
):
    a = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-a"))
    token = await login(a)
    redis = redis_async.from_url(redis_server.url)
    ((digest, value),) = (await redis.hgetall(RECORDS)).items()
    # As the previous version wrote it: an HMAC over the digest and the JSON, no revocation log named.
    text = value.decode().split(".", 3)[3]
    key = hashlib.sha256(b"gitreg-issued-records\0" + SIGNING_KEY.encode()).digest()
    mac = hmac.new(key, digest + b"\0" + text.encode(), hashlib.sha256).hexdigest()
    await redis.hset(RECORDS, digest, f"{mac}.{text}")
    b = await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-b"))
    assert await statuses(b, token, 1.0) == {401}  # never taken as it is
    await serve_client(replica(tmp_path, gitlab, redis_server.url, "state-a"))  # a's restart, on a's file
    assert 200 in await statuses(b, token, 3.0, until=200)  # a wrote it again: b takes it (was 401 for good)
    assert await status(b, token) == 200
    await redis.aclose()
