"""Providers from releases (issue 36): a provider download through gitreg vs straight from the host.

    python bench/providers.py [--rounds 7] [--megabytes 40] [--host-mbps N] [--quick]

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

The same two for a rule with `download = "redirect"` (another namespace on the same repositories,
the linux_arm64 and darwin_amd64 zips): gitreg's signed URL answers 302 to the storage host's
presigned URL, which the client fetches itself.

Each gitreg time is divided by the direct one(s) next to it; the figures are the medians of those
ratios; the gitreg process's CPU time (user + system, /proc) is read around each. Also: the warm
`versions` answer's latency. Target: gitreg <= 1.1x the direct download (same run).

`--host-mbps N`: the storage host sends every answer at N megabytes (10^6 bytes) a second, as a
host behind a real link does (a CDN to a data centre: some hundreds); by default it sends as fast
as loopback and Python allow (about 1 GB/s here), where gitreg's own copy and hash of each byte of
a zip's first download cost more than the transfer itself.
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
from dataclasses import dataclass, field
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
    for name in ("shasums_url", "shasums_signature_url", "download_url"):
        client.get(answer[name], {})
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
    parser.add_argument("--host-mbps", type=float, default=None, help="the storage host's pace (default: unpaced)")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 5 MB: a smoke run")
    args = parser.parse_args()
    rounds, size = (3, 5) if args.quick else (args.rounds, args.megabytes)
    work = workdir("providers")
    try:
        return run(work, rounds, size, args.host_mbps)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # (the kept zips: 40 MiB a round)


def run(work: Path, rounds: int, size: int, host_mbps: float | None) -> int:
    """Start the fakes and gitreg in `work`, and measure."""
    with signing_key(work / "gpg") as key, GitHttpServer(work / "repos") as git:
        forge = FakeForge("github", git, "acme", token=TOKEN)
        storage = FakeStorage()
        storage.rate = host_mbps * 1e6 if host_mbps else None
        forge.storage = storage
        serve_fakes(forge, storage)
        releases: list[Round] = []
        for n in range(rounds):
            version = f"1.0.{n}"
            files = goreleaser_assets("widget", version, key, platforms=PLATFORMS, payload=size * 1024 * 1024)
            release = forge.add_release("terraform-provider-widget", f"v{version}", files)
            urls = {
                a["name"].removeprefix(f"terraform-provider-widget_{version}_"): a["url"] for a in release["assets"]
            }
            releases.append(Round(version, urls))
        keys = key.write(work / "keys.asc")
        rules = "".join(
            f'[[providers]]\nnamespace = "{namespace}"\ntype = "*"\n'
            f'repository = "{forge.base_url}/acme/terraform-provider-{{type}}"\n'
            f'keys = "{keys}"\nprovider = "github"\napi_url = "{forge.api_url}"\ndownload = "{download}"\n'
            for namespace, download in (("acme", "proxy"), (REDIRECTED, "redirect"))
        )
        config = work / "gitreg.toml"
        config.write_text(
            f'{rules}[[orgs]]\nprovider = "github"\napi_url = "{forge.api_url}"\ngroup = "acme"\nnamespace = "acme"\n'
            f'token = "{TOKEN}"\n[index]\nenabled = false\n[storage]\npath = "{work / "state"}"\n'
            f'[auth]\nsigning_key = "{SIGNING_KEY}"\n'
        )
        with tempfile.TemporaryDirectory() as home:
            server = GitregProcess("--config", str(config), env={"HOME": home}).start()
            try:
                assert server.proc is not None
                return measure(server.url, releases, size, server.proc.pid, host_mbps)
            finally:
                server.stop()


# Per release: the zip alone and a client's sequence, through the proxy rule and the redirect rule.
PLATFORMS = (("linux", "amd64"), ("darwin", "arm64"), ("linux", "arm64"), ("darwin", "amd64"))
REDIRECTED = "acmedirect"  # the namespace of the `download = "redirect"` rule


@dataclass(frozen=True)
class Round:
    """One release: its version and its assets' API URLs by name (`linux_amd64.zip`, `SHA256SUMS`...)."""

    version: str
    urls: dict[str, str]

    def sequence(self, platform: str) -> tuple[str, str, str]:
        """SHA256SUMS, its signature and `platform`'s zip, as a client fetches them."""
        return self.urls["SHA256SUMS"], self.urls["SHA256SUMS.sig"], self.urls[f"{platform}.zip"]


@dataclass
class Figures:
    """One rule's measurements: each a list over the rounds."""

    direct: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    kept: list[float] = field(default_factory=list)
    cold: list[float] = field(default_factory=list)  # first / direct
    warm: list[float] = field(default_factory=list)  # kept / direct
    cpu_first: list[float] = field(default_factory=list)
    cpu_kept: list[float] = field(default_factory=list)
    direct_seq: list[float] = field(default_factory=list)
    client_seq: list[float] = field(default_factory=list)
    client_ratio: list[float] = field(default_factory=list)
    cpu_client: list[float] = field(default_factory=list)


def zip_alone(url: str, namespace: str, r: Round, platform: str, pid: int, into: Figures, again: bool) -> None:
    """The zip of `platform` alone: direct, gitreg's signed URL first (and, `again`, a second time), direct."""
    signer = UrlSigner(SIGNING_KEY, 3600)
    path = f"/v1/providers/{namespace}/widget/{r.version}/files/terraform-provider-widget_{r.version}_{platform}.zip"
    signed = f"{url}{path}?{signer.sign(path)}"
    headers = [f"{k}: {v}" for k, v in DIRECT.items()]
    before = curl(r.urls[f"{platform}.zip"], headers)
    used = cpu_seconds(pid)
    into.first.append(curl(signed, []))
    into.cpu_first.append(cpu_seconds(pid) - used)
    if again:
        used = cpu_seconds(pid)
        into.kept.append(curl(signed, []))
        into.cpu_kept.append(cpu_seconds(pid) - used)
    after = curl(r.urls[f"{platform}.zip"], headers)
    into.direct += [before, after]
    into.cold.append(into.first[-1] / ((before + after) / 2))
    if again:
        into.warm.append(into.kept[-1] / after)


def client_sequence(url: str, namespace: str, r: Round, platform: str, pid: int, into: Figures) -> None:
    """What a client does for `platform` (never downloaded before): direct, through gitreg, direct."""
    before = direct_sequence(r.sequence(platform))
    used = cpu_seconds(pid)
    os_, arch = platform.split("_")
    into.client_seq.append(gitreg_sequence(f"{url}/v1/providers/{namespace}/widget/{r.version}/download/{os_}/{arch}"))
    into.cpu_client.append(cpu_seconds(pid) - used)
    after = direct_sequence(r.sequence(platform))
    into.direct_seq += [before, after]
    into.client_ratio.append(into.client_seq[-1] / ((before + after) / 2))


# long: the bench's rounds, interleaved, and its report
def measure(url: str, rounds: list[Round], size: int, pid: int, host_mbps: float | None) -> int:
    proxy, redirect = Figures(), Figures()
    for namespace in ("acme", REDIRECTED):  # every release read and verified (as `terraform init` asks first)
        with urllib.request.urlopen(f"{url}/v1/providers/{namespace}/widget/versions") as resp:
            resp.read()
    for r in rounds:
        zip_alone(url, "acme", r, "linux_amd64", pid, proxy, again=True)
        client_sequence(url, "acme", r, "darwin_arm64", pid, proxy)
        zip_alone(url, REDIRECTED, r, "linux_arm64", pid, redirect, again=False)
        client_sequence(url, REDIRECTED, r, "darwin_amd64", pid, redirect)
    versions: list[float] = []
    for _ in range(200):
        started = time.perf_counter()
        with urllib.request.urlopen(f"{url}/v1/providers/acme/widget/versions") as resp:
            resp.read()
        versions.append(time.perf_counter() - started)
    pace = f"the host sending at {host_mbps:g} MB/s" if host_mbps else "the host unpaced (loopback)"
    print(machine())
    print(f"zip of {size} MiB, {len(rounds)} rounds (one release each), interleaved, {pace}; medians")
    print(f"  the zip alone, direct from the host (API + storage redirect):  {median(proxy.direct) * 1000:8.1f} ms")
    print(f"  the zip alone, gitreg proxy, first (fetched, followed, kept): {median(proxy.first) * 1000:8.1f} ms")
    print(f"  the zip alone, gitreg proxy, later (the kept zip, from disk): {median(proxy.kept) * 1000:8.1f} ms")
    print(f"  the zip alone, direct, the redirect rule's platform:          {median(redirect.direct) * 1000:8.1f} ms")
    print(f"  the zip alone, gitreg redirect (302 to the storage URL):      {median(redirect.first) * 1000:8.1f} ms")
    print(f"  a client's sequence, direct (sums, signature, zip):           {median(proxy.direct_seq) * 1000:8.1f} ms")
    print(f"  a client's sequence, gitreg proxy (answer, sums, sig, zip):   {median(proxy.client_seq) * 1000:8.1f} ms")
    print(
        f"  a client's sequence, gitreg redirect:                         {median(redirect.client_seq) * 1000:8.1f} ms"
    )
    met = True

    def ratio(label: str, values: list[float], target: bool = True) -> None:
        nonlocal met
        found = median(values)
        verdict = ("met" if found <= 1.1 else "MISSED") if target else "reported"
        met = met and (found <= 1.1 or not target)
        print(f"  ratio, {label}: {found:.3f}x (median of {len(values)}; target <= 1.1x: {verdict})")

    # A zip's first download through the proxy is gitreg's copy and hash of every byte: judged against a
    # host behind a link (`--host-mbps`); on loopback, where they cost more than the transfer, reported.
    paced = host_mbps is not None
    ratio("proxy, the zip alone, first / direct", proxy.cold, target=paced)
    ratio("proxy, the zip alone, later / direct", proxy.warm)
    ratio("proxy, a client's first download / direct", proxy.client_ratio, target=paced)
    ratio("redirect, the zip alone / direct", redirect.cold)
    ratio("redirect, a client's download / direct", redirect.client_ratio)
    print(
        f"  gitreg's CPU: proxy, the zip alone first {median(proxy.cpu_first) * 1000:.0f} ms, "
        f"later {median(proxy.cpu_kept) * 1000:.0f} ms, a client's sequence {median(proxy.cpu_client) * 1000:.0f} ms; "
        f"redirect, the zip alone {median(redirect.cpu_first) * 1000:.0f} ms, "
        f"a client's sequence {median(redirect.cpu_client) * 1000:.0f} ms"
    )
    print(f"  warm versions answer: median {median(versions) * 1000:.2f} ms over {len(versions)} requests")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
