"""Benchmark: what identities cost on `terraform init`'s warm path, and what they cost the Git host.

    python bench/identity.py [--seconds 5] [--rounds 3] [--connections 32] [--quick]

One gitreg with a static token and a GitLab host (`[[auth.forges]]`, a fake API in a thread),
one without auth (the baseline, same run), wrk on the versions endpoint: open, static token,
GitLab token (its "can read" answer trusted for recheck_seconds). Medians and ratios to the
baseline; and the fake API's calls during the whole run, which the budget bounds at one
`GET /user` and one `GET /projects/:path` per recheck window.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import urllib.error
import urllib.request
from pathlib import Path

from _common import ROOT, GitRepo, machine, median, pinning, start_gitreg, workdir, write_config, wrk
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer

STATIC = "bench-static-token-000000000001"
PAT = "glpat-bench-person-0000000001"
PATH = "/v1/modules/demo/hello/null/versions"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="3 s x 1 round")
    parser.add_argument("--root", type=Path, default=ROOT, help="the gitreg checkout to run (to compare commits)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 3, 1
    pin = pinning()
    server_cpu, wrk_cpus, wrk_threads = pin if pin else (None, None, 2)
    base = workdir("identity")
    repo = GitRepo(base / "repos", "acme/hello")
    repo.commit({"main.tf": 'output "x" { value = 1 }\n'})
    for i in range(20):
        repo.tag(f"v1.{i}.0")
    with GitHttpServer(base / "repos") as git:
        forge = FakeForge("gitlab", git, "acme")
        forge.add("hello", repo="acme/hello")
        forge.add_user("person", PAT, sees=("hello",))
        with forge.in_thread():
            rule = (
                f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\n'
                f'repository = "{git.url("acme/hello.git")}"\n'
            )
            common = f'[git]\nprotocols = ["http"]\n[cache]\nttl_seconds = 3600\n{rule}'
            auth = (
                f'[auth]\ntokens = ["{STATIC}"]\n[[auth.forges]]\nprovider = "gitlab"\n'
                f'url = "{forge.base_url}"\nrecheck_seconds = 300\n'
            )
            servers = {
                "open": start_gitreg(
                    ["--config", str(write_config(base / "open.toml", f'[storage]\npath = "{base / "s1"}"\n{common}'))],
                    base / "open.log",
                    cpus=server_cpu,
                    root=args.root,
                ),
                "auth": start_gitreg(
                    [
                        "--config",
                        str(write_config(base / "auth.toml", f'[storage]\npath = "{base / "s2"}"\n{common}{auth}')),
                    ],
                    base / "auth.log",
                    cpus=server_cpu,
                    root=args.root,
                ),
            }
            cases = {"open (baseline)": ("open", {}), "static token": ("auth", {"Authorization": f"Bearer {STATIC}"})}
            cases["GitLab token"] = ("auth", {"Authorization": f"Bearer {PAT}"})
            try:
                for key, headers in cases.values():  # warm the tag caches and the identity answers
                    request = urllib.request.Request(servers[key].url + PATH, headers=headers)
                    with contextlib.suppress(urllib.error.HTTPError):  # (a commit without forges: 401)
                        urllib.request.urlopen(request, timeout=30).read()
                forge.reset_counters()
                results: dict[str, list[dict[str, float]]] = {}
                for _ in range(args.rounds):
                    for name, (key, headers) in cases.items():  # interleaved: drift hits all alike
                        found = wrk(
                            servers[key].url + PATH,
                            args.seconds,
                            args.connections,
                            threads=wrk_threads,
                            headers=headers,
                            cpus=wrk_cpus,
                        )
                        results.setdefault(name, []).append(found)
            finally:
                for server in servers.values():
                    server.stop()
            calls = len(forge.requests())
    rounds = f"{args.rounds} round(s) of {args.seconds} s"
    print(f"# identity: python bench/identity.py{' --quick' if args.quick else ''}: wrk -c{args.connections}, {rounds}")
    print(f"# machine: {machine()}")
    print("| credential | requests/s | vs open | p50 ms | p99 ms | non-2xx |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    baseline = median([r["rps"] for r in results["open (baseline)"]])
    for name, runs in results.items():
        rps = median([r["rps"] for r in runs])
        p50, p99 = median([r["p50_ms"] for r in runs]), median([r["p99_ms"] for r in runs])
        bad = sum(r.get("non2xx", 0) for r in runs)
        print(f"| {name} | {rps:.0f} | {rps / baseline:.2f} | {p50:.2f} | {p99:.2f} | {bad:.0f} |")
    print(f"GitLab API calls during the load (all within one recheck window; budget 0 after warm-up): {calls}")
    return 0 if calls == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
