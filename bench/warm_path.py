"""Benchmark 1, the warm path: gitreg's versions and download endpoints under concurrent load,
side by side with a bare aiohttp handler returning the same JSON, in one run (wrk).

    python bench/warm_path.py [--seconds 10] [--rounds 3] [--connections 32] [--quick]

Target: gitreg reaches at least 75% of the bare handler's requests/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path

from _common import (
    GitRepo,
    Server,
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (its own threads; the server runs none for these requests)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="3 s x 1 round")
    parser.add_argument("--no-pin", action="store_true", help="do not pin servers and wrk to separate CPUs")
    args = parser.parse_args()
    pin = None if args.no_pin else pinning()
    server_cpu, wrk_cpus, wrk_threads = pin if pin else (None, None, 2)
    if args.quick:
        args.seconds, args.rounds = 3, 1

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
        port = free_port()
        servers["bare aiohttp handler (baseline)"] = Server(
            [sys.executable, "bench/bare_server.py", str(port), versions_body, location],
            base / "bare.log",
            r"()",
            cpus=server_cpu,
        )
        bare_url = f"http://127.0.0.1:{port}"
        wait_healthy(bare_url + paths["versions"])
        servers["bare aiohttp handler (baseline)"].url = bare_url

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
