"""Benchmark: module details of hostile and of normal repositories, and /healthz meanwhile.

A real gitreg process serves real bare repositories (file://). For each module, the first
details request is sent while a client asks `/healthz` every 20 ms; the benchmark reports how
long the details took and the slowest `/healthz` answer in the meantime (a frozen server
shows as a slow `/healthz`). The normal case is the test suite's realistic VPC module: the
details of N tags built one after the other (a build each: archive + parse), median, next to
the median of `GET .../versions` in the same run (the baseline).

    python bench/hostile_details.py [--tags 10] [--skip-slow]

Target: `/healthz` well under 1 s whatever is parsed; a normal build within a few ms of before.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp

from _common import GitRepo, machine, start_gitreg, workdir, write_config

MAX_TF_BYTES = 512 * 1024
# Files by path, as GitRepo.commit takes them (None would delete one).
HOSTILE: dict[str, dict[str, str | None]] = {
    "README: 80 KB of [": {"README.md": "[" * 80_000, "main.tf": 'variable "x" {}\n'},
    "README: 256 KB of pathological Markdown": {
        "README.md": ("[[a](" * 10_000 + "\n\n" + "a|b\n-|-\n" + "x\n" * 40_000 + "\n\n" + "![" * 20_000)[: 256 * 1024],
    },
    ".tf: 60 KB heredoc near-miss": {
        "main.tf": 'variable "b" {\n  description = <<EOT\n' + " " * 60_000 + "x\nEOT\n}\n",
    },
    ".tf: deep nesting": {"main.tf": "locals {\n  a = " + "[" * 5_000 + "]" * 5_000 + "\n}\n"},
}
SLOW: dict[str, dict[str, str | None]] = {
    ".tf: 512 KB of ordinary variables": {
        "main.tf": ('variable "v" {\n  default = 1\n}\n' * (MAX_TF_BYTES // 32))[:MAX_TF_BYTES],
    },
    ".tf: 4 x 512 KB template strings": {
        f"f{i}.tf": ('locals { a = "' + "${a}" * ((MAX_TF_BYTES - 30) // 4) + '" }\n') for i in range(4)
    },
}


async def probe(session: aiohttp.ClientSession, base: str, url: str) -> tuple[float, float, int, int]:
    """GET `url` while asking /healthz every 20 ms.

    Returns (details seconds, slowest healthz seconds, healthz count, status).
    """
    started = time.perf_counter()
    pending = asyncio.ensure_future(session.get(base + url))
    slowest, count = 0.0, 0
    while not pending.done():
        t = time.perf_counter()
        async with session.get(base + "/healthz") as resp:
            await resp.read()
        slowest, count = max(slowest, time.perf_counter() - t), count + 1
        await asyncio.sleep(0.02)
    resp = await pending
    await resp.read()
    return time.perf_counter() - started, slowest, count, resp.status


async def timed(session: aiohttp.ClientSession, url: str) -> float:
    t = time.perf_counter()
    async with session.get(url) as resp:
        await resp.read()
        assert resp.status == 200, (url, resp.status)
    return time.perf_counter() - t


async def measure(base: str, names: list[str], tags: int) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        print(f"{'module':42s} {'details':>9s} {'slowest /healthz':>17s} {'probes':>7s}  status")
        for i, name in enumerate(names):
            took, slowest, count, status = await probe(session, base, f"/v1/modules/acme/m{i}/null/1.0.0")
            print(f"{name:42s} {took:8.2f}s {slowest * 1000:15.1f}ms {count:7d}  {status}")
        # The normal case: a build per tag (the first also clones the mirror and starts a parse worker).
        first = await timed(session, f"{base}/v1/modules/acme/normal/aws/1.0.0")
        builds = [await timed(session, f"{base}/v1/modules/acme/normal/aws/1.{n}.0") for n in range(1, tags)]
        versions = [await timed(session, f"{base}/v1/modules/acme/normal/aws/versions") for _ in range(30)]
        warm = [await timed(session, f"{base}/v1/modules/acme/normal/aws/1.1.0") for _ in range(30)]
    print(f"normal module, first details (mirror clone + build): {first * 1000:8.1f} ms")
    print(
        f"normal module, details build per tag, median of {len(builds)}: {statistics.median(builds) * 1000:8.1f} ms"
        f" (min {min(builds) * 1000:.1f}, max {max(builds) * 1000:.1f})"
    )
    print(f"normal module, details from the cache, median of 30:  {statistics.median(warm) * 1000:8.2f} ms")
    print(f"versions (baseline), median of 30:                      {statistics.median(versions) * 1000:8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", type=int, default=10)
    parser.add_argument("--skip-slow", action="store_true", help="leave out the modules python-hcl2 needs seconds for")
    args = parser.parse_args()
    base = workdir("hostile")
    from tests.support.details import realistic_module

    cases = {**HOSTILE, **({} if args.skip_slow else SLOW)}
    rules = []
    for i, files in enumerate(cases.values()):
        repo = GitRepo(base / "repos", f"m{i}")
        repo.commit(files)
        repo.tag("v1.0.0")
        rules.append(f'[[modules]]\nnamespace = "acme"\nname = "m{i}"\nsystem = "null"\nrepository = "{repo.url}"\n')
    normal = realistic_module(base / "repos")
    for n in range(1, args.tags):
        normal.commit({"main.tf": (normal.work / "main.tf").read_text() + f"\n# change {n}\n"})
        normal.tag(f"v1.{n}.0")
    rules.append(f'[[modules]]\nnamespace = "acme"\nname = "normal"\nsystem = "aws"\nrepository = "{normal.url}"\n')
    config = write_config(
        base / "gitreg.toml",
        (
            '[git]\nprotocols = ["file"]\ntimeout_seconds = 60\n'
            f'[storage]\npath = "{base / "state"}"\n' + "\n".join(rules)
        ),
    )
    server = start_gitreg(["--config", str(config)], base / "gitreg.log")
    try:
        print(
            f"# python bench/hostile_details.py --tags {args.tags}{' --skip-slow' if args.skip_slow else ''}; "
            f"{machine()}"
        )
        asyncio.run(measure(server.url, list(cases), args.tags))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
