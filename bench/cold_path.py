"""Benchmark 2, the cold path: N concurrent versions requests for a repository gitreg has not
cached yet, against real git over smart HTTP, side by side with a bare `git ls-remote --tags`
of the same kind of repository through the same server, in one run.

    python bench/cold_path.py [--rounds 15] [--quick]

Every round uses a fresh repository (a wildcard rule maps `cold/<name>/<system>` to
`<server>/<name>.git`), so every round is cold. The git server counts ref advertisements per
repository: however many requests arrive together, gitreg must ask git once.

Targets: exactly 1 upstream ref advertisement per round for any N; median request latency
<= 1.2 x the bare `git ls-remote` median + 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from _common import (
    GitHttpChild,
    bare_ls_remote,
    copy_repo,
    machine,
    median,
    pct,
    start_gitreg,
    tagged_repo,
    workdir,
    write_config,
)

CONCURRENCY = (1, 10, 100)


async def burst(session: aiohttp.ClientSession, url: str, n: int) -> tuple[list[float], list[str]]:
    """N requests at once; each one's latency (s) and every problem seen."""
    problems: list[str] = []

    async def one() -> float:
        started = time.perf_counter()
        async with session.get(url) as resp:
            body = await resp.json()
        elapsed = time.perf_counter() - started
        if resp.status != 200:
            problems.append(f"HTTP {resp.status}: {body}")
        elif len(body["modules"][0]["versions"]) != 20:
            problems.append(f"{len(body['modules'][0]['versions'])} versions instead of 20")
        return elapsed

    return list(await asyncio.gather(*(one() for _ in range(n)))), problems


async def measure(
    gitreg_url: str, git: GitHttpChild, repos: Path, template: Path, rounds: int
) -> dict[int, dict[str, list[Any]]]:
    results: dict[int, dict[str, list[Any]]] = {
        n: {"latency": [], "ads": [], "bare": [], "problems": []} for n in CONCURRENCY
    }
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        # Open the connections first (keep-alive), so a burst measures gitreg, not TCP setup.
        await asyncio.gather(*(session.get(gitreg_url + "/healthz") for _ in range(max(CONCURRENCY))))
        warm = "warmup"
        copy_repo(template, repos / f"{warm}.git")
        await burst(session, f"{gitreg_url}/v1/modules/cold/{warm}/null/versions", 1)
        for i in range(rounds):
            for n in CONCURRENCY:  # interleaved, so drift on a shared machine hits every N alike
                name = f"n{n}r{i}"
                copy_repo(template, repos / f"{name}.git")
                latency, problems = await burst(session, f"{gitreg_url}/v1/modules/cold/{name}/null/versions", n)
                r = results[n]
                r["latency"] += latency
                r["problems"] += problems
                r["ads"].append(git.ref_advertisements(f"{name}.git"))
                bare = f"bare-n{n}r{i}"
                copy_repo(template, repos / f"{bare}.git")
                r["bare"].append(await asyncio.to_thread(bare_ls_remote, git.url(f"{bare}.git")))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="fresh repositories per N (default 15)")
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 2

    base = workdir("cold")
    repos = base / "repos"
    repos.mkdir()
    template = tagged_repo(base / "template.git", 20)
    git = GitHttpChild(repos)
    config = write_config(
        base / "gitreg.toml",
        (
            '[cache]\nttl_seconds = 3600\n[git]\nprotocols = ["http"]\n'
            f'[storage]\npath = "{base / "state"}"\n'
            f'[[modules]]\nnamespace = "cold"\nrepository = "{git.base_url}/{{name}}.git"\n'
        ),
    )
    server = start_gitreg(["--config", str(config)], base / "gitreg.log")
    try:
        results = asyncio.run(measure(server.url, git, repos, template, args.rounds))
    finally:
        server.stop()
        git.stop()

    print(
        f"# cold path: python bench/cold_path.py{' --quick' if args.quick else ''}: {args.rounds} fresh "
        "repositories per N (20 tags each), git smart HTTP on 127.0.0.1; gitreg as shipped (access log on)"
    )
    print(f"# machine: {machine()}")
    print(
        "| concurrent requests N | upstream ref advertisements per round | gitreg median ms | gitreg p90 ms "
        "| bare `git ls-remote --tags` median ms | gitreg / bare | budget 1.2 x bare + 5 ms | target |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    verdicts = []
    for n, r in results.items():
        g, b = median(r["latency"]) * 1000, median(r["bare"]) * 1000
        budget = 1.2 * b + 5
        ads_ok = all(a == 1 for a in r["ads"])
        ok = ads_ok and g <= budget and not r["problems"]
        verdicts.append(ok)
        ads = ", ".join(str(a) for a in r["ads"])
        print(
            f"| {n} | {ads} | {g:.1f} | {pct(r['latency'], 90) * 1000:.1f} | {b:.1f} | {g / b:.2f} | {budget:.1f} | "
            f"{'met' if ok else 'MISSED'} |"
        )
        for problem in sorted(set(r["problems"]))[:5]:
            print(f"problem at N={n}: {problem}")
    print(
        f"target (1 advertisement per round, gitreg <= 1.2 x bare + 5 ms) for every N: "
        f"{'met' if all(verdicts) else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
