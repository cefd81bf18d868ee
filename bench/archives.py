"""Archive mode (issue 4): cold build time and warm serving throughput, each next to its baseline.

    python bench/archives.py [--rounds 7] [--seconds 10] [--quick]

1. Cold build: a download of a version whose archive is not built yet (the mirror is already
   there, as after the first version), timed end to end over HTTP, next to
   `git archive --format=tar <sha>:<path> | gzip -6 -n` of the same tree in the same run.
   Target: gitreg <= 1.3x the baseline. Two module sizes: typical and large.
2. Warm serving: wrk on a built archive, next to a bare aiohttp FileResponse of the same file.
   Target: gitreg >= 80% of the baseline's requests/s.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from _common import GitRepo, Server, free_port, machine, median, start_gitreg, wait_healthy, workdir, write_config, wrk

TOKEN = "bench-archive-token-0123456789"
KEY = "bench-signing-key-" + "0" * 32


def module_files(kind: str, rng: random.Random) -> dict[str, str | None]:
    """A module's files: `typical` ~40 small files, `large` adds ~24 MB of vendored text."""
    files: dict[str, str | None] = {
        f"modules/net/{d}/file{i}.tf": "".join(rng.choice("abcdefgh \n") for _ in range(3000))
        for d in ("a", "b", "c", "d")
        for i in range(10)
    }
    files["modules/net/main.tf"] = 'output "x" { value = 1 }\n'
    files["modules/other/main.tf"] = "# not part of the module\n"
    if kind == "large":
        files["modules/net/vendor/data.json"] = "".join(
            f'{{"i": {i}, "v": "{rng.random():.12f}"}}\n' for i in range(600_000)
        )
    return files


def git_archive_gzip(bare: Path, sha: str, path: str, out: Path) -> float:
    """Seconds `git archive --format=tar <sha>:<path> | gzip -6 -n > out` takes."""
    started = time.perf_counter()
    with out.open("wb") as fh:
        archive = subprocess.Popen(
            ["git", "archive", "--format=tar", f"{sha}:{path}"], cwd=bare, stdout=subprocess.PIPE
        )
        gz = subprocess.run(["gzip", "-6", "-n"], stdin=archive.stdout, stdout=fh, check=True)
        if archive.stdout is not None:  # always: stdout=PIPE
            archive.stdout.close()
        archive.wait()
    assert archive.returncode == 0 and gz.returncode == 0
    return time.perf_counter() - started


def fetch_seconds(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as resp:
        size = len(resp.read())
    return time.perf_counter() - started, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="cold builds per module size")
    parser.add_argument("--seconds", type=float, default=10, help="wrk duration per warm run")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 3 s")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 3, 3
    base = workdir("archives")
    rng = random.Random(42)
    repos: dict[str, tuple[GitRepo, list[str]]] = {}
    for kind in ("typical", "large"):
        repo = GitRepo(base / "repos", kind)
        repo.commit(module_files(kind, rng))
        shas = []
        for i in range(args.rounds + 1):  # one commit per version: every version is a new archive key
            repo.commit({"modules/net/version.tf": f"# {i}\n"})
            shas.append(repo.tag(f"v1.{i}.0"))
        repos[kind] = (repo, shas)
    rules = "".join(
        f'[[modules]]\nnamespace = "bench"\nname = "{kind}"\nsystem = "null"\nrepository = "{repo.url}"\n'
        'path = "modules/net"\ndownload = "archive"\n'
        for kind, (repo, _) in repos.items()
    )
    config = write_config(
        base / "gitreg.toml", f'[storage]\npath = "{base / "store"}"\n[cache]\nttl_seconds = 3600\n{rules}'
    )
    signed_config = write_config(
        base / "signed.toml",
        (
            f'[storage]\npath = "{base / "store-signed"}"\n[cache]\nttl_seconds = 3600\n'
            f'[auth]\ntokens = ["{TOKEN}"]\nsigning_key = "{KEY}"\n{rules}'
        ),
    )
    servers: dict[str, Server] = {}
    cold: dict[str, dict[str, list[float]]] = {}
    sizes: dict[str, int] = {}
    try:
        gitreg = servers["gitreg"] = start_gitreg(["--config", str(config)], base / "gitreg.log")
        for kind, (repo, shas) in repos.items():
            archive = f"{gitreg.url}/v1/modules/bench/{kind}/null/1.0.0/archive.tar.gz"
            fetch_seconds(archive)  # creates the mirror: what follows measures builds only
            rows = cold.setdefault(kind, {"gitreg": [], "baseline": []})
            for i in range(1, args.rounds + 1):  # interleaved, so drift hits both alike
                seconds, sizes[kind] = fetch_seconds(
                    f"{gitreg.url}/v1/modules/bench/{kind}/null/1.{i}.0/archive.tar.gz"
                )
                rows["gitreg"].append(seconds)
                rows["baseline"].append(
                    git_archive_gzip(repo.bare, shas[i], "modules/net", base / f"{kind}-{i}.tar.gz")
                )

        # warm serving of the typical module's archive
        path = "/v1/modules/bench/typical/null/1.1.0/archive.tar.gz"
        with urllib.request.urlopen(gitreg.url + path) as resp:
            (base / "served.tar.gz").write_bytes(resp.read())
        signed = servers["gitreg-signed"] = start_gitreg(["--config", str(signed_config)], base / "signed.log")
        request = urllib.request.Request(
            signed.url + path.replace("archive.tar.gz", "download"), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(request) as resp:
            signed_path = path + "?" + resp.headers["X-Terraform-Get"].split("?", 1)[1]
        urllib.request.urlopen(signed.url + signed_path).read()  # build it
        port = free_port()
        bare = servers["bare"] = Server(
            [sys.executable, "bench/bare_file_server.py", str(port), str(base / "served.tar.gz")],
            base / "bare.log",
            r"()",
        )
        bare.url = f"http://127.0.0.1:{port}"
        wait_healthy(bare.url + path)
        targets = {
            "gitreg, open registry": gitreg.url + path,
            "gitreg, signed URL (auth on)": signed.url + signed_path,
            "bare aiohttp FileResponse (baseline)": bare.url + path,
        }
        warm: dict[str, list[dict[str, float]]] = {}
        for _ in range(3 if not args.quick else 1):
            for name, url in targets.items():
                warm.setdefault(name, []).append(wrk(url, args.seconds, connections=32))
    finally:
        for server in servers.values():
            server.stop()

    print(f"# machine: {machine()}")
    print(f"# cold build: {args.rounds} builds per size (medians), mirror already present")
    print(
        "| module | archive size | gitreg download of a new archive | git archive \\| gzip -6 | ratio "
        "| target <= 1.3x |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for kind, rows in cold.items():
        g, b = median(rows["gitreg"]), median(rows["baseline"])
        ratio = g / b if b else 0
        print(
            f"| {kind} | {sizes[kind] / 1024:,.0f} KiB | {g * 1000:.1f} ms | {b * 1000:.1f} ms | {ratio:.2f}x | "
            f"{'met' if ratio <= 1.3 else 'MISSED'} |"
        )
    print(
        f"\n# warm serving: wrk -t2 -c32 -d{args.seconds:g}s on a {sizes['typical'] / 1024:,.0f} KiB archive, "
        f"{len(next(iter(warm.values())))} round(s), medians"
    )
    print("| server | requests/s | p50 ms | p99 ms | errors | vs baseline |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    base_rps = median([r["rps"] for r in warm["bare aiohttp FileResponse (baseline)"]])
    for name, rs in warm.items():
        rps = median([r["rps"] for r in rs])
        errors = sum(r["errors"] + r["non2xx"] for r in rs)
        print(
            f"| {name} | {rps:,.0f} | {median([r['p50_ms'] for r in rs]):.2f} "
            f"| {median([r['p99_ms'] for r in rs]):.2f} "
            f"| {errors} | {rps / base_rps:.0%} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
