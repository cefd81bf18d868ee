""" "Used by" at the size of a real org: the first scan against plain shallow fetches, a second pass, the loop's lag.

    python bench/usage_scale.py [--repos 2000] [--concurrency 4]

One run, everything on 127.0.0.1, with bench/org_scale.py's set-up: `--repos` real bare
repositories built by its `build_repos` (one `git fast-import`, hard-linked), each with a
`main.tf` that also holds a `module` block calling `registry.example.com/acme/vpc/aws` (so every
repository's file is parsed: the worst case), served over real smart HTTP (`git http-backend`,
Basic auth) in a process of its own, and listed by the fake GitHub API of the tests.

- baseline: for every repository, `git init --bare` and `git fetch --depth=1` of its HEAD (its
  default branch), `--concurrency` at a time (the scan's own: half the git pool, at most 4),
  with the same credential header, against the same server;
- the first scan: gitreg's own `Usage` (gitreg/usage), as the serving process runs it (uvloop;
  the pass planned on the loop, the reads in `python -m gitreg.usage.child`), over the
  enumerated org; wall time, and the max lag of a probe on the same event loop (a 5 ms sleep,
  measured late by how much) while it runs, with the loop thread's own CPU between wake-ups;
- the same probe for IDLE_SECONDS with nothing running in this process (the machine's own lag), and
  during the baseline (whose git runs from threads of this process);
- a second pass with nothing changed, and a pass after a "restart" (a new store loading
  usage.json): the git requests each made, counted at the git server.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import org_scale
from _common import GitHttpChild, machine, workdir
from gitreg.config.model import Config
from gitreg.config.parse import parse_config
from gitreg.core.loop import run_main
from gitreg.git.pool import GitPool
from gitreg.git.remote import GitAdapter
from gitreg.git.runner import GitRunner
from gitreg.orgs.probe import enumerate_orgs
from gitreg.orgs.service import OrgCatalog
from gitreg.usage.service import Usage
from org_scale import API_TOKEN, GIT_PASSWORD, GIT_USER, GROUP, NAMESPACE, build_repos, credential_env
from tests.support.forges import FakeForge

HOST = "registry.example.com"
CONSUMER = b'\nmodule "vpc" {\n  source  = "registry.example.com/acme/vpc/aws"\n  version = "~> 1.2"\n}\n'
PROBE_SECONDS = 0.005
IDLE_SECONDS = 20.0
TARGET_RATIO, TARGET_LAG_MS = 1.5, 50.0


def baseline(urls: list[str], env: dict[str, str], concurrency: int, scratch: Path) -> float:
    """Seconds for a plain shallow fetch of every URL's default branch, `concurrency` at a time."""
    scratch.mkdir(parents=True, exist_ok=True)

    def one(job: tuple[int, str]) -> None:
        n, url = job
        path = scratch / f"r{n}"
        subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True, capture_output=True, env=env)
        fetch = [
            "git",
            "fetch",
            "--quiet",
            "--depth=1",
            "--no-tags",
            "--no-write-fetch-head",
            url,
            "+HEAD:refs/heads/x",
        ]
        subprocess.run(fetch, cwd=path, check=True, capture_output=True, env=env)
        shutil.rmtree(path)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, enumerate(urls)))
    took = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return took


class LagProbe:
    """How late a short sleep on the event loop wakes up while it runs (the loop-lag probe)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        # The event loop thread's own CPU between two wake-ups, at most: what gitreg's code held the
        # loop for (on a loaded machine the lag above also counts time the process was not scheduled).
        self.busy = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def worst(self) -> float:
        return max(self.samples, default=0.0)

    @property
    def p99(self) -> float:
        return sorted(self.samples)[int(len(self.samples) * 0.99)] if self.samples else 0.0

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(PROBE_SECONDS)
            self.samples.append(max(0.0, loop.time() - before - PROBE_SECONDS))
            self.busy = max(self.busy, time.thread_time() - cpu)

    def __enter__(self) -> LagProbe:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


def config(storage: Path, api_url: str, git_base: str) -> Config:
    return parse_config(
        {
            "server": {"public_url": f"https://{HOST}"},
            "storage": {"path": str(storage)},
            "git": {"protocols": ["http"]},
            "usage": {"scan": True},
            "orgs": [
                {"provider": "github", "api_url": api_url, "group": GROUP, "namespace": NAMESPACE, "token": API_TOKEN}
            ],
            "credentials": [{"url": f"{git_base}/", "username": GIT_USER, "password": GIT_PASSWORD}],
        },
        {},
    )


async def scans(cfg: Config, storage: Path, git: GitHttpChild) -> dict[str, float]:
    """The first scan, a second pass, a pass after a restart: wall times, lag, git requests."""
    catalog = OrgCatalog(cfg, None)
    await enumerate_orgs(cfg, catalog)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="gitreg-home-") as home:
        pool = GitPool(cfg.git.max_concurrency, cfg.git.max_queue, cfg.git.max_per_host)
        adapter = GitAdapter(GitRunner(cfg.git, cfg.credentials, home))
        usage = Usage(cfg, catalog.listings, catalog.complete, pool, adapter, storage)
        for run in ("first", "second", "restart"):
            if run == "restart":  # a new process: what usage.json kept
                await usage.workers.close()
                usage = Usage(cfg, catalog.listings, catalog.complete, pool, adapter, storage)
                await usage.store.load()
            before = git.requests()
            with LagProbe() as lag:
                started = time.perf_counter()
                stats = await usage.refresh()
                out[f"{run}_seconds"] = time.perf_counter() - started
            out[f"{run}_lag_ms"] = lag.worst * 1000
            out[f"{run}_lag_p99_ms"] = lag.p99 * 1000
            out[f"{run}_busy_ms"] = lag.busy * 1000
            out[f"{run}_git_requests"] = git.requests() - before
            out[f"{run}_read"] = stats.read
            out[f"{run}_failed"] = stats.failed
            out[f"{run}_consumers"] = len(usage.consumers(f"{NAMESPACE}/vpc/aws"))
        out["concurrency"] = usage.scanner.concurrency
        await usage.workers.close()
        pool.shutdown()
    return out


def run(args: argparse.Namespace) -> None:
    work = workdir("gitreg-usage-scale-")
    repos_root = work / "repos"
    repos_root.mkdir(parents=True)
    org_scale.MAIN_TF = org_scale.MAIN_TF + CONSUMER  # every repository calls the registry: each is parsed
    started = time.perf_counter()
    names = build_repos(repos_root, args.repos, 1)
    print(f"built {args.repos} bare repositories in {time.perf_counter() - started:.1f} s")
    git = GitHttpChild(repos_root, username=GIT_USER, password=GIT_PASSWORD)
    fake = FakeForge("github", git, GROUP, token=API_TOKEN)  # type: ignore[arg-type]  # only .url() is used
    try:
        with fake.in_thread():
            for i, repo in enumerate(names):
                fake.add(repo, pushed=1700000000 + i)
            urls = [git.url(f"{repo}.git") for repo in names]
            env = credential_env(git.base_url)
            idle = run_main(idle_probe(IDLE_SECONDS))
            base, floor = run_main(probed_baseline(urls, env, args.concurrency, work / "baseline"))
            print(f"baseline: {len(urls)} shallow fetches of HEAD at concurrency {args.concurrency}: {base:.1f} s")
            cfg = config(work / "state", fake.api_url, git.base_url)
            found = run_main(scans(cfg, work / "state", git))
    finally:
        git.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(args, base, floor, found, idle)


async def probed_baseline(
    urls: list[str], env: dict[str, str], concurrency: int, scratch: Path
) -> tuple[float, LagProbe]:
    """The baseline, with the loop-lag probe running beside it: the machine's own lag, no gitreg work on the loop."""
    with LagProbe() as floor:
        took = await asyncio.get_running_loop().run_in_executor(None, baseline, urls, env, concurrency, scratch)
    return took, floor


async def idle_probe(seconds: float) -> LagProbe:
    """The loop-lag probe with nothing else in this process: the machine's own lag."""
    with LagProbe() as idle:
        await asyncio.sleep(seconds)
    return idle


def report(args: argparse.Namespace, base: float, floor: LagProbe, found: dict[str, float], idle: LagProbe) -> None:
    ratio = found["first_seconds"] / base
    print(f"\nmachine: {machine()}")
    print(f"repositories: {args.repos}; scan concurrency {found['concurrency']:.0f}")
    print("| pass | wall s | read | failed | consumers | git requests | loop lag max ms | p99 ms | loop CPU max ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(
        f"| idle ({IDLE_SECONDS:.0f} s, nothing running here) | | | | | "
        f"| {idle.worst * 1000:.1f} | {idle.p99 * 1000:.1f} | |"
    )
    print(
        f"| baseline (plain git) | {base:.2f} | | | | | {floor.worst * 1000:.1f} | {floor.p99 * 1000:.1f} "
        f"| {floor.busy * 1000:.1f} |"
    )
    for name in ("first", "second", "restart"):
        print(
            f"| {name} | {found[f'{name}_seconds']:.2f} | {found[f'{name}_read']:.0f} | {found[f'{name}_failed']:.0f} "
            f"| {found[f'{name}_consumers']:.0f} | {found[f'{name}_git_requests']:.0f} "
            f"| {found[f'{name}_lag_ms']:.1f} | {found[f'{name}_lag_p99_ms']:.1f} | {found[f'{name}_busy_ms']:.1f} |"
        )
    lag = max(found[f"{n}_lag_ms"] for n in ("first", "second", "restart"))
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"\nfirst scan / baseline: {ratio:.2f}x (target <= {TARGET_RATIO}x): {verdict}")
    unchanged = found["second_git_requests"] + found["restart_git_requests"]
    print(f"git requests with nothing changed: {unchanged:.0f} (target 0): {'met' if unchanged == 0 else 'MISSED'}")
    verdict = "met" if lag <= TARGET_LAG_MS else "MISSED"
    print(f"loop lag max while scanning: {lag:.1f} ms (target <= {TARGET_LAG_MS:.0f}): {verdict}; ", end="")
    print(f"the same probe during the baseline (no gitreg work): {floor.worst * 1000:.1f} ms")
    busy = max(found[f"{n}_busy_ms"] for n in ("first", "second", "restart"))
    print(f"the event loop's own CPU between two wake-ups while scanning, at most: {busy:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4, help="the baseline's (the scan's own: 4 by default)")
    run(parser.parse_args())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
