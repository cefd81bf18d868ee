"""Several gitreg processes on one real Redis: one truth, instant invalidation, and no dependency on Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess, run_gitreg
from tests.support.redis import RedisServer
from tests.support.repos import GitRepo
from tests.support.webhooks import GITHUB_SECRET, fixture, github_headers, pointed_at

# Left out of the fast subset (`-m "not slow"`): real Redis servers and several gitreg processes.
pytestmark = pytest.mark.slow

ADDRESS = "demo/hello/null"


def write_config(
    tmp_path: Path,
    name: str,
    repository: str,
    *,
    backend: str = "redis",
    index: bool = False,
    ttl: float = 3600,
    rule: str = "",
    git_timeout: float = 10,
) -> Path:
    """One replica's config: its own storage (as a pod has), Redis from $TEST_REDIS_URL."""
    storage = tmp_path / f"storage-{name}"
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
[server]
host = "127.0.0.1"
[cache]
backend = "{backend}"
{'redis_url = "${TEST_REDIS_URL}"' if backend == "redis" else ""}
ttl_seconds = {ttl}
[git]
protocols = ["https", "http", "file"]
timeout_seconds = {git_timeout:g}
[storage]
path = "{storage}"
[index]
enabled = {"true" if index else "false"}
[webhooks]
github_secret = "{GITHUB_SECRET}"
[[modules]]
namespace = "demo"
name = "hello"
system = "null"
repository = "{repository}"
{rule}
""")
    return path


def readyz(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def wait_for(check: Any, timeout: float, what: str) -> float:
    """Poll `check()` until true; the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s: {what}")


def redis_state(url: str) -> str:
    return readyz(url)["shared"]["redis"]


def start_replicas(
    tmp_path: Path, redis: RedisServer, repository: str, count: int = 3, **options: Any
) -> list[GitregProcess]:
    replicas = []
    for i in range(count):
        config = write_config(tmp_path, f"replica{i}", repository, **options)
        replicas.append(GitregProcess("--config", str(config), env={"TEST_REDIS_URL": redis.url}).start())
    for replica in replicas:
        wait_for(lambda r=replica: redis_state(r.url) == "up", 10, f"{replica.url} connected to redis")
    return replicas


def stop_all(replicas: list[GitregProcess]) -> None:
    for replica in replicas:
        replica.stop()


def public_repo(tmp_path: Path) -> GitRepo:
    r = GitRepo(tmp_path / "repos", "public")
    r.commit({"main.tf": "# module\n"})
    r.tag("v1.0.0")
    return r


def versions(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/v1/modules/{ADDRESS}/versions", timeout=10) as resp:
        return [v["version"] for v in json.loads(resp.read())["modules"][0]["versions"]]


def download_location(url: str, version: str = "1.0.0") -> str:
    with urllib.request.urlopen(f"{url}/v1/modules/{ADDRESS}/{version}/download", timeout=10) as resp:
        return resp.headers["X-Terraform-Get"]


def github_webhook(url: str, repository: str) -> None:
    body = json.dumps(pointed_at(fixture("github-push-tag.json"), repository)).encode()
    request = urllib.request.Request(url + "/webhooks/github", data=body, headers=github_headers(body), method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200, resp.read()


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.fixture
def git_server(tmp_path: Path):
    (tmp_path / "repos").mkdir(exist_ok=True)
    with GitHttpServer(tmp_path / "repos") as server:
        yield server


# --- one upstream call for all replicas ------------------------------------------------------------------


async def test_300_cold_requests_across_three_replicas_cause_one_upstream_ref_advertisement(
    tmp_path, redis_server, git_server
):
    public_repo(tmp_path)
    replicas = start_replicas(tmp_path, redis_server, git_server.url("public.git"))
    try:
        assert git_server.ref_advertisements() == 0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def get(url: str) -> tuple[int, Any]:
                async with session.get(f"{url}/v1/modules/{ADDRESS}/versions") as resp:
                    return resp.status, await resp.json()

            answers = await asyncio.gather(*(get(replicas[i % 3].url) for i in range(300)))
        assert {status for status, _ in answers} == {200}
        assert all([v["version"] for v in body["modules"][0]["versions"]] == ["1.0.0"] for _, body in answers)
        # One ref listing in all (each replica then reads its .gitreg.toml by object name, #35: no listing).
        assert git_server.ref_listings("public.git") == 1
    finally:
        stop_all(replicas)


def test_a_webhook_to_one_replica_makes_the_others_serve_the_new_tag_at_once(tmp_path, redis_server, git_server):
    repo = public_repo(tmp_path)
    url = git_server.url("public.git")
    a, b, c = replicas = start_replicas(tmp_path, redis_server, url)
    try:
        for replica in replicas:
            assert versions(replica.url) == ["1.0.0"]  # cached for an hour on each
        before = git_server.ref_advertisements("public.git")
        repo.tag("v1.1.0")
        assert versions(b.url) == ["1.0.0"]
        github_webhook(a.url, url)
        # Within a second (measured in bench/replicas.py); generous here for a loaded CI machine.
        for replica in (b, c):
            wait_for(lambda r=replica: versions(r.url) == ["1.1.0", "1.0.0"], 3, f"{replica.url} lists v1.1.0")
        assert versions(a.url) == ["1.1.0", "1.0.0"]
        time.sleep(0.3)  # any straggling refresh would show now
        assert git_server.ref_advertisements("public.git") == before + 1  # one refresh for all three
    finally:
        stop_all(replicas)


# --- counts and pins agree -------------------------------------------------------------------------------


def test_download_counts_add_up_across_replicas_and_one_replica_indexes_for_all(tmp_path, redis_server, git_server):
    public_repo(tmp_path)
    replicas = start_replicas(tmp_path, redis_server, git_server.url("public.git"), index=True)
    try:
        for replica in replicas:
            replica.wait_indexed()
        roles = [readyz(r.url)["shared"]["index"] for r in replicas]
        assert sorted(roles) == ["follower", "follower", "leader"]
        # Only the leader built details (git on its mirror); the followers loaded its index.
        built = [len(list((tmp_path / f"storage-replica{i}" / "details").glob("*.json"))) for i in range(3)]
        assert sorted(built) == [0, 0, 1], built
        for replica, count in zip(replicas, (2, 3, 4), strict=True):
            for _ in range(count):
                download_location(replica.url)

        def counted(url: str) -> int:
            with urllib.request.urlopen(f"{url}/v1/modules/demo/hello", timeout=5) as resp:
                return json.loads(resp.read())["modules"][0]["downloads"]

        for replica in replicas:
            wait_for(lambda r=replica: counted(r.url) == 9, 10, f"{replica.url} counts 9 downloads")
    finally:
        stop_all(replicas)


def latest_listed(url: str) -> str:
    """The version the index lists for the module (the list answers from the index alone)."""
    with urllib.request.urlopen(f"{url}/v1/modules/demo", timeout=10) as resp:
        return json.loads(resp.read())["modules"][0]["version"]


def test_when_the_leader_stops_a_follower_index_process_takes_over_from_the_index_it_was_given(
    tmp_path, redis_server, git_server
):
    repo = public_repo(tmp_path)
    url = git_server.url("public.git")
    replicas = start_replicas(tmp_path, redis_server, url, count=2, index=True)
    try:
        for replica in replicas:
            replica.wait_indexed()
        [leader] = [r for r in replicas if readyz(r.url)["shared"]["index"] == "leader"]
        [follower] = [r for r in replicas if r is not leader]
        # The follower's index process built nothing, but keeps the leader's index on its disk.
        storage = tmp_path / f"storage-replica{replicas.index(follower)}"
        index_file = storage / "index.json"
        wait_for(lambda: index_file.exists() and ADDRESS in index_file.read_text(), 10, "the follower's index.json")
        assert list((storage / "details").glob("*.json")) == []

        leader.stop()
        wait_for(lambda: readyz(follower.url)["shared"]["index"] == "leader", 20, "the follower takes the lease")
        repo.tag("v1.1.0")
        github_webhook(follower.url, url)
        # Only an index process told that its replica leads builds: the new tag is listed.
        wait_for(lambda: latest_listed(follower.url) == "1.1.0", 10, "1.1.0 listed by the new leader")
    finally:
        stop_all(replicas)


def test_a_moved_tag_is_pinned_to_the_same_commit_on_every_replica(tmp_path, redis_server, git_server):
    repo = public_repo(tmp_path)
    first = repo.head()
    url = git_server.url("public.git")
    a, b, c = replicas = start_replicas(tmp_path, redis_server, url, rule='ref = "commit"\ndownload = "git"')
    try:
        assert download_location(a.url).endswith(f"?ref={first}")  # a pins v1.0.0 at its commit
        repo.commit({"main.tf": "# moved\n"})
        moved = repo.tag("v1.0.0")  # force-moved
        assert moved != first
        github_webhook(a.url, url)
        for replica in (b, c):
            # b and c never served v1.0.0; they see it at the new commit, and still serve the first.
            wait_for(
                lambda r=replica: download_location(r.url).endswith(f"?ref={first}") and b"moved" in _log_text(r),
                5,
                f"{replica.url} noticed the move",
            )
        assert {download_location(r.url) for r in replicas} == {download_location(a.url)}
    finally:
        stop_all(replicas)


def test_the_first_served_commit_is_the_same_on_every_replica_whatever_redis_lost(tmp_path, redis_server, git_server):
    repo = public_repo(tmp_path)
    first = repo.head()
    url = git_server.url("public.git")
    a, b = replicas = start_replicas(tmp_path, redis_server, url, count=2, rule='ref = "commit"\ndownload = "git"')
    try:
        assert download_location(a.url).endswith(f"?ref={first}")  # a pins v1.0.0 (disk and Redis)
        redis_server.kill()  # ...which restarts empty (no persistence), and meanwhile the tag moves
        wait_for(lambda: redis_state(b.url) == "down", 5, "b reports redis down")
        repo.commit({"main.tf": "# moved\n"})
        moved = repo.tag("v1.0.0")
        # b never served v1.0.0 and Redis is gone: b pins the tag where it is now, later than a did.
        assert download_location(b.url).endswith(f"?ref={moved}")
        redis_server.start()
        for replica in replicas:
            wait_for(lambda r=replica: redis_state(r.url) == "up", 10, f"{replica.url} reconnected")
        # Both publish their pins again; the earlier one (a's) wins on both, and stays after a restart.
        wait_for(lambda: download_location(b.url).endswith(f"?ref={first}"), 5, "b serves the earlier pin")
        assert download_location(a.url).endswith(f"?ref={first}")
        b.stop()
        b.start()
        assert download_location(b.url).endswith(f"?ref={first}")
    finally:
        stop_all(replicas)


def _log_text(replica: GitregProcess) -> bytes:
    return "".join(replica.log).encode()


# --- Redis is an optimisation, not a dependency ----------------------------------------------------------


def test_redis_killed_under_load_fails_no_request_and_invalidations_flow_again_when_it_returns(
    tmp_path, redis_server, git_server
):
    repo = public_repo(tmp_path)
    url = git_server.url("public.git")
    a, b, c = replicas = start_replicas(tmp_path, redis_server, url, ttl=0.5)
    failures: list[str] = []
    done = 0
    stop = False

    def load(replica: GitregProcess) -> None:
        nonlocal done
        while not stop:
            for path in (f"/v1/modules/{ADDRESS}/versions", f"/v1/modules/{ADDRESS}/1.0.0/download"):
                try:
                    with urllib.request.urlopen(replica.url + path, timeout=10) as resp:
                        resp.read()
                    done += 1
                except Exception as e:  # noqa: BLE001 - every failure is what this test counts
                    failures.append(f"{replica.url}{path}: {e}")

    import threading

    threads = [threading.Thread(target=load, args=(r,)) for r in replicas for _ in range(2)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.5)
        redis_server.kill()
        for replica in replicas:
            wait_for(lambda r=replica: redis_state(r.url) == "down", 5, f"{replica.url} reports redis down")
        time.sleep(1.5)  # short TTL: cold refreshes happen while Redis is gone
        assert metric(a.url, "gitreg_redis_up") == 0
        stop = True
        for t in threads:
            t.join(30)
        assert done > 50
        assert failures == []

        redis_server.start()
        for replica in replicas:
            wait_for(lambda r=replica: redis_state(r.url) == "up", 10, f"{replica.url} reconnected")
        assert metric(a.url, "gitreg_redis_up") == 1
    finally:
        stop = True
        for t in threads:
            t.join(30)
        stop_all(replicas)

    # With a long TTL now, only an invalidation can show a new tag on b and c.
    replicas = start_replicas(tmp_path, redis_server, url)
    try:
        a, b, c = replicas
        for replica in replicas:
            assert versions(replica.url) == ["1.0.0"]
        redis_server.kill()
        for replica in replicas:
            wait_for(lambda r=replica: redis_state(r.url) == "down", 5, f"{replica.url} reports redis down")
        redis_server.start()
        for replica in replicas:
            wait_for(lambda r=replica: redis_state(r.url) == "up", 10, f"{replica.url} reconnected")
        repo.tag("v1.2.0")
        github_webhook(a.url, url)
        for replica in (b, c):
            wait_for(lambda r=replica: versions(r.url) == ["1.2.0", "1.0.0"], 3, f"{replica.url} lists v1.2.0")
    finally:
        stop_all(replicas)


def test_a_replica_starts_and_serves_without_redis_and_joins_when_it_comes_up(tmp_path, git_server):
    public_repo(tmp_path)
    redis = RedisServer(tmp_path / "redis")  # not started
    config = write_config(tmp_path, "alone", git_server.url("public.git"))
    with GitregProcess("--config", str(config), env={"TEST_REDIS_URL": redis.url}) as replica:
        state = readyz(replica.url)
        assert state["status"] == "ready" and state["shared"]["redis"] == "down"
        assert versions(replica.url) == ["1.0.0"]
        redis.start()
        try:
            wait_for(lambda: redis_state(replica.url) == "up", 10, "connected once redis started")
        finally:
            redis.stop()


def test_an_index_built_before_redis_came_up_reaches_the_replicas_that_join_later(tmp_path, git_server):
    # The first replica indexes alone (Redis down), then connects and takes the lease: the index it
    # already has must reach a replica started afterwards, though nothing changes to write it again.
    public_repo(tmp_path)
    redis = RedisServer(tmp_path / "redis")  # not started
    first = GitregProcess(
        "--config",
        str(write_config(tmp_path, "first", git_server.url("public.git"), index=True)),
        env={"TEST_REDIS_URL": redis.url},
    ).start()
    later = None
    try:
        first.wait_indexed()
        wait_for(lambda: (tmp_path / "storage-first" / "index.json").exists(), 10, "the index written")
        redis.start()
        wait_for(
            lambda: readyz(first.url)["shared"]["index"] == "leader" and redis_state(first.url) == "up", 10, "leader"
        )
        later = GitregProcess(
            "--config",
            str(write_config(tmp_path, "later", git_server.url("public.git"), index=True)),
            env={"TEST_REDIS_URL": redis.url},
        ).start()
        wait_for(lambda: redis_state(later.url) == "up", 10, "the later replica connected")
        assert readyz(later.url)["shared"]["index"] == "follower"
        later.wait_indexed(timeout=10)
        assert readyz(later.url)["index"]["modules"] == 1
    finally:
        stop_all([r for r in (first, later) if r is not None])
        redis.stop()


# --- several workers on one port -------------------------------------------------------------------------


def test_two_workers_answer_on_one_port_and_a_webhook_reaches_both(tmp_path, redis_server, git_server):
    repo = public_repo(tmp_path)
    url = git_server.url("public.git")
    config = write_config(tmp_path, "workers", url)
    server = GitregProcess("--config", str(config), "--workers", "2", env={"TEST_REDIS_URL": redis_server.url}).start()
    try:
        pids: set[int] = set()
        wait_for(lambda: pids.add(readyz(server.url)["pid"]) or len(pids) == 2, 10, "both workers answered /readyz")
        assert server.proc is not None and server.proc.pid not in pids
        for _ in range(10):
            wait_for(lambda: redis_state(server.url) == "up", 10, "workers connected")
        for _ in range(30):  # new connections: both workers cache v1.0.0 (for an hour)
            assert versions(server.url) == ["1.0.0"]
        repo.tag("v1.1.0")
        github_webhook(server.url, url)
        # Every one of 30 requests on new connections (so, on both workers) lists the new tag.
        wait_for(
            lambda: all(versions(server.url) == ["1.1.0", "1.0.0"] for _ in range(30)), 3, "the new tag on every worker"
        )
        assert server.stop() == 0  # SIGTERM to the parent: forwarded, and it exits when they have
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        server.stop()


def stored_bytes(root: Path) -> int:
    """Bytes of every mirror and archive under `root`, the workers' directories included."""
    return sum(
        f.stat().st_size for f in root.rglob("*") if f.is_file() and ("mirrors" in f.parts or "archives" in f.parts)
    )


def test_workers_on_one_storage_path_build_archives_without_races_and_within_the_bound(
    tmp_path, redis_server, git_server
):
    import os
    import random
    import threading

    repo = GitRepo(tmp_path / "repos", "public")
    for i in range(6):  # each version its own 200 KB of incompressible text: archives to evict
        repo.commit({"main.tf": f"# v{i}\n", "blob.txt": os.urandom(100_000).hex()})
        repo.tag(f"v1.{i}.0")
    max_bytes = 3_000_000
    config = write_config(tmp_path, "workers", git_server.url("public.git"), rule='download = "archive"')
    config.write_text(config.read_text().replace("[storage]\n", f"[storage]\nmax_bytes = {max_bytes}\n"))
    server = GitregProcess("--config", str(config), "--workers", "2", env={"TEST_REDIS_URL": redis_server.url}).start()
    failures: list[str] = []
    answered = 0

    def load(seed: int) -> None:
        nonlocal answered
        order = [f"1.{i}.0" for i in range(6)] * 3
        random.Random(seed).shuffle(order)
        for version in order:
            path = f"/v1/modules/{ADDRESS}/{version}/archive.tar.gz"
            try:
                with urllib.request.urlopen(server.url + path, timeout=30) as resp:
                    resp.read()
                answered += 1
            except Exception as e:  # noqa: BLE001 - every failure is what this test counts
                failures.append(f"{path}: {e}")

    try:
        threads = [threading.Thread(target=load, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        assert answered == 8 * 18
        storage = tmp_path / "storage-workers"
        assert (storage / "workers" / "1" / "mirrors").is_dir()  # worker 1 keeps its own files
        assert stored_bytes(storage) <= max_bytes
    finally:
        server.stop()


def test_several_workers_with_the_memory_backend_refuse_to_start(tmp_path):
    config = write_config(tmp_path, "memory", "https://git.example.com/x.git", backend="memory")
    result = run_gitreg("serve", "--config", str(config), "--workers", "2")
    assert result.returncode == 2
    assert 'needs [cache] backend = "redis"' in result.stderr


# --- configuration, check and secrets --------------------------------------------------------------------


def test_check_says_when_redis_does_not_answer_without_showing_its_password(tmp_path):
    redis = RedisServer(tmp_path / "redis")  # nothing listens on its port
    config = write_config(tmp_path, "check", "https://git.example.com/x.git")
    result = run_gitreg(
        "check", "--config", str(config), env={"TEST_REDIS_URL": f"redis://:pa55-w0rd-9d1c@127.0.0.1:{redis.port}/0"}
    )
    assert result.returncode == 1, result.stderr
    assert "cache.redis_url: redis at redis://:***@127.0.0.1" in result.stderr
    assert "pa55-w0rd-9d1c" not in result.stdout + result.stderr


def test_check_says_redis_answers(tmp_path, redis_server):
    config = write_config(tmp_path, "check", "https://git.example.com/x.git")
    result = run_gitreg("check", "--config", str(config), env={"TEST_REDIS_URL": redis_server.url})
    assert result.returncode == 0, result.stderr
    assert f"redis: {redis_server.url} answers" in result.stdout


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://127.0.0.1:6379", "must start with redis://, rediss:// (TLS) or unix://"),
        ("redis://:hunter2-secret@127.0.0.1:99999/0", "is not a valid URL"),
        ("redis://127.0.0.1:6379/zero", "the path must be a database number"),
    ],
)
def test_a_malformed_redis_url_is_a_config_error(tmp_path, url, fragment):
    config = write_config(tmp_path, "bad", "https://git.example.com/x.git")
    result = run_gitreg("check", "--config", str(config), env={"TEST_REDIS_URL": url})
    assert result.returncode == 2
    assert "cache.redis_url:" in result.stderr and fragment in result.stderr
    assert "hunter2-secret" not in result.stderr


def test_the_redis_password_never_appears_in_logs_metrics_or_readiness(tmp_path, git_server):
    password = "r3dis-pa55word-71fe"
    redis = RedisServer(tmp_path / "redis", password=password).start()
    public_repo(tmp_path)
    try:
        config = write_config(tmp_path, "secret", git_server.url("public.git"))
        wrong = redis.url.replace(password, password + "-wrong")
        with GitregProcess("--config", str(config), "--log-level", "debug", env={"TEST_REDIS_URL": wrong}) as bad:
            assert redis_state(bad.url) == "down"  # refused: serves alone
            assert versions(bad.url) == ["1.0.0"]
            shown = json.dumps(readyz(bad.url))
        with GitregProcess("--config", str(config), "--log-level", "debug", env={"TEST_REDIS_URL": redis.url}) as good:
            wait_for(lambda: redis_state(good.url) == "up", 10, "connected with the password")
            assert versions(good.url) == ["1.0.0"]
            with urllib.request.urlopen(good.url + "/metrics", timeout=5) as resp:
                metrics = resp.read().decode()
            shown += json.dumps(readyz(good.url))
        logs = "".join(bad.log + good.log)
        assert "redis://:***@127.0.0.1" in logs  # the URL is logged, masked
        for text in (logs, metrics, shown):
            assert password not in text
    finally:
        redis.stop()


def test_values_planted_in_redis_that_gitreg_never_writes_are_ignored_and_redis_stays_up(
    tmp_path, redis_server, git_server
):
    import hashlib

    import redis

    public_repo(tmp_path)
    url = git_server.url("public.git")
    client = redis.Redis.from_url(redis_server.url)
    # A tag list whose commit is not a commit id (an option for git, say), and counts that are not counts.
    planted = json.dumps({"px": 3_600_000, "tags": {"v9.9.9": "--upload-pack=touch /tmp/pwned"}})
    client.set("gitreg:tags:" + hashlib.sha256(url.encode()).hexdigest()[:40], planted, px=3_600_000)
    client.hset("gitreg:downloads", mapping={ADDRESS: "many", "demo/other/null": "-5"})
    [a] = start_replicas(tmp_path, redis_server, url, count=1)
    try:
        assert versions(a.url) == ["1.0.0"]  # from git, not the planted list
        time.sleep(2.5)  # the counts are read every 2 s: a bad one used to mark Redis down
        assert redis_state(a.url) == "up"
        assert metric(a.url, "gitreg_redis_up") == 1
        assert "download counts that are not counts" in "".join(a.log)
    finally:
        a.stop()


def test_values_planted_in_redis_are_counted_in_metrics(tmp_path, redis_server, git_server):
    import hashlib

    import redis

    public_repo(tmp_path)
    url = git_server.url("public.git")
    client = redis.Redis.from_url(redis_server.url)
    planted = json.dumps({"px": 3_600_000, "tags": {"v9.9.9": "not-a-commit"}})
    client.set("gitreg:tags:" + hashlib.sha256(url.encode()).hexdigest()[:40], planted, px=3_600_000)
    client.hset("gitreg:downloads", mapping={ADDRESS: "many"})
    [a] = start_replicas(tmp_path, redis_server, url, count=1)
    try:
        assert versions(a.url) == ["1.0.0"]  # the planted tag list: read, ignored, counted
        wait_for(lambda: metric(a.url, "gitreg_redis_bad_values_total") >= 2, 10, "the tag list and the count counted")
    finally:
        a.stop()


def test_a_replica_stopped_in_the_middle_of_a_git_call_releases_its_lock_for_the_others(
    tmp_path, redis_server, git_server
):
    import threading

    import redis

    public_repo(tmp_path)
    url = git_server.url("public.git")
    client = redis.Redis.from_url(redis_server.url)
    # a's git call hangs while it holds the lock, longer than the shutdown's grace for in-flight
    # requests (10 s): the call is stopped by the shutdown, not ended by its own timeout (which
    # would rightly share "timed out" with the others for [cache] error_retry_seconds).
    [a] = start_replicas(tmp_path, redis_server, url, count=1, git_timeout=40)
    git_server.mode, git_server.delay = "slow", 60
    asking = threading.Thread(target=lambda: _swallow(lambda: versions(a.url)), daemon=True)
    asking.start()
    wait_for(lambda: list(client.scan_iter("gitreg:lock:*")) != [], 10, "a holding the shared lock")
    a.stop()
    # Released at shutdown: the others do not wait for it to expire ([git] timeout_seconds + 5 s).
    assert list(client.scan_iter("gitreg:lock:*")) == []
    git_server.mode = "ok"
    [b] = start_replicas(tmp_path, redis_server, url, count=1)
    try:
        started = time.monotonic()
        assert versions(b.url) == ["1.0.0"]
        assert time.monotonic() - started < 5
    finally:
        stop_all([b])


def _swallow(call: Any) -> None:
    # The request of a replica being stopped may fail any way.
    with contextlib.suppress(Exception):
        call()
