"""Benchmark the browsing API (list, search, details) and the module browser's pages.

A real monorepo with N modules (one directory each, explicit rules), served by the real app
on 127.0.0.1. Prints medians and ratios against `GET .../versions` measured in the same run
(the baseline: the cheapest request that also goes through rules and the tag cache), and the
module page (HTML) next to the JSON details endpoint it shows (issue 13's target: the page at
most 10 ms p50).

    python bench/bench_browse.py [--modules 60] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gitreg.web.app import create_app
from gitreg.web.keys import INDEX
from tests.support.app import make_config
from tests.support.repos import GitRepo

MODULE_TF = """
variable "name" {
  type        = string
  description = "Name prefix."
}
variable "tags" {
  type    = map(string)
  default = {}
}
variable "settings" {
  type = object({ size = optional(number, 1), zones = list(string) })
}
output "id" { value = null_resource.this.id }
resource "null_resource" "this" {}
module "labels" { source = "./modules/labels" }
"""


async def timed(client: TestClient[web.Request, web.Application], url: str) -> float:
    started = time.perf_counter()
    resp = await client.get(url)
    await resp.read()
    assert resp.status == 200, (url, resp.status)
    return time.perf_counter() - started


async def median_ms(client: TestClient[web.Request, web.Application], url: str, rounds: int) -> float:
    return statistics.median([await timed(client, url) for _ in range(rounds)]) * 1000


async def main(modules: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="gitreg-bench-") as tmp:
        base = Path(tmp)
        repo = GitRepo(base / "repos", "modules")
        files: dict[str, str | None] = {}
        for i in range(modules):
            files[f"m{i}/README.md"] = (
                f"# m{i}\n\nModule number {i} for the {'network' if i % 3 == 0 else 'compute'} team.\n"
            )
            files[f"m{i}/main.tf"] = MODULE_TF
            files[f"m{i}/modules/labels/main.tf"] = 'variable "x" {}\n'
        repo.commit(files)
        repo.tag("v1.0.0")
        rules = [
            {"namespace": "acme", "name": f"m{i}", "system": "null", "repository": repo.url, "path": f"m{i}"}
            for i in range(modules)
        ]
        config = make_config(rules, storage={"path": str(base / "state")}, server={"host": "127.0.0.1"})
        app = create_app(config)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            started = time.perf_counter()
            await app[INDEX].settled(timeout=600)  # the first pass: ls-remote, mirror, parse all
            cold = (time.perf_counter() - started) * 1000
            results = {
                "versions (baseline)": await median_ms(client, "/v1/modules/acme/m1/null/versions", rounds),
                "details JSON, warm": await median_ms(client, "/v1/modules/acme/m1/null/1.0.0", rounds),
                "module page HTML, warm": await median_ms(client, "/modules/acme/m1/null/1.0.0", rounds),
                "index page HTML (/), warm": await median_ms(client, "/", rounds),
                "index page search (/?q=network)": await median_ms(client, "/?q=network", rounds),
                f"list {modules}, limit=100, warm": await median_ms(client, "/v1/modules?limit=100", rounds),
                "list, limit=15, warm": await median_ms(client, "/v1/modules", rounds),
                f"search over {modules}, warm": await median_ms(client, "/v1/modules/search?q=network", rounds),
            }
    baseline = results["versions (baseline)"]
    print(f"modules={modules} rounds={rounds}")
    print(f"{'first index pass (mirror + parse all)':40s} {cold:8.1f} ms")
    for label, value in results.items():
        print(f"{label:40s} {value:8.2f} ms  x{value / baseline:5.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(asyncio.wait_for(main(args.modules, args.rounds), timeout=300))
