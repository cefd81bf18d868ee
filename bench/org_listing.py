"""Org listing: what enumerating an org costs gitreg beyond the API pages themselves.

    python bench/org_listing.py [--repos 2000] [--rounds 5]

On the fake GitHub API of the tests (real HTTP on 127.0.0.1, 100 repositories a page), in one
run: a full enumeration through OrgCatalog (pages, parsing, filtering, the listing rebuilt,
subscribers told) next to a baseline that only GETs and decodes the same pages in the same
order; then the per-request cost of `resolve()` at that size next to a bare dict lookup, and
what a tag webhook's URL index costs. Medians of `--rounds`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitreg.config.parse import parse_config
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import host_path
from gitreg.orgs.service import OrgCatalog
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer


async def baseline(session: aiohttp.ClientSession, url: str) -> int:
    """GET every page by its Link header and decode it; nothing else."""
    count = 0
    next_url: str | None = url
    while next_url:
        async with session.get(next_url) as resp:
            count += len(json.loads(await resp.read()))
            link = resp.headers.get("Link", "")
        next_url = None
        for part in link.split(","):
            if 'rel="next"' in part:
                next_url = part.split(";")[0].strip()[1:-1]
    return count


async def run(repos: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, GitHttpServer(Path(tmp)) as git:
        fake = await FakeForge("github", git, "acme-infra").start()
        for i in range(repos):
            fake.add(f"terraform-aws-mod{i:05d}" if i % 200 else f"docs-{i}")
        config = parse_config(
            {
                "git": {"protocols": ["http"]},
                "orgs": [{"provider": "github", "api_url": fake.api_url, "group": "acme-infra", "namespace": "acme"}],
            },
            {},
        )
        url = f"{fake.api_url}/orgs/acme-infra/repos?per_page=100&type=all&sort=created&direction=asc"
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        full, base, again = [], [], []
        notified: list[int] = []
        async with aiohttp.ClientSession() as session:
            for _ in range(rounds):
                fake.reset_counters()
                started = time.perf_counter()
                assert await baseline(session, url) == repos
                base.append(time.perf_counter() - started)
                pages = len(fake.requests())
                catalog = OrgCatalog(config, None)
                catalog.open(session)
                started = time.perf_counter()
                assert await catalog.enumerate(0)
                full.append(time.perf_counter() - started)
                catalog.on_change.connect(lambda changes: notified.append(len(changes.all)))
                started = time.perf_counter()
                assert await catalog.enumerate(0)  # nothing changed
                again.append(time.perf_counter() - started)
        modules = len(catalog.modules())
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        addresses = list(catalog.modules())
        missing = [ModuleAddress("acme", f"nope{i}", "aws") for i in range(1000)]
        plain = {a: a for a in addresses}
        n = 200_000
        started = time.perf_counter()
        for i in range(n):
            catalog.resolve(addresses[i % modules])
        resolve_ns = (time.perf_counter() - started) / n * 1e9
        started = time.perf_counter()
        for i in range(n):
            catalog.resolve(missing[i % 1000])
        miss_ns = (time.perf_counter() - started) / n * 1e9
        started = time.perf_counter()
        for i in range(n):
            plain.get(addresses[i % modules])
        dict_ns = (time.perf_counter() - started) / n * 1e9
        payload_urls = (
            "https://github.com/acme-infra/terraform-aws-mod00001.git",
            "git@github.com:acme-infra/terraform-aws-mod00001.git",
        )
        started = time.perf_counter()
        assert catalog.repositories_named(payload_urls, host_path)
        first_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        for _ in range(1000):
            catalog.repositories_named(payload_urls, host_path)
        next_us = (time.perf_counter() - started) * 1000
        await fake.close()
    b, f, a = statistics.median(base), statistics.median(full), statistics.median(again)
    print(f"org of {repos} repositories ({modules} modules), {pages} API pages, median of {rounds}")
    print(f"  baseline: GET + decode the pages            {b * 1000:8.1f} ms")
    print(f"  OrgCatalog.enumerate (first listing)        {f * 1000:8.1f} ms  ({f / b:.2f}x the baseline)")
    print(
        f"  OrgCatalog.enumerate (nothing changed)      {a * 1000:8.1f} ms  ({a / b:.2f}x the baseline); "
        f"changes reported: {sum(notified)}"
    )
    print(f"  resolve() of a listed module                {resolve_ns:8.0f} ns  (dict.get: {dict_ns:.0f} ns)")
    print(f"  resolve() of an unknown name                {miss_ns:8.0f} ns")
    print(
        f"  tag webhook: org repositories named         {first_ms:8.1f} ms first (index built), {next_us:.1f} us after"
    )
    print(f"  max RSS growth while listing                {(rss_after - rss_before) / 1024:8.1f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(run(args.repos, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
