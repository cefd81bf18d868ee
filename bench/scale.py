"""Benchmark 3, scale: repositories with 10, 1,000 and 10,000 tags, and a config of 10,000 modules.

    python bench/scale.py [--rounds 5] [--quick]

Part 1. Per tag count: the cold (first) versions request on a repository gitreg has not
cached (a fresh copy each round, via a wildcard rule over file://), the warm versions request
(median of 30 after it), and a bare `git ls-remote --tags` of the same repository, in one run.
While the cold request runs, another connection asks /healthz every few milliseconds: its
slowest answer is how long the cold request kept the event loop from answering anyone else.
The tags are written into packed-refs directly (10,000 `git tag` calls would take minutes).

Part 2. gitreg start-up (process start until /healthz answers), resident memory after start-up
and a warm versions request for the last module, with a config of 10,000 explicit modules,
next to the same with a 1-module config (the baseline), interleaved, in one run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from _common import copy_repo, machine, median, proc_stats, start_gitreg, tagged_repo, workdir, write_config

SIZES = (10, 1_000, 10_000)
MODULES = 10_000
WARM_REQUESTS = 30


class Client:
    """Sequential requests on one keep-alive connection (the client adds as little as it can)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)

    def get(self, path: str) -> tuple[float, int, bytes]:
        started = time.perf_counter()
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        body = resp.read()
        return time.perf_counter() - started, resp.status, body

    def close(self) -> None:
        self.conn.close()


def check(status: int, body: bytes, versions: int) -> None:
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {body[:300]!r}")
    found = len(json.loads(body)["modules"][0]["versions"])
    if found != versions:
        raise RuntimeError(f"{found} versions listed instead of {versions}")


class Prober:
    """/healthz on its own connection, over and over while a cold request runs: the slowest
    answer shows how long the event loop was busy with that request (answering no one else)."""

    def __init__(self, url: str) -> None:
        self.client = Client(url)
        self.running = threading.Event()
        self.done = threading.Event()
        self.latencies: list[float] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.done.is_set():
            if not self.running.wait(0.05):
                continue
            seconds, _, _ = self.client.get("/healthz")
            self.latencies.append(seconds)
            time.sleep(0.002)

    def start(self) -> None:
        self.latencies = []
        self.running.set()
        time.sleep(0.02)  # a few probes before the cold request

    def stop(self) -> float:
        self.running.clear()
        time.sleep(0.06)
        return max(self.latencies, default=0.0)

    def close(self) -> None:
        self.done.set()


def tags_part(base: Path, rounds: int) -> dict[int, dict[str, list[float]]]:
    repos = base / "repos"
    repos.mkdir()
    templates = {n: tagged_repo(base / f"template-{n}.git", n) for n in SIZES}
    config = write_config(
        base / "tags.toml",
        (
            f'[cache]\nttl_seconds = 3600\n[storage]\npath = "{base / "state-tags"}"\n'
            f'[[modules]]\nnamespace = "scale"\nrepository = "{repos.as_uri()}/{{name}}.git"\n'
        ),
    )
    server = start_gitreg(["--config", str(config)], base / "gitreg-tags.log")
    from _common import bare_ls_remote

    results: dict[int, dict[str, list[float]]] = {
        n: {"cold": [], "warm": [], "bare": [], "bytes": [], "stall": []} for n in SIZES
    }
    client = Client(server.url)
    prober = Prober(server.url)
    try:
        copy_repo(templates[10], repos / "warmup.git")
        client.get("/v1/modules/scale/warmup/null/versions")
        for i in range(rounds):
            for n in SIZES:  # interleaved
                name = f"t{n}r{i}"
                copy_repo(templates[n], repos / f"{name}.git")
                path = f"/v1/modules/scale/{name}/null/versions"
                prober.start()
                seconds, status, body = client.get(path)
                r = results[n]
                r["stall"].append(prober.stop())
                check(status, body, n)
                r["cold"].append(seconds)
                r["bytes"].append(len(body))
                for _ in range(WARM_REQUESTS):
                    seconds, status, body = client.get(path)
                    check(status, body, n)
                    r["warm"].append(seconds)
                r["bare"].append(bare_ls_remote((repos / f"{name}.git").as_uri()))
    finally:
        prober.close()
        client.close()
        server.stop()
    return results


def modules_part(base: Path, rounds: int) -> dict[str, dict[str, list[float]]]:
    repo = tagged_repo(base / "modules-repo.git", 10)
    configs = {}
    for label, count in (("1 module (baseline)", 1), (f"{MODULES:,} modules", MODULES)):
        rules = "".join(
            f'[[modules]]\nnamespace = "acme"\nname = "mod{i}"\nsystem = "aws"\nrepository = "{repo.as_uri()}"\n'
            for i in range(count)
        )
        configs[label] = (
            write_config(
                base / f"modules-{count}.toml",
                (f'[cache]\nttl_seconds = 3600\n[storage]\npath = "{base / f"state-{count}"}"\n{rules}'),
            ),
            count,
        )
    results: dict[str, dict[str, list[float]]] = {label: {"startup": [], "rss": [], "warm": []} for label in configs}
    for i in range(rounds):
        for label, (config, count) in configs.items():  # interleaved
            server = start_gitreg(["--config", str(config)], base / f"gitreg-modules-{count}-{i}.log")
            try:
                r = results[label]
                r["startup"].append(server.startup_seconds)
                r["rss"].append(proc_stats(server.proc.pid)["rss_kib"] / 1024)
                client = Client(server.url)
                path = f"/v1/modules/acme/mod{count - 1}/aws/versions"
                client.get(path)
                for _ in range(WARM_REQUESTS):
                    seconds, status, body = client.get(path)
                    check(status, body, 10)
                    r["warm"].append(seconds)
                client.close()
            finally:
                server.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="fresh repositories per size, and start-ups per config")
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 2

    base = workdir("scale")
    tags = tags_part(base, args.rounds)
    modules = modules_part(base, args.rounds)

    print(
        f"# scale: python bench/scale.py{' --quick' if args.quick else ''}: {args.rounds} round(s), medians; "
        f"repositories over file:// on local disk; warm = median of {WARM_REQUESTS} requests per round"
    )
    print(f"# machine: {machine()}")
    print(
        "| tags | versions body | cold versions request ms | bare `git ls-remote --tags` ms | cold / bare "
        "| slowest /healthz during the cold request ms | warm versions request ms |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, r in tags.items():
        cold, warm, bare = median(r["cold"]) * 1000, median(r["warm"]) * 1000, median(r["bare"]) * 1000
        print(
            f"| {n:,} | {median(r['bytes']) / 1024:,.1f} KiB | {cold:.1f} | {bare:.1f} | {cold / bare:.2f} | "
            f"{median(r['stall']) * 1000:.1f} | {warm:.2f} |"
        )
    print()
    print("| config | start-up to /healthz s | RSS after start-up MiB | warm versions request (last module) ms |")
    print("| --- | ---: | ---: | ---: |")
    baseline = next(iter(modules.values()))
    for label, r in modules.items():
        startup, rss, warm = median(r["startup"]), median(r["rss"]), median(r["warm"]) * 1000
        ratio = (
            ""
            if r is baseline
            else (f" (x{startup / median(baseline['startup']):.2f})", f" (+{rss - median(baseline['rss']):.1f})")
        )
        print(
            f"| {label} | {startup:.2f}{ratio[0] if ratio else ''} | {rss:.1f}{ratio[1] if ratio else ''} "
            f"| {warm:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
