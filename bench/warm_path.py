"""Benchmark 1, the warm path: gitreg's versions and download endpoints under concurrent load,
side by side with a bare aiohttp handler returning the same JSON, in one run (wrk).

    python bench/warm_path.py [--seconds 10] [--rounds 3] [--connections 32] [--quick]
    python bench/warm_path.py --operator [--seconds 10] [--rounds 5] [--before CHECKOUT] [--no-access-log-too]

Target: gitreg reaches at least 75% of the bare handler's requests/s.

`--operator` runs the warm path as an operator runs it (issue 25): `versions` of a module a
wildcard rule serves, with `[auth] tokens` set (wrk sends `Authorization: Bearer`), the access
log on in its default format, `wrk -t1 -c50`, gitreg and wrk on the same cores, not pinned;
gitreg and the bare handler alternate, round after round. The target's baseline is the bare
handler as `web.run_app` runs it (asyncio's event loop); the same handler on uvloop, the loop
gitreg runs on, is measured beside it, so the ratio of gitreg's own work shows too.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

from _common import (
    GitRepo,
    Server,
    cpu_seconds,
    free_port,
    machine,
    median,
    pinning,
    start_gitreg,
    wait_healthy,
    workdir,
    write_config,
    wrk,
)

# The operator scenario's bearer token (a benchmark's own, on 127.0.0.1 only).
OPERATOR_TOKEN = "bench-operator-token-0123456789abcdef"
# The bare handler on uvloop, gitreg's event loop (gitreg/core/loop.py); the target's baseline is
# "bare", on the loop aiohttp runs by default.
BARE_UVLOOP = "bare on uvloop"


def start_bare(base: Path, versions_body: str, location: str, cpus: str | None = None, uvloop: bool = False) -> Server:
    """The baseline: bench/bare_server.py answering `versions_body` and `location`, ready to measure
    (on asyncio's event loop, as `web.run_app` runs by default; on uvloop's with `uvloop`)."""
    port = free_port()
    server = Server(
        [sys.executable, "bench/bare_server.py", str(port), versions_body, location, *(["uvloop"] if uvloop else [])],
        base / ("bare-uvloop.log" if uvloop else "bare.log"),
        r"()",
        cpus=cpus,
    )
    server.url = f"http://127.0.0.1:{port}"
    wait_healthy(server.url + "/v1/modules/demo/hello/null/versions", server)
    return server


def operator_config(base: Path, auth: bool = True) -> Path:
    """The operator scenario's config (a wildcard rule over `base`/repos, `[auth] tokens` unless not
    `auth`); its repository made the first time."""
    if not (base / "repos" / "terraform-null-hello.git").exists():
        repo = GitRepo(base / "repos", "terraform-null-hello")
        repo.commit({"main.tf": 'output "x" { value = 1 }\n'})
        for i in range(20):
            repo.tag(f"v1.{i}.0")
    template = (base / "repos" / "terraform-{system}-{name}.git").as_uri().replace("%7B", "{").replace("%7D", "}")
    tokens = f'[auth]\ntokens = ["{OPERATOR_TOKEN}"]\n' if auth else ""
    return write_config(
        base / ("gitreg.toml" if auth else "gitreg-open.toml"),
        (
            f'[cache]\nttl_seconds = 3600\n[storage]\npath = "{base / "state"}"\n{tokens}'
            f'[[modules]]\nnamespace = "demo"\nrepository = "{template}"\n'
        ),
    )


def operator(args: argparse.Namespace) -> int:
    """`--operator`: a wildcard rule, a bearer token, the access log on, wrk -t1 -c50, nothing pinned."""
    base = workdir("warm-operator")
    config = operator_config(base)
    path = "/v1/modules/demo/hello/null/versions"
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    gitreg = start_gitreg(["--config", str(config)], base / "gitreg.log")
    servers = {"gitreg": gitreg}
    if args.before:  # the same scenario on another checkout (e.g. the commit before a change), in the same run
        servers["gitreg before"] = start_gitreg(["--config", str(config)], base / "before.log", root=args.before)
    if args.no_access_log_too:  # what the access line costs: the same server without it, in the same rounds
        servers["gitreg --log-level warning"] = start_gitreg(
            ["--config", str(config), "--log-level", "warning"], base / "quiet.log"
        )
    try:
        request = urllib.request.Request(gitreg.url + path, headers=headers)
        with urllib.request.urlopen(request) as resp:  # also warms the tag cache
            versions_body = resp.read().decode()
        servers["bare"] = start_bare(base, versions_body, "unused")
        # The same bare handler on gitreg's event loop: what gitreg's own work costs, the loop aside.
        servers[BARE_UVLOOP] = start_bare(base, versions_body, "unused", uvloop=True)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
        for _ in range(args.rounds):
            for name, server in servers.items():  # alternating, so drift hits all alike
                cpu = cpu_seconds(server.proc.pid)
                result = wrk(server.url + path, args.seconds, args.connections, threads=1, headers=headers)
                result["cpu_us"] = (cpu_seconds(server.proc.pid) - cpu) / max(1, result["requests"]) * 1e6
                results[name].append(result)
        logged = sum(1 for line in gitreg.log.read_text().splitlines() if f'"GET {path} HTTP/1.1" 200' in line)
    finally:
        for server in servers.values():
            server.stop()
    before = f" --before {args.before}" if args.before else ""
    before += " --no-access-log-too" if args.no_access_log_too else ""
    print(
        f"# warm path, operator scenario: python bench/warm_path.py --operator --seconds {args.seconds} "
        f"--rounds {args.rounds} --connections {args.connections}{before}: wrk -t1 -c{args.connections} "
        f"-d{args.seconds}s -H 'Authorization: Bearer ...', wildcard rule, access log on (default text "
        f"format, {logged:,} lines written), gitreg and the bare handler alternating, not pinned; medians"
    )
    print(f"# machine: {machine()}")
    print("| server | requests/s (each round) | median | server CPU per request µs | p50 ms | p99 ms | errors |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, rs in results.items():
        each = ", ".join(f"{r['rps']:,.0f}" for r in rs)
        print(
            f"| {name} | {each} | {median([r['rps'] for r in rs]):,.0f} | "
            f"{median([r['cpu_us'] for r in rs]):.1f} | {median([r['p50_ms'] for r in rs]):.2f} | "
            f"{median([r['p99_ms'] for r in rs]):.2f} | {sum(r['errors'] + r['non2xx'] for r in rs)} |"
        )
    bare = max(1.0, median([r["rps"] for r in results["bare"]]))
    bare_uvloop = max(1.0, median([r["rps"] for r in results[BARE_UVLOOP]]))
    for name in servers:
        if not name.startswith("bare"):
            rps = median([r["rps"] for r in results[name]])
            verdict = "met" if rps / bare >= 0.75 else "MISSED"
            print(f"target {name} >= 75% of the bare handler (operator scenario): {rps / bare:.1%} -> {verdict}")
            print(f"  {name} against the bare handler on uvloop (gitreg's own work only): {rps / bare_uvloop:.1%}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=None, help="32 (50 with --operator)")
    parser.add_argument("--quick", action="store_true", help="3 s x 1 round")
    parser.add_argument("--no-pin", action="store_true", help="do not pin servers and wrk to separate CPUs")
    parser.add_argument("--operator", action="store_true", help="the operator scenario (see above); never pinned")
    parser.add_argument(
        "--before", type=Path, metavar="CHECKOUT", help="with --operator: also run the gitreg of this source tree"
    )
    parser.add_argument(
        "--no-access-log-too",
        action="store_true",
        help="with --operator: also run gitreg with --log-level warning (no access log), in the same rounds",
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 3, 1
    if args.operator:
        args.connections = args.connections or 50
        return operator(args)
    args.connections = args.connections or 32
    pin = None if args.no_pin else pinning()
    server_cpu, wrk_cpus, wrk_threads = pin if pin else (None, None, 2)

    base = workdir("warm")
    repo = GitRepo(base / "repos", "hello")
    repo.commit({"main.tf": 'output "x" { value = 1 }\n'})
    for i in range(20):
        repo.tag(f"v1.{i}.0")
    config = write_config(
        base / "gitreg.toml",
        (
            f'[cache]\nttl_seconds = 3600\n[storage]\npath = "{base / "state"}"\n'
            f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
        ),
    )
    servers = {
        "gitreg (access log on, as shipped)": start_gitreg(
            ["--config", str(config)], base / "gitreg.log", cpus=server_cpu
        ),
        "gitreg (--log-level warning)": start_gitreg(
            ["--config", str(config), "--log-level", "warning"], base / "gitreg-quiet.log", cpus=server_cpu
        ),
    }
    paths = {
        "versions": "/v1/modules/demo/hello/null/versions",
        "download": "/v1/modules/demo/hello/null/1.19.0/download",
    }
    try:
        first = next(iter(servers.values()))
        with urllib.request.urlopen(first.url + paths["versions"]) as resp:
            versions_body = resp.read().decode()
        with urllib.request.urlopen(first.url + paths["download"]) as resp:
            location = json.loads(resp.read())["location"]
        for server in servers.values():  # warm every cache
            urllib.request.urlopen(server.url + paths["versions"]).read()
        servers["bare aiohttp handler (baseline)"] = start_bare(base, versions_body, location, server_cpu)

        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for _ in range(args.rounds):
            for endpoint, path in paths.items():
                for name, server in servers.items():  # interleaved, so drift hits all alike
                    cpu = cpu_seconds(server.proc.pid)
                    result = wrk(server.url + path, args.seconds, args.connections, threads=wrk_threads, cpus=wrk_cpus)
                    result["cpu_us"] = (cpu_seconds(server.proc.pid) - cpu) / max(1, result["requests"]) * 1e6
                    results.setdefault((name, endpoint), []).append(result)
    finally:
        for server in servers.values():
            server.stop()

    pinned = f"servers on CPU {server_cpu}, wrk on CPU {wrk_cpus}" if pin else "not pinned"
    print(
        f"# warm path: python bench/warm_path.py{' --quick' if args.quick else ''}"
        f"{' --no-pin' if args.no_pin else ''}: "
        f"wrk -t{wrk_threads} -c{args.connections} -d{args.seconds:g}s, {args.rounds} round(s) interleaved, medians; "
        f"{pinned}"
    )
    print(f"# machine: {machine()}")
    print("| endpoint | server | requests/s | vs baseline | server CPU per request µs | p50 ms | p99 ms | errors |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    verdicts = []
    for endpoint in paths:
        base_rps = median([r["rps"] for r in results[("bare aiohttp handler (baseline)", endpoint)]])
        for name in servers:
            rs = results[(name, endpoint)]
            rps = median([r["rps"] for r in rs])
            errors = sum(r["errors"] + r["non2xx"] for r in rs)
            ratio = rps / base_rps if base_rps else 0
            print(
                f"| {endpoint} | {name} | {rps:,.0f} | {ratio:.0%} | {median([r['cpu_us'] for r in rs]):.1f} | "
                f"{median([r['p50_ms'] for r in rs]):.2f} | {median([r['p99_ms'] for r in rs]):.2f} | {errors} |"
            )
            if name.startswith("gitreg (access"):
                verdicts.append((endpoint, ratio))
    for endpoint, ratio in verdicts:
        print(
            f"target gitreg >= 75% of baseline on {endpoint} (as shipped): {ratio:.1%} -> "
            f"{'met' if ratio >= 0.75 else 'MISSED'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
