"""Benchmark: several replicas on one Redis, next to the memory backend, in one run.

    python bench/replicas.py [--seconds 20] [--repos 20] [--ttl 2] [--rounds 3] [--quick]

1. Upstream git calls per minute under the same load (wrk on every replica, every repository
   asked for continuously, [cache] ttl_seconds short so entries keep expiring), with 1 and with
   3 replicas, memory vs Redis backend. Target: with Redis, 3 replicas cost what 1 costs.
2. Webhook propagation: from the webhook's answer on replica A until B and C list the new tag
   (medians of several trials). Target: under a second.
3. Warm-path requests/s of one replica with the Redis backend next to the memory backend,
   interleaved rounds, medians. Target: at least 0.95 (Redis adds no round trip to a warm request).
4. `--workers 2` next to `--workers 1` (Redis backend), warm path, wrk on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import (
    ROOT,
    GitHttpChild,
    copy_repo,
    github_signature,
    machine,
    median,
    pinning,
    start_gitreg,
    tagged_repo,
    workdir,
    write_config,
    wrk,
)
from tests.support.redis import RedisServer

SECRET = "bench-webhook-secret-0123456789"


def config_text(
    base: Path, name: str, backend: str, redis_url: str, repository: str, ttl: float, explicit: str | None = None
) -> Path:
    rule = (
        f'namespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{explicit}"\n'
        if explicit
        else f'namespace = "bench"\nrepository = "{repository}"\n'
    )
    return write_config(
        base / f"{name}.toml",
        f"""
[cache]
backend = "{backend}"
{f'redis_url = "{redis_url}"' if backend == "redis" else ""}
ttl_seconds = {ttl}
[git]
protocols = ["http", "file"]
[storage]
path = "{base / ("state-" + name)}"
[index]
enabled = false
[webhooks]
github_secret = "{SECRET}"
[[modules]]
{rule}
""",
    )


def upstream_calls(
    base: Path, git: GitHttpChild, redis: RedisServer, backend: str, replicas: int, seconds: int, repos: int, ttl: float
) -> float:
    """Ref advertisements per minute while wrk asks every replica for every repository's versions."""
    script = base / "rotate.lua"
    script.write_text(
        "local i = 0\nrequest = function()\n  i = i + 1\n"
        f'  return wrk.format("GET", "/v1/modules/bench/m" .. (i % {repos}) .. "/null/versions")\nend\n'
    )
    servers = []
    try:
        for r in range(replicas):
            config = config_text(
                base, f"calls-{backend}-{replicas}-{r}", backend, redis.url, git.url("{name}.git"), ttl
            )
            servers.append(
                start_gitreg(
                    ["--config", str(config), "--log-level", "warning"], base / f"calls-{backend}-{replicas}-{r}.log"
                )
            )
        if backend == "redis":
            for s in servers:
                _wait_redis(s.url)
        before = git.ref_advertisements()
        import subprocess

        procs = [
            subprocess.Popen(
                ["wrk", "-t1", "-c4", f"-d{seconds}s", "-s", str(script), s.url],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for s in servers
        ]
        for p in procs:
            out = p.communicate(timeout=seconds + 60)[0]
            if "Requests/sec" not in out:
                raise RuntimeError(out)
        return (git.ref_advertisements() - before) * 60 / seconds
    finally:
        for s in servers:
            s.stop()


def _readyz(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
        body: dict[str, Any] = json.loads(resp.read())
        return body


def _wait_redis(url: str) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        if _readyz(url)["shared"].get("redis") == "up":
            return
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not connect to redis")


def _versions(url: str) -> list[str]:
    with urllib.request.urlopen(url + "/v1/modules/demo/hello/null/versions", timeout=10) as resp:
        return [v["version"] for v in json.loads(resp.read())["modules"][0]["versions"]]


def webhook_propagation(base: Path, git: GitHttpChild, redis: RedisServer, trials: int) -> list[float]:
    """Seconds from the webhook's answer on A until B and C both list the new tag."""
    repo = base / "repos" / "hook.git"
    url = git.url("hook.git")
    servers = []
    times = []
    try:
        for r in range(3):
            config = config_text(base, f"hook-{r}", "redis", redis.url, "", 3600, explicit=url)
            servers.append(start_gitreg(["--config", str(config), "--log-level", "warning"], base / f"hook-{r}.log"))
        for s in servers:
            _wait_redis(s.url)
            _versions(s.url)
        payload = {"ref": "refs/tags/x", "repository": {"clone_url": url}}
        import subprocess

        head = subprocess.run(
            ["git", "rev-parse", "refs/heads/main"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        for trial in range(trials):
            tag = f"v9.{trial}.0"
            subprocess.run(["git", "update-ref", f"refs/tags/{tag}", head], cwd=repo, check=True)
            body = json.dumps({**payload, "ref": f"refs/tags/{tag}"}).encode()
            request = urllib.request.Request(
                servers[0].url + "/webhooks/github",
                data=body,
                method="POST",
                headers={
                    "X-GitHub-Event": "push",
                    "Content-Type": "application/json",
                    "X-Hub-Signature-256": github_signature(SECRET, body),
                },
            )
            urllib.request.urlopen(request, timeout=10).read()
            started = time.perf_counter()
            waiting = set(servers[1:])
            while waiting:
                for s in list(waiting):
                    if f"9.{trial}.0" in _versions(s.url):
                        waiting.discard(s)
                if time.perf_counter() - started > 10:
                    raise RuntimeError("the new tag did not arrive within 10 s")
            times.append(time.perf_counter() - started)
    finally:
        for s in servers:
            s.stop()
    return times


def warm(
    base: Path,
    redis: RedisServer,
    url: str,
    seconds: int,
    rounds: int,
    pin: tuple[str, str, int] | None,
) -> dict[str, list[dict[str, float]]]:
    """Warm versions requests/s: memory vs Redis (one process each, both running, rounds interleaved so
    drift hits both alike), then --workers 1 vs 2 (Redis; the server may use both cores, wrk unpinned)."""
    server_cpu, wrk_cpus, wrk_threads = pin if pin else (None, None, 2)
    memory = config_text(base, "warm-memory", "memory", redis.url, "", 3600, explicit=url)
    shared = config_text(base, "warm-redis", "redis", redis.url, "", 3600, explicit=url)
    path = "/v1/modules/demo/hello/null/versions"
    results: dict[str, list[dict[str, float]]] = {}

    def measure(setups: dict[str, list[str]], cpus: str | None, wrk_on: str | None, threads: int) -> None:
        servers = {}
        try:
            for name, args in setups.items():
                servers[name] = start_gitreg(
                    [*args, "--log-level", "warning"],
                    base / f"warm-{name.replace(' ', '_').replace(',', '')}.log",
                    cpus=cpus,
                )
                if "redis" in name:
                    _wait_redis(servers[name].url)
                for _ in range(50):  # every worker warm
                    _versions(servers[name].url)
            for _ in range(rounds):
                for name, server in servers.items():
                    results.setdefault(name, []).append(
                        wrk(server.url + path, seconds, 32, threads=threads, cpus=wrk_on)
                    )
        finally:
            for server in servers.values():
                server.stop()

    measure(
        {"memory backend": ["--config", str(memory)], "redis backend": ["--config", str(shared)]},
        server_cpu,
        wrk_cpus,
        wrk_threads,
    )
    measure(
        {
            "redis, --workers 1": ["--config", str(shared), "--workers", "1"],
            "redis, --workers 2": ["--config", str(shared), "--workers", "2"],
        },
        None,
        None,
        2,
    )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=20, help="load per upstream-calls measurement")
    parser.add_argument("--warm-seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repos", type=int, default=20)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="short runs, one round")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warm_seconds, args.rounds, args.trials = 6, 3, 1, 3
    base = workdir("replicas")
    repos = base / "repos"
    repos.mkdir()
    template = tagged_repo(repos / "m0.git", 20)
    for i in range(1, args.repos):
        copy_repo(template, repos / f"m{i}.git")
    copy_repo(template, repos / "hook.git")
    redis = RedisServer(base / "redis").start()
    git = GitHttpChild(repos)
    pin = pinning()
    try:
        calls = {}
        for backend in ("memory", "redis"):
            for replicas in (1, 3):
                calls[(backend, replicas)] = upstream_calls(
                    base, git, redis, backend, replicas, args.seconds, args.repos, args.ttl
                )
        propagation = webhook_propagation(base, git, redis, args.trials)
        rates = warm(base, redis, git.url("hook.git"), args.warm_seconds, args.rounds, pin)
    finally:
        git.stop()
        redis.stop()

    print(
        f"# replicas: python bench/replicas.py{' --quick' if args.quick else ''}: {args.repos} repositories, "
        f"ttl_seconds = {args.ttl:g}, wrk -t1 -c4 -d{args.seconds}s on every replica at once (upstream calls); "
        f"warm path wrk -c32 -d{args.warm_seconds}s, {args.rounds} round(s), medians"
    )
    print(f"# machine: {machine()}; redis-server {_redis_version()}")
    print("\n| backend | replicas | upstream git calls per minute | per replica-minute |")
    print("| --- | ---: | ---: | ---: |")
    for (backend, replicas), per_minute in calls.items():
        print(f"| {backend} | {replicas} | {per_minute:,.0f} | {per_minute / replicas:,.0f} |")
    ideal = args.repos * 60 / args.ttl
    print(f"(one call per repository per TTL: {ideal:,.0f} per minute)")
    ratio = calls[("redis", 3)] / calls[("redis", 1)] if calls[("redis", 1)] else 0
    print(f"target: redis, 3 replicas cost what 1 costs: {ratio:.2f}x -> {'met' if ratio <= 1.15 else 'MISSED'}")
    print(
        f"\nwebhook to replica A -> B and C list the new tag: median {median(propagation) * 1000:.0f} ms, "
        f"max {max(propagation) * 1000:.0f} ms over {len(propagation)} trials -> "
        f"{'met' if max(propagation) < 1.0 else 'MISSED'} (target under 1 s)"
    )
    print("\n| warm versions | requests/s | vs memory | p50 ms | p99 ms | errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    base_rps = median([r["rps"] for r in rates["memory backend"]])
    one = median([r["rps"] for r in rates["redis, --workers 1"]])
    for name, rs in rates.items():
        rps = median([r["rps"] for r in rs])
        versus = f"{rps / base_rps:.2f}" if not name.startswith("redis, --") else f"{rps / one:.2f} vs --workers 1"
        print(
            f"| {name} | {rps:,.0f} | {versus} | {median([r['p50_ms'] for r in rs]):.2f} | "
            f"{median([r['p99_ms'] for r in rs]):.2f} | {sum(r['errors'] + r['non2xx'] for r in rs)} |"
        )
    warm_ratio = median([r["rps"] for r in rates["redis backend"]]) / base_rps
    print(
        f"target: warm path with redis >= 0.95 of memory: {warm_ratio:.2f} -> "
        f"{'met' if warm_ratio >= 0.95 else 'MISSED'}"
    )
    return 0


def _redis_version() -> str:
    import subprocess

    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    return next((w.split("=")[1] for w in out.split() if w.startswith("v=")), "?")


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(main())
