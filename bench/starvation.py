"""Starvation of git work, before and after the bounded fair git pool (issue 11, item 4).

    python bench/starvation.py [--old-ref acc5a80] [--rounds 3]

Runs the same three scenarios against two real `python -m gitreg serve` processes in one
invocation: the code at `--old-ref` (extracted with `git archive` into a temporary
directory) and this checkout. The Git hosts are real `git http-backend` servers over smart
HTTP in processes of their own (bench/_common.GitHttpChild), told apart by host name
(`localhost` and `127.0.0.1`), as two Git hosts would be:

- a "slow" host answers every request after 0.5 s (a busy hosted Git service);
- a "stalling" host answers after 60 s: git hangs until `[git] timeout_seconds` (10 s here);
- a healthy host answers at once.

Scenarios, each on a fresh gitreg process:

1. abandoned flood: 400 requests for unknown names in one wildcard namespace on the slow
   host, each client giving up after 0.3 s (in waves of 50); then one cold versions request
   of a real module in another namespace on the same host (a token scoped to one namespace
   against every other one). Counted: git calls the host saw, the victim's latency, and how
   long git kept working after the clients had gone.
2. stalling host: 20 requests against the stalling host, each client giving up after 1 s;
   then a cold versions request of a module on the healthy host. Its latency, next to the
   same kind of request on the idle server.
3. background burst: 40 modules cached on the slow host expire with refresh_ahead on; a
   request for each is answered at once and queues a background refresh; then a cold
   versions request (what `terraform init` asks) of another module on the same host.

Latencies are medians over `--rounds` rounds (fresh names each round).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp

from _common import (
    ROOT,
    GitHttpChild,
    copy_repo,
    machine,
    median,
    start_gitreg,
    tagged_repo,
    workdir,
    write_config,
)

FLOOD = 400
WAVE = 50
STALLED = 20
BURST = 40
SLOW_DELAY = 0.5
TIMEOUT = 10


def old_tree(ref: str) -> Path:
    """The gitreg sources at `ref`, extracted with `git archive` (no worktree of the repository is touched)."""
    dest = Path(tempfile.mkdtemp(prefix="gitreg-bench-old-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def config_text(
    base: Path, tag: str, slow: GitHttpChild, stalling: GitHttpChild, healthy: GitHttpChild, refresh_ahead: bool
) -> str:
    stall_url = stalling.base_url.replace("127.0.0.1", "localhost", 1)
    cache = "ttl_seconds = 1\nrefresh_ahead = true\n" if refresh_ahead else "ttl_seconds = 3600\n"
    rules = {
        "scoped": f"{slow.base_url}/{{name}}.git",  # the flooded namespace
        "other": f"{slow.base_url}/{{name}}.git",  # another namespace, same host
        "bg": f"{slow.base_url}/{{name}}.git",
        "stall": f"{stall_url}/{{name}}.git",
        "fast": f"{healthy.base_url}/{{name}}.git",
    }
    text = (
        f'[git]\nprotocols = ["http"]\ntimeout_seconds = {TIMEOUT}\n[cache]\n{cache}'
        f'[storage]\npath = "{base / ("state-" + tag)}"\n'
    )
    for namespace, url in rules.items():
        text += f'[[modules]]\nnamespace = "{namespace}"\nrepository = "{url}"\n'
    return text


async def timed_get(session: aiohttp.ClientSession, url: str, timeout: float = 120) -> tuple[float, int]:
    """Seconds to the answer and its status (0 when the client gave up)."""
    started = time.perf_counter()
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            await resp.read()
            return time.perf_counter() - started, resp.status
    except (TimeoutError, aiohttp.ClientError):
        return time.perf_counter() - started, 0


async def until_quiet(git: GitHttpChild, since: float | None = None, quiet: float = 3.0, limit: float = 120.0) -> float:
    """Wait until `git` saw no new ref advertisement for `quiet` seconds; seconds from `since`
    (default: now) to the last one seen (0 when none came after `since`)."""
    started = time.perf_counter()
    since = started if since is None else since
    last, last_change = git.ref_advertisements(), started
    while time.perf_counter() - started < limit:
        await asyncio.sleep(0.2)
        now = git.ref_advertisements()
        if now != last:
            last, last_change = now, time.perf_counter()
        elif time.perf_counter() - last_change >= quiet:
            break
    return max(0.0, last_change - since)


async def abandoned_flood(url: str, slow: GitHttpChild, repos: Path, template: Path, tag: str) -> dict[str, float]:
    victim = f"victim-{tag}"
    copy_repo(template, repos / "slow" / f"{victim}.git")
    before = slow.ref_advertisements()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for wave in range(FLOOD // WAVE):
            await asyncio.gather(
                *(
                    timed_get(session, f"{url}/v1/modules/scoped/typo-{tag}-{wave}-{i}/null/versions", 0.3)
                    for i in range(WAVE)
                )
            )
        gone = time.perf_counter()
        latency, status = await timed_get(session, f"{url}/v1/modules/other/{victim}/null/versions")
        busy = await until_quiet(slow, since=gone)
    return {
        "calls": slow.ref_advertisements() - before - 1,
        "victim": latency,
        "victim_ok": status == 200,
        "busy": busy,
    }


async def stalling_host(url: str, healthy: GitHttpChild, repos: Path, template: Path, tag: str) -> dict[str, float]:
    idle, after = f"idle-{tag}", f"after-{tag}"
    for name in (idle, after):
        copy_repo(template, repos / "healthy" / f"{name}.git")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        baseline, _ = await timed_get(session, f"{url}/v1/modules/fast/{idle}/null/versions")
        await asyncio.gather(
            *(timed_get(session, f"{url}/v1/modules/stall/s-{tag}-{i}/null/versions", 1.0) for i in range(STALLED))
        )
        latency, status = await timed_get(session, f"{url}/v1/modules/fast/{after}/null/versions")
    return {"baseline": baseline, "victim": latency, "victim_ok": status == 200}


async def background_burst(url: str, slow: GitHttpChild, repos: Path, template: Path, tag: str) -> dict[str, float]:
    names = [f"bg-{tag}-{i}" for i in range(BURST)]
    for name in names:
        copy_repo(template, repos / "slow" / f"{name}.git")
    victim = f"init-{tag}"
    copy_repo(template, repos / "slow" / f"{victim}.git")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(timed_get(session, f"{url}/v1/modules/bg/{n}/null/versions") for n in names))
        await asyncio.sleep(1.5)  # past ttl_seconds: every list is expired, served at once and refreshed behind
        await until_quiet(slow, quiet=1.0)
        answers = await asyncio.gather(*(timed_get(session, f"{url}/v1/modules/bg/{n}/null/versions") for n in names))
        latency, status = await timed_get(session, f"{url}/v1/modules/other/{victim}/null/versions")
        await until_quiet(slow, quiet=1.5)
    return {"stale_answer": median([a[0] for a in answers]), "victim": latency, "victim_ok": status == 200}


async def run_version(
    tag: str, root: Path, base: Path, gits: dict[str, GitHttpChild], repos: Path, template: Path, rounds: int
) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {"flood": [], "stall": [], "burst": []}
    for r in range(rounds):
        for scenario, refresh_ahead in (("flood", False), ("stall", False), ("burst", True)):
            name = f"{tag}-{scenario}-{r}"
            config = write_config(
                base / f"{name}.toml",
                config_text(base, name, gits["slow"], gits["stalling"], gits["healthy"], refresh_ahead),
            )
            server = start_gitreg(["--config", str(config)], base / f"{name}.log", root=root)
            try:
                if scenario == "flood":
                    found = await abandoned_flood(server.url, gits["slow"], repos, template, name)
                elif scenario == "stall":
                    found = await stalling_host(server.url, gits["healthy"], repos, template, name)
                else:
                    found = await background_burst(server.url, gits["slow"], repos, template, name)
            finally:
                server.stop()
            results[scenario].append(found)
            print(f"# {name}: {found}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-ref", default="acc5a80", help="the commit to compare with (default acc5a80)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per scenario and version (default 3)")
    args = parser.parse_args()

    base = workdir("starvation")
    repos = base / "repos"
    for host in ("slow", "stalling", "healthy"):
        (repos / host).mkdir(parents=True)
    template = tagged_repo(base / "template.git", 20)
    gits = {
        "slow": GitHttpChild(repos / "slow", "slow", SLOW_DELAY),
        "stalling": GitHttpChild(repos / "stalling", "slow", 60),
        "healthy": GitHttpChild(repos / "healthy"),
    }
    old = old_tree(args.old_ref)
    try:
        results = {
            "old": asyncio.run(run_version("old", old, base, gits, repos, template, args.rounds)),
            "new": asyncio.run(run_version("new", ROOT, base, gits, repos, template, args.rounds)),
        }
    finally:
        for git in gits.values():
            git.stop()

    def m(version: str, scenario: str, key: str) -> float:
        return median([float(r[key]) for r in results[version][scenario]])

    def ok(version: str, scenario: str) -> str:
        runs = results[version][scenario]
        return f"{sum(bool(r['victim_ok']) for r in runs)}/{len(runs)}"

    print(
        f"# starvation: python bench/starvation.py --old-ref {args.old_ref} --rounds {args.rounds}; "
        f"[git] timeout_seconds = {TIMEOUT}, other settings default (8 slots); slow host {SLOW_DELAY} s per "
        "request, stalling host 60 s"
    )
    print(f"# machine: {machine()}")
    print(f"| scenario | measure (median of {args.rounds}) | old ({args.old_ref}) | new (this tree) |")
    print("| --- | --- | ---: | ---: |")
    rows = [
        ("1. 400 abandoned requests, unknown names, slow host", "git calls made for them", "flood", "calls", "{:.0f}"),
        ("", "seconds until git went quiet after the clients left (victim included)", "flood", "busy", "{:.1f}"),
        ("", "cold versions, other namespace, same host: s", "flood", "victim", "{:.2f}"),
        (
            "2. 20 abandoned requests, stalling host",
            "cold versions, other host, idle server: s",
            "stall",
            "baseline",
            "{:.3f}",
        ),
        ("", "cold versions, other host, right after: s", "stall", "victim", "{:.3f}"),
        (
            "3. 40 refresh-ahead refreshes queued, slow host",
            "expired list answered in: s",
            "burst",
            "stale_answer",
            "{:.3f}",
        ),
        ("", "cold versions (terraform init), same host: s", "burst", "victim", "{:.2f}"),
    ]
    for label, measure, scenario, key, fmt in rows:
        print(
            f"| {label} | {measure} | {fmt.format(m('old', scenario, key))} | {fmt.format(m('new', scenario, key))} |"
        )
    print(
        f"victim answered 200: flood old {ok('old', 'flood')} new {ok('new', 'flood')}; stall old {ok('old', 'stall')} "
        f"new {ok('new', 'stall')}; burst old {ok('old', 'burst')} new {ok('new', 'burst')}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
