"""Providers from releases (issue 36): a provider download through gitreg vs straight from the host.

    python bench/providers.py [--rounds 7] [--megabytes 40] [--quick]

A fake GitHub (tests/support/forges.py) serves one private release per round, two platforms, each
zip `--megabytes` of incompressible bytes; its asset API redirects to a fake storage host, as
GitHub's does. A real `gitreg serve`. Each round, interleaved:

- the zip alone, with `curl`: the linux_amd64 asset directly (the token, `Accept:
  application/octet-stream`, the redirect followed without the token); gitreg's signed URL of it
  for the first time (signed here with the configured `[auth] signing_key`: no download answer was
  asked for it, so no fetch was started before: gitreg fetches it from the host now, and this
  download follows that fetch); the same URL again (the kept zip, sent with sendfile); the asset
  directly again;
- what a client does (Terraform's registry client, `PackageMeta`: one process, keep-alive, each
  request after the last), for the darwin_arm64 zip, never downloaded before: straight from the host,
  SHA256SUMS, its signature and the zip; then through gitreg, the download answer, SHA256SUMS, the
  signature and the zip (the download answer starts fetching the zip: providers/fetches.py); then
  straight from the host again.

Each gitreg time is divided by the direct one(s) next to it; the figures are the medians of those
ratios; the gitreg process's CPU time (user + system, /proc) is read around each. Also: the warm
`versions` answer's latency. Target: gitreg <= 1.1x the direct download (same run).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from _common import GitHttpServer, GitregProcess, machine, median, workdir
from gitreg.web.signing import UrlSigner
from tests.support.forges import FakeForge
from tests.support.releases import FakeStorage, goreleaser_assets, signing_key

TOKEN = "ghp_benchproviderreleases00001"
SIGNING_KEY = "bench-providers-url-signing-key-0001"
DIRECT = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/octet-stream"}


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


class Client:
    """A sequential HTTP/1.1 client as Terraform's registry client fetches (Go's net/http): one
    connection kept alive per host, redirects followed, headers only toward the first URL's host."""

    def __init__(self) -> None:
        self.connections: dict[str, http.client.HTTPConnection] = {}

    def get(self, url: str, headers: dict[str, str]) -> bytes:
        """The body of `url` (kept when small; a large one is read and dropped)."""
        first = urlsplit(url).netloc
        for _ in range(5):
            parts = urlsplit(url)
            conn = self.connections.get(parts.netloc)
            if conn is None:
                conn = self.connections[parts.netloc] = http.client.HTTPConnection(parts.netloc, timeout=300)
            path = f"{parts.path}?{parts.query}" if parts.query else parts.path
            conn.request("GET", path, headers=headers if parts.netloc == first else {})
            resp = conn.getresponse()
            if resp.status in (301, 302, 303, 307, 308):
                resp.read()
                url = urljoin(url, resp.getheader("Location", ""))
                continue
            if resp.status != 200:
                raise RuntimeError(f"{url}: HTTP {resp.status}")
            kept, size = bytearray(), 0
            while chunk := resp.read(1 << 20):
                size += len(chunk)
                if size <= 1 << 20:
                    kept += chunk
            return bytes(kept)
        raise RuntimeError(f"{url}: too many redirects")

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()


def direct_sequence(urls: tuple[str, str, str]) -> float:
    """Seconds for SHA256SUMS, its signature and the zip straight from the host (the asset API)."""
    client = Client()
    started = time.perf_counter()
    for url in urls:
        client.get(url, DIRECT)
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed


def gitreg_sequence(url: str) -> float:
    """Seconds for the download answer, then SHA256SUMS, its signature and the zip through gitreg."""
    client = Client()
    started = time.perf_counter()
    answer = json.loads(client.get(url, {}))
    for field in ("shasums_url", "shasums_signature_url", "download_url"):
        client.get(answer[field], {})
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed


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
        assets: list[Round] = []
        for n in range(rounds):
            version = f"1.0.{n}"
            two = (("linux", "amd64"), ("darwin", "arm64"))
            files = goreleaser_assets("widget", version, key, platforms=two, payload=size * 1024 * 1024)
            release = forge.add_release("terraform-provider-widget", f"v{version}", files)
            urls = {
                a["name"].removeprefix(f"terraform-provider-widget_{version}_"): a["url"] for a in release["assets"]
            }
            assets.append(
                Round(
                    version,
                    urls["linux_amd64.zip"],
                    (urls["SHA256SUMS"], urls["SHA256SUMS.sig"], urls["darwin_arm64.zip"]),
                )
            )
        config = work / "gitreg.toml"
        config.write_text(
            f'[[providers]]\nnamespace = "acme"\ntype = "*"\n'
            f'repository = "{forge.base_url}/acme/terraform-provider-{{type}}"\n'
            f'keys = "{key.write(work / "keys.asc")}"\nprovider = "github"\napi_url = "{forge.api_url}"\n'
            f'[[orgs]]\nprovider = "github"\napi_url = "{forge.api_url}"\ngroup = "acme"\nnamespace = "acme"\n'
            f'token = "{TOKEN}"\n[index]\nenabled = false\n[storage]\npath = "{work / "state"}"\n'
            f'[auth]\nsigning_key = "{SIGNING_KEY}"\n'
        )
        with tempfile.TemporaryDirectory() as home:
            server = GitregProcess("--config", str(config), env={"HOME": home}).start()
            try:
                assert server.proc is not None
                return measure(server.url, assets, size, server.proc.pid)
            finally:
                server.stop()


@dataclass(frozen=True)
class Round:
    """One release: its version, the linux_amd64 zip's asset URL (the zip alone), and the asset URLs of
    SHA256SUMS, its signature and the darwin_arm64 zip (what a client does)."""

    version: str
    zip_alone: str
    sequence: tuple[str, str, str]


# long: the bench's rounds, interleaved, and its report
def measure(url: str, rounds: list[Round], size: int, pid: int) -> int:
    signer = UrlSigner(SIGNING_KEY, 3600)
    direct: list[float] = []
    first: list[float] = []
    kept: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    cpu_first: list[float] = []
    cpu_kept: list[float] = []
    direct_seq: list[float] = []
    client_seq: list[float] = []
    client_ratio: list[float] = []
    cpu_client: list[float] = []
    curl_headers = [f"{k}: {v}" for k, v in DIRECT.items()]
    with urllib.request.urlopen(f"{url}/v1/providers/acme/widget/versions") as resp:
        resp.read()  # every release read and verified (as `terraform init` asks first)
    for r in rounds:
        path = f"/v1/providers/acme/widget/{r.version}/files/terraform-provider-widget_{r.version}_linux_amd64.zip"
        signed = f"{url}{path}?{signer.sign(path)}"
        before = curl(r.zip_alone, curl_headers)
        used = cpu_seconds(pid)
        first.append(curl(signed, []))
        cpu_first.append(cpu_seconds(pid) - used)
        used = cpu_seconds(pid)
        kept.append(curl(signed, []))
        cpu_kept.append(cpu_seconds(pid) - used)
        after = curl(r.zip_alone, curl_headers)
        direct += [before, after]
        cold.append(first[-1] / before)
        warm.append(kept[-1] / after)
        before = direct_sequence(r.sequence)
        used = cpu_seconds(pid)
        client_seq.append(gitreg_sequence(f"{url}/v1/providers/acme/widget/{r.version}/download/darwin/arm64"))
        cpu_client.append(cpu_seconds(pid) - used)
        after = direct_sequence(r.sequence)
        direct_seq += [before, after]
        client_ratio.append(client_seq[-1] / ((before + after) / 2))
    versions: list[float] = []
    for _ in range(200):
        started = time.perf_counter()
        with urllib.request.urlopen(f"{url}/v1/providers/acme/widget/versions") as resp:
            resp.read()
        versions.append(time.perf_counter() - started)
    print(machine())
    print(f"zip of {size} MiB, {len(rounds)} rounds (one release each), interleaved; medians")
    print(f"  the zip alone, direct from the host (API + storage redirect): {median(direct) * 1000:8.1f} ms")
    print(f"  the zip alone, gitreg, first (fetched, followed, kept):       {median(first) * 1000:8.1f} ms")
    print(f"  the zip alone, gitreg, later (the kept zip, from disk):       {median(kept) * 1000:8.1f} ms")
    print(f"  a client's sequence, direct (sums, signature, zip):           {median(direct_seq) * 1000:8.1f} ms")
    print(f"  a client's sequence, gitreg (answer, sums, signature, zip):   {median(client_seq) * 1000:8.1f} ms")
    ratio, client = median(warm), median(client_ratio)
    print(f"  ratio, the zip alone, first / direct: {median(cold):.3f}x (median of {len(cold)} ratios)")
    print(
        f"  ratio, the zip alone, later / direct: {ratio:.3f}x (target <= 1.1x): {'met' if ratio <= 1.1 else 'MISSED'}"
    )
    print(
        f"  ratio, a client's first download, gitreg / direct: {client:.3f}x (target <= 1.1x): "
        f"{'met' if client <= 1.1 else 'MISSED'}"
    )
    print(
        f"  gitreg's CPU: the zip alone first {median(cpu_first) * 1000:.0f} ms, "
        f"later {median(cpu_kept) * 1000:.0f} ms; a client's sequence {median(cpu_client) * 1000:.0f} ms"
    )
    print(f"  warm versions answer: median {median(versions) * 1000:.2f} ms over {len(versions)} requests")
    return 0 if ratio <= 1.1 and client <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
