"""Providers from releases (issue 36): a provider download through gitreg vs straight from the host.

    python bench/providers.py [--rounds 7] [--megabytes 40] [--quick]

A fake GitHub (tests/support/forges.py) serves one private release per round, each zip
`--megabytes` of incompressible bytes; its asset API redirects to a fake storage host, as
GitHub's does. In each round, interleaved, with `curl`: the asset directly (the token, `Accept:
application/octet-stream`, the redirect followed without the token); gitreg's signed
`download_url` for the first time (a real `gitreg serve` streams the asset from the host, its
SHA-256 checked on the way, and keeps the verified zip: providers/packages.py); the same URL
again (the kept zip, sent with sendfile); the asset directly again. Each gitreg download is
divided by the direct one next to it; the figures are the medians of those ratios. Also: the
warm `versions` answer's latency. Target: gitreg <= 1.1x the direct download (same run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import GitHttpServer, GitregProcess, machine, median, workdir
from tests.support.forges import FakeForge
from tests.support.releases import FakeStorage, goreleaser_assets, signing_key

TOKEN = "ghp_benchproviderreleases00001"


def serve_fakes(forge: FakeForge, storage: FakeStorage) -> asyncio.AbstractEventLoop:
    """Run the fake GitHub and its storage host on a thread's own event loop."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(forge.start())
        loop.run_until_complete(storage.start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)
    return loop


def curl(url: str, headers: list[str]) -> float:
    """Seconds `curl` takes to fetch `url` to /dev/null (following redirects, headers only to the first host)."""
    argv = ["curl", "-sS", "-f", "-L", "-o", "/dev/null", "-w", "%{time_total}"]
    for h in headers:
        argv += ["-H", h]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True, timeout=300)
    return float(out.stdout)


def cpu_seconds(pid: int) -> float:
    """The user + system CPU time process `pid` has used so far (its own threads, not its children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--megabytes", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 5 MB: a smoke run")
    args = parser.parse_args()
    rounds, size = (3, 5) if args.quick else (args.rounds, args.megabytes)
    work = workdir("providers")
    try:
        return run(work, rounds, size)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # (the kept zips: 40 MiB a round)


def run(work: Path, rounds: int, size: int) -> int:
    """Start the fakes and gitreg in `work`, and measure."""
    with signing_key(work / "gpg") as key, GitHttpServer(work / "repos") as git:
        forge = FakeForge("github", git, "acme", token=TOKEN)
        storage = FakeStorage()
        forge.storage = storage
        serve_fakes(forge, storage)
        assets = []
        for n in range(rounds):
            version = f"1.0.{n}"
            one = (("linux", "amd64"),)
            files = goreleaser_assets("widget", version, key, platforms=one, payload=size * 1024 * 1024)
            release = forge.add_release("terraform-provider-widget", f"v{version}", files)
            assets.append((version, next(a["url"] for a in release["assets"] if a["name"].endswith(".zip"))))
        config = work / "gitreg.toml"
        config.write_text(
            f'[[providers]]\nnamespace = "acme"\ntype = "*"\n'
            f'repository = "{forge.base_url}/acme/terraform-provider-{{type}}"\n'
            f'keys = "{key.write(work / "keys.asc")}"\nprovider = "github"\napi_url = "{forge.api_url}"\n'
            f'[[orgs]]\nprovider = "github"\napi_url = "{forge.api_url}"\ngroup = "acme"\nnamespace = "acme"\n'
            f'token = "{TOKEN}"\n[index]\nenabled = false\n[storage]\npath = "{work / "state"}"\n'
        )
        with tempfile.TemporaryDirectory() as home:
            server = GitregProcess("--config", str(config), env={"HOME": home}).start()
            try:
                assert server.proc is not None
                return measure(server.url, assets, size, server.proc.pid)
            finally:
                server.stop()


def measure(url: str, assets: list[tuple[str, str]], size: int, pid: int) -> int:
    direct_headers = [f"Authorization: Bearer {TOKEN}", "Accept: application/octet-stream"]
    direct: list[float] = []
    first: list[float] = []
    kept: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    cpu_first: list[float] = []
    cpu_kept: list[float] = []
    for version, asset in assets:
        with urllib.request.urlopen(f"{url}/v1/providers/acme/widget/{version}/download/linux/amd64") as resp:
            signed = json.loads(resp.read())["download_url"]
        before = curl(asset, direct_headers)
        used = cpu_seconds(pid)
        first.append(curl(signed, []))
        cpu_first.append(cpu_seconds(pid) - used)
        used = cpu_seconds(pid)
        kept.append(curl(signed, []))
        cpu_kept.append(cpu_seconds(pid) - used)
        after = curl(asset, direct_headers)
        direct += [before, after]
        cold.append(first[-1] / before)
        warm.append(kept[-1] / after)
    versions: list[float] = []
    for _ in range(200):
        started = time.perf_counter()
        with urllib.request.urlopen(f"{url}/v1/providers/acme/widget/versions") as resp:
            resp.read()
        versions.append(time.perf_counter() - started)
    print(machine())
    print(f"zip of {size} MiB, {len(assets)} rounds (one release each), interleaved; medians")
    print(f"  direct from the host (API + storage redirect):   {median(direct) * 1000:8.1f} ms")
    print(f"  gitreg, first download (streamed, checked, kept): {median(first) * 1000:8.1f} ms")
    print(f"  gitreg, later downloads (the kept zip, sendfile): {median(kept) * 1000:8.1f} ms")
    ratio = median(warm)
    print(f"  ratio, first download / direct: {median(cold):.3f}x (median of {len(cold)} ratios)")
    print(f"  ratio, later downloads / direct: {ratio:.3f}x (target <= 1.1x): {'met' if ratio <= 1.1 else 'MISSED'}")
    print(
        f"  gitreg's CPU per download: first {median(cpu_first) * 1000:.0f} ms, later {median(cpu_kept) * 1000:.0f} ms"
    )
    print(f"  warm versions answer: median {median(versions) * 1000:.2f} ms over {len(versions)} requests")
    return 0 if ratio <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
