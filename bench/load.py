"""Benchmark 5 (issue 6), load: 1,000 concurrent connections on the warm path and, at the same
time, a stream of cold modules, for 60 s; then whether gitreg gives back what it took.

    python bench/load.py [--seconds 60] [--connections 1000] [--cold-workers 8] [--repeat-seconds 30] [--quick]

- Warm: wrk -t2 -c1000 over keep-alive connections, alternating the versions and download
  endpoints of a module whose tag list is cached (explicit rule, file:// repository).
- Cold: an aiohttp client with `--cold-workers` requests in flight, each for a module gitreg has
  never seen (a wildcard rule over real git smart HTTP; one repository per module, so every
  request is a cache miss and a `git ls-remote`).
- gitreg runs as shipped (`python -m gitreg serve`, access log on, to a file). The open-file
  limit is raised for this script and its children (resource.setrlimit).

Reported: requests, failed requests (socket errors + non-2xx; target zero), requests/s, p50
and p99 of each; and gitreg's RSS, open fds (/proc/PID/fd), threads, child processes, asyncio
tasks and running git processes (the last two from /metrics) before, right after, and 10 s
after the load, then after a second, warm-only load of `--repeat-seconds` (default 30): RSS
that grew per request would grow again there (flat = nothing leaks).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
import urllib.request

import aiohttp

from _common import (
    GitHttpChild,
    machine,
    median,
    pct,
    proc_stats,
    raise_nofile,
    start_gitreg,
    tagged_repo,
    workdir,
    write_config,
    wrk,
)

WARM_PATHS = ("/v1/modules/demo/hello/null/versions", "/v1/modules/demo/hello/null/0.0.19/download")
LUA = """-- alternate the warm endpoints
local paths = {%s}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i %% #paths) + 1])
end
""" % ", ".join(f'"{p}"' for p in WARM_PATHS)  # noqa: UP031 - the Lua braces stay literal


GAUGES = {"cached": "gitreg_cache_repositories", "tasks": "gitreg_event_loop_tasks", "git": "gitreg_git_processes"}


def gauges(url: str) -> dict[str, int]:
    """Cached repositories, asyncio tasks and running git processes, from /metrics (-1: absent)."""
    found = dict.fromkeys(GAUGES, -1)
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            for key, name in GAUGES.items():
                if line.startswith(name + " "):
                    found[key] = int(float(line.split()[1]))
    return found


class ColdClient:
    """`workers` requests in flight, each for a module never requested before, until stopped."""

    def __init__(self, url: str, names: list[str], workers: int) -> None:
        self.url, self.names, self.workers = url, names, workers
        self.latencies: list[float] = []
        self.failures: dict[str, int] = {}
        self.exhausted = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    async def _run(self) -> None:
        names = iter(self.names)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.workers), timeout=timeout
        ) as session:

            async def worker() -> None:
                while not self._stop.is_set():
                    name = next(names, None)
                    if name is None:
                        self.exhausted = True
                        return
                    started = time.perf_counter()
                    try:
                        async with session.get(f"{self.url}/v1/modules/cold/{name}/null/versions") as resp:
                            body = await resp.json()
                            ok = resp.status == 200 and len(body["modules"][0]["versions"]) == 20
                            reason = "ok" if ok else f"HTTP {resp.status}: {str(body)[:120]}"
                    except (TimeoutError, aiohttp.ClientError, ValueError, KeyError) as e:
                        reason = f"{type(e).__name__}: {str(e)[:120]}"
                    if reason == "ok":
                        self.latencies.append(time.perf_counter() - started)
                    else:
                        self.failures[reason] = self.failures.get(reason, 0) + 1

            await asyncio.gather(*(worker() for _ in range(self.workers)))


class Sampler:
    """proc_stats of a process every half second, until stopped: the peak of each, and RSS over time."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(0.5):
            try:
                self.samples.append((time.monotonic() - started, proc_stats(self.pid)))
            except (OSError, AttributeError):
                return

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return {k: max(s[k] for _, s in self.samples) for k in self.samples[0][1]} if self.samples else {}

    def rss_every(self, seconds: float) -> list[str]:
        shown, next_at = [], 0.0
        for at, s in self.samples:
            if at >= next_at:
                shown.append(f"{s['rss_kib'] / 1024:.0f}")
                next_at += seconds
        return shown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--cold-workers", type=int, default=8, help="cold requests in flight (default 8; 0: warm only)")
    parser.add_argument("--repeat-seconds", type=int, default=30, help="a 2nd, warm-only load (0: none)")
    parser.add_argument("--quick", action="store_true", help="10 s")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.repeat_seconds = 10, 5
    nofile = raise_nofile(args.connections * 2 + 4096)

    base = workdir("load")
    repos = base / "repos"
    repos.mkdir()
    warm_repo = tagged_repo(base / "warm.git", 20)
    template = tagged_repo(base / "cold-template.git", 20)
    # One repository per cold module: distinct URLs (so distinct cache entries, all cold) with
    # the template's content. Symlinks: thousands are made in a blink, and git follows them.
    names = [f"c{i}" for i in range(max(2000, args.seconds * 150))]
    for name in names:
        os.symlink(template, repos / f"{name}.git")
    git = GitHttpChild(repos)
    script = base / "warm.lua"
    script.write_text(LUA)
    config = write_config(
        base / "gitreg.toml",
        (
            f'[cache]\nttl_seconds = 3600\n[git]\nprotocols = ["http", "file"]\n[storage]\npath = "{base / "state"}"\n'
            f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{warm_repo.as_uri()}"\n'
            f'[[modules]]\nnamespace = "cold"\nrepository = "{git.base_url}/{{name}}.git"\n'
        ),
    )
    server = start_gitreg(["--config", str(config)], base / "gitreg.log")
    pid = server.proc.pid
    try:
        for path in WARM_PATHS:  # the warm module is cached before the load starts
            urllib.request.urlopen(server.url + path, timeout=30).read()
        stats = {"before": {**proc_stats(pid), **gauges(server.url)}}
        cold = ColdClient(server.url, names, args.cold_workers)
        sampler = Sampler(pid)
        if args.cold_workers:
            cold.start()
        warm = wrk(server.url + WARM_PATHS[0], args.seconds, args.connections, threads=2, script=script)
        if args.cold_workers:
            cold.stop()
        stats["during the load (peak)"] = {**sampler.stop(), **dict.fromkeys(GAUGES, -1)}
        stats["right after"] = {**proc_stats(pid), **gauges(server.url)}
        time.sleep(10)
        stats["10 s after"] = {**proc_stats(pid), **gauges(server.url)}
        repeat = None
        if args.repeat_seconds:
            # The same warm load again, no new modules: memory that grew per request would grow again.
            repeat = wrk(server.url + WARM_PATHS[0], args.repeat_seconds, args.connections, threads=2, script=script)
            time.sleep(10)
            stats[f"10 s after a 2nd warm-only load ({args.repeat_seconds} s)"] = {
                **proc_stats(pid),
                **gauges(server.url),
            }
        advertisements = git.ref_advertisements()
    finally:
        server.stop()
        git.stop()

    cold_ok = len(cold.latencies)
    cold_failed = sum(cold.failures.values())
    print(
        f"# load: python bench/load.py{' --quick' if args.quick else ''}: {args.seconds} s; wrk -t2 "
        f"-c{args.connections} alternating versions/download of a cached module, plus {args.cold_workers} cold "
        f"requests in flight (new module each, git smart HTTP); open-file limit {nofile}"
    )
    print(f"# machine: {machine()}")
    print("| traffic | requests | failed (socket errors + non-2xx) | requests/s | p50 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    kinds = ", ".join(
        f"{k} {warm[f'errors_{k}']}" for k in ("connect", "read", "write", "timeout") if warm.get(f"errors_{k}")
    )
    detail = f" ({kinds}; non-2xx {warm['non2xx']})" if kinds else ""
    print(
        f"| warm, {args.connections:,} connections (wrk) | {warm['requests']:,} | {warm['errors'] + warm['non2xx']}"
        f"{detail} | {warm['rps']:,.0f} | {warm['p50_ms']:.1f} | {warm['p99_ms']:.1f} |"
    )
    print(
        f"| cold modules, {args.cold_workers} in flight | {cold_ok + cold_failed:,} | {cold_failed} | "
        f"{(cold_ok + cold_failed) / args.seconds:,.1f} | {median(cold.latencies) * 1000:.1f} | "
        f"{pct(cold.latencies, 99) * 1000:.1f} |"
    )
    if repeat is not None:
        print(
            f"| warm again, {args.connections:,} connections, {args.repeat_seconds} s | {repeat['requests']:,} | "
            f"{repeat['errors'] + repeat['non2xx']} | {repeat['rps']:,.0f} | {repeat['p50_ms']:.1f} "
            f"| {repeat['p99_ms']:.1f} |"
        )
    for reason, count in sorted(cold.failures.items(), key=lambda kv: -kv[1])[:5]:
        print(f"cold failure x{count}: {reason}")
    if cold.exhausted:
        print(f"note: all {len(names)} cold modules were used before the end")
    print(f"upstream ref advertisements: {advertisements} for {cold_ok + cold_failed} cold requests")
    print()
    print(
        "| gitreg process | RSS MiB | open fds | threads | child processes | asyncio tasks | git processes "
        "| cached repositories |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for when, s in stats.items():
        shown = {k: (s[k] if s[k] >= 0 else "") for k in GAUGES}
        print(
            f"| {when} | {s['rss_kib'] / 1024:.1f} | {s['fds']} | {s['threads']} | {s['children']} "
            f"| {shown['tasks']} | {shown['git']} | {shown['cached']} |"
        )
    step = max(1, args.seconds // 10)
    print(f"RSS during the load, MiB, every {step} s: {' '.join(sampler.rss_every(step))}")
    failed = warm["errors"] + warm["non2xx"] + cold_failed + (repeat["errors"] + repeat["non2xx"] if repeat else 0)
    print(f"target zero failed requests: {failed} -> {'met' if failed == 0 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
