"""Benchmark: a big, long or hostile org listing, and the serving loop meanwhile (issue 22).

A real `gitreg serve` (`[index] enabled = false`: only the serving process, whose loop is what a
`terraform init` waits on; `--index`: the default, the index process beside it, told of every
changed address) lists one GitHub org from the fake API of the tests
(tests/support/forges.py), run in a child process of its own so that its JSON work does not
share this process's interpreter with the probe. A loop-lag probe asks `/healthz` every 10 ms
and reports the slowest answer and the 99th percentile (a blocked loop shows as a slow answer).

- `page`: one API page of 29 MB (100 repositories padded with 290 KB of extra fields each).
- `pages`: a first listing of 300 pages (30,000 repositories, 100 a page).
- `restart`: a start with an orgs.json of 230,000 modules and their owners (the API down): the seconds until the
  port answers, then the probe while the file loads.
- `webhooks`: the same listing loaded (the API up), then 10 signed GitHub `repository` webhooks, one
  a second, each for a listed repository the API answers 404 for (so each removes a module); probed
  until 10 s after the last is answered (orgs.json is written 5 s after a webhook).

    python bench/org_hostile.py [--root PATH] [--only page,pages,restart,webhooks] [--restart-modules N]
        [--pages N] [--index] [--redis URL]

`--root` runs the gitreg of another checkout (e.g. `git worktree add /tmp/before <commit>`) to
measure before/after. Target: no `/healthz` answer over 50 ms; the port open within 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from multiprocessing import Process, Queue
from pathlib import Path
from typing import Any

import aiohttp

from _common import ROOT, Server, github_signature, machine, pct, rss_kib, start_gitreg, workdir, write_config

GROUP, NAMESPACE, API_TOKEN = "acme-infra", "acme", "bench-api-token-4567"
WEBHOOK_SECRET = "bench-webhook-secret-0123456789"
PAGE_BYTES = 29 * 1024 * 1024
CLONE_BASE = "http://127.0.0.1:9/"  # nothing listens there: the index process's ls-remote fails at once


class _NoGit:
    """What FakeForge asks of its git server: a clone URL (none is ever cloned here)."""

    def url(self, repo: str) -> str:
        return CLONE_BASE + repo


def _serve_fake(repos: int, padding: int, down: bool, out: Queue[str]) -> None:
    """In a child process: a fake GitHub API listing `repos` repositories, until killed."""
    from tests.support.forges import FakeForge

    async def run() -> None:
        fake = FakeForge("github", _NoGit(), GROUP, token=API_TOKEN)  # type: ignore[arg-type]  # only .url()
        for i in range(repos):
            fake.add(f"terraform-aws-m{i:06d}", description=f"module {i}")
        fake.item_padding = padding
        fake.mode = "down" if down else "ok"
        await fake.start()
        out.put(fake.base_url)
        await asyncio.Event().wait()

    asyncio.run(run())


def start_fake(repos: int, padding: int = 0, down: bool = False) -> tuple[Process, str]:
    out: Queue[str] = Queue()
    proc = Process(target=_serve_fake, args=(repos, padding, down, out), daemon=True)
    proc.start()
    return proc, out.get(timeout=300)


REDIS: list[str] = []  # --redis: the URL of a Redis every run shares ([cache] backend = "redis")


def config_text(api_url: str, storage: Path, root: Path, index: bool) -> str:
    # 300 pages are 30,000 repositories: past the default max_repositories where there is one.
    # ([[orgs]] moved from config/parse.py to config/orgs.py: an older checkout has only the first.)
    parsers = [root / "gitreg/config/parse.py", root / "gitreg/config/orgs.py"]
    has_limit = any("OrgConfig.max_repositories" in p.read_text() for p in parsers if p.exists())
    limit = "max_repositories = 1000000" if has_limit else ""
    return f"""
[index]
enabled = {"true" if index else "false"}

[storage]
path = "{storage}"

[git]
protocols = ["http", "https"]

[[orgs]]
provider = "github"
api_url = "{api_url}"
group = "{GROUP}"
namespace = "{NAMESPACE}"
token = "{API_TOKEN}"
refresh_seconds = 3600
{limit}

[webhooks]
github_secret = "{WEBHOOK_SECRET}"
""" + "".join(f'\n[cache]\nbackend = "redis"\nredis_url = "{url}"\n' for url in REDIS)


async def probe(url: str, until: Any, settle: float = 1.0, limit: float = 600.0) -> dict[str, float]:
    """Ask `url` every 10 ms until `until()` is true (then `settle` s more); answer times in ms."""
    times: list[float] = []
    done_at: float | None = None
    deadline = time.perf_counter() + limit
    async with aiohttp.ClientSession() as session:
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            async with session.get(url) as resp:
                await resp.read()
            times.append((time.perf_counter() - t) * 1000)
            if done_at is None and until():
                done_at = time.perf_counter()
            if done_at is not None and time.perf_counter() - done_at >= settle:
                break
            await asyncio.sleep(0.01)
    return {"n": len(times), "p50": pct(times, 50), "p99": pct(times, 99), "max": max(times)}


def logged(server: Server, *needles: str) -> Any:
    return lambda: any(n in server.log.read_text() for n in needles)


def report(name: str, figures: dict[str, float], extra: str = "") -> None:
    print(
        f"  {name:<34} /healthz: {figures['n']:>5.0f} answers, p50 {figures['p50']:7.1f} ms, "
        f"p99 {figures['p99']:7.1f} ms, max {figures['max']:8.1f} ms{extra}"
    )


def flush_redis() -> None:
    """Each run starts from an empty Redis (the owners of the last run would be adopted, not published)."""
    import redis

    for url in REDIS:
        redis.Redis.from_url(url).flushdb()


def scenario_listing(root: Path, name: str, repos: int, padding: int, index: bool) -> None:
    flush_redis()
    fake, api_url = start_fake(repos, padding)
    work = workdir(f"org-hostile-{name.split()[0]}-")
    try:
        server = start_gitreg(
            ["--config", str(write_config(work / "c.toml", config_text(api_url, work, root, index)))],
            work / "log",
            root=root,
        )
        rss_before = rss_kib(server.proc.pid)
        try:
            done = logged(server, "repositories,", "listing failed")
            figures = asyncio.run(probe(server.url + "/healthz", done, 10.0 if index else 1.0))
            rss_after = rss_kib(server.proc.pid)
            outcome = [line for line in server.log.read_text().splitlines() if "org github" in line][-1:]
            if REDIS:
                import redis

                owners = redis.Redis.from_url(REDIS[0]).hlen("gitreg:owners")
                outcome.append(f"redis holds {owners} owners")
        finally:
            server.stop()
    finally:
        fake.kill()
    report(name, figures, f", RSS {rss_before / 1024:.0f} -> {rss_after / 1024:.0f} MiB")
    for line in outcome:
        print(f"    gitreg: ...{line[-150:]}")


def write_orgs_json(path: Path, api_url: str, modules: int) -> None:
    """An orgs.json of `modules` repositories of the org, listed just now (so not due at start), each
    module's owner with them (as gitreg writes it)."""

    def record(i: int) -> str:
        return json.dumps(
            {
                "id": str(i),
                "name": f"terraform-aws-m{i:06d}",
                "full_name": f"{GROUP}/terraform-aws-m{i:06d}",
                "https_url": f"{CLONE_BASE}m{i:06d}.git",
                "ssh_url": "",
                "web_url": f"https://github.example/{GROUP}/terraform-aws-m{i:06d}",
                "description": f"module {i}",
                "topics": ["terraform"],
                "archived": False,
                "pushed_at": "2026-01-01T00:00:00Z",
                "pushed_throttle": 0,
            }
        )

    def owner(i: int) -> str:
        org = {"provider": "github", "api_url": api_url, "group": GROUP}
        since = {"full_name": f"{GROUP}/terraform-aws-m{i:06d}", "since": 1.7e9}
        return json.dumps({"address": f"{NAMESPACE}/m{i:06d}/aws", **org, **since})

    head = json.dumps({"provider": "github", "api_url": api_url, "group": GROUP, "enumerated_at": time.time()})
    with path.open("w") as f:
        f.write('{"format": 1, "owners": [' + ",".join(owner(i) for i in range(modules)) + "], ")
        f.write('"orgs": [' + head[:-1] + ', "repositories": [')
        f.write(",".join(record(i) for i in range(modules)))
        f.write("]}]}")


def scenario_restart(root: Path, modules: int, index: bool) -> None:
    fake, api_url = start_fake(0, down=True)
    work = workdir("org-hostile-restart-")
    try:
        write_orgs_json(work / "orgs.json", api_url, modules)
        size = (work / "orgs.json").stat().st_size
        server = start_gitreg(
            ["--config", str(write_config(work / "c.toml", config_text(api_url, work, root, index)))],
            work / "log",
            root=root,
        )
        try:
            # With the index process, the change is told to it after the load: 10 s more to cover that.
            settle = 10.0 if index else 1.0
            figures = asyncio.run(probe(server.url + "/healthz", logged(server, "org listings loaded"), settle))
            rss = rss_kib(server.proc.pid)
        finally:
            server.stop()
    finally:
        fake.kill()
    took = server.startup_seconds
    print(f"  restart, orgs.json of {modules:,} modules ({size / 2**20:.0f} MiB): port open after {took:.2f} s")
    report("while it loads", figures, f", RSS then {rss / 1024:.0f} MiB")


async def send_webhooks(url: str, count: int) -> list[tuple[int, float]]:
    """`count` signed `repository` events (edited) for listed repositories, one a second; their statuses
    and answer times (s)."""
    statuses = []
    async with aiohttp.ClientSession() as session:
        for i in range(count):
            await asyncio.sleep(1.0)
            name = f"terraform-aws-m{i * 1000:06d}"
            repo = {
                "id": i * 1000,
                "name": name,
                "full_name": f"{GROUP}/{name}",
                "clone_url": f"{CLONE_BASE}{name}.git",
            }
            body = json.dumps({"action": "edited", "repository": {**repo, "html_url": "https://github.example/"}})
            headers = {
                "X-GitHub-Event": "repository",
                "X-GitHub-Delivery": f"bench-{time.time()}-{i}",
                "X-Hub-Signature-256": github_signature(WEBHOOK_SECRET, body.encode()),
                "Content-Type": "application/json",
            }
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
                statuses.append((resp.status, time.perf_counter() - started))
    return statuses


def scenario_webhooks(root: Path, modules: int, index: bool, count: int = 10) -> None:
    fake, api_url = start_fake(0)  # up: it answers 404 for each repository a webhook names
    work = workdir("org-hostile-webhooks-")
    try:
        write_orgs_json(work / "orgs.json", api_url, modules)
        server = start_gitreg(
            ["--config", str(write_config(work / "c.toml", config_text(api_url, work, root, index)))],
            work / "log",
            root=root,
        )
        try:
            loaded = logged(server, "org listings loaded")
            while not loaded():
                time.sleep(0.2)
            time.sleep(15.0 if index else 3.0)  # the load's own work (and telling the index process) over

            async def run() -> tuple[dict[str, float], list[tuple[int, float]]]:
                sent = asyncio.ensure_future(send_webhooks(server.url + "/webhooks/github", count))
                figures = await probe(server.url + "/healthz", sent.done, 10.0)
                return figures, await sent

            figures, statuses = asyncio.run(run())
            applied = server.log.read_text().count("does not list it here")
        finally:
            server.stop()
    finally:
        fake.kill()
    took = sorted(seconds for _, seconds in statuses)
    codes = sorted({status for status, _ in statuses})
    answered = f"answered in {took[len(took) // 2]:.2f} s (median), {took[-1]:.2f} s (max)"
    report(f"{count} webhooks, {modules:,} modules", figures, f", statuses {codes}, {applied} applied, {answered}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree whose gitreg runs")
    parser.add_argument("--only", default="page,pages,restart")
    parser.add_argument("--restart-modules", type=int, default=230_000)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--index", action="store_true", help="the index process on (the default of [index])")
    parser.add_argument("--redis", help="a Redis URL: [cache] backend = redis (flushed before each run)")
    args = parser.parse_args()
    REDIS.extend([args.redis] if args.redis else [])
    only, ix = set(args.only.split(",")), args.index
    print(f"org listings against the serving loop ({machine()}); gitreg from {args.root}, index {('off', 'on')[ix]}")
    if "page" in only:
        scenario_listing(args.root, "one API page of 29 MB", 100, PAGE_BYTES // 100, ix)
    if "pages" in only:
        scenario_listing(args.root, f"first listing of {args.pages} pages", args.pages * 100, 0, ix)
    if "restart" in only:
        scenario_restart(args.root, 0, ix)  # the baseline: the same start with an empty listing
        scenario_restart(args.root, args.restart_modules, ix)
    if "webhooks" in only:
        scenario_webhooks(args.root, args.restart_modules, ix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
