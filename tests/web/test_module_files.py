"""The pages' files endpoint: a README's relative images served from the module's files at that version."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from gitreg.config.model import Config
from gitreg.index.files import NotAnImage, checked_path, sniffed
from gitreg.web.keys import BROWSE
from tests.support.app import indexed_in_full, make_config, served_app
from tests.support.pages import SVG, TERRAFORM_DOCS_README, png
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo

PAGE = "/modules/acme/vpc/aws/1.0.0"
FILES = f"{PAGE}/files/"
README = """# VPC

<p align="center"><img src="docs/diagram.png" alt="Diagram"></p>

![logo](./logo.svg) [guide](docs/guide.md)
"""


def image_repo(root: Path) -> GitRepo:
    """A `file://` repository (no web page) whose README shows images of its own."""
    repo = GitRepo(root, "vpc")
    files = {
        "docs/diagram.png": png(40, 20),
        "logo.svg": SVG,
        "fake.png": b"#!/bin/sh\necho not an image\n",
        "notes.txt": b"plain text\n",
        "big.png": png(1) + b"\x00" * (6 << 20),
    }
    for name, data in files.items():
        (repo.work / name).parent.mkdir(parents=True, exist_ok=True)
        (repo.work / name).write_bytes(data)
    repo.commit({"README.md": README, "main.tf": 'variable "cidr" {\n  description = "The **CIDR**."\n}\n'})
    repo.tag("v1.0.0")
    return repo


def images_config(tmp_path: Path, **sections) -> tuple[Config, GitRepo]:
    repo = image_repo(tmp_path / "repos")
    rule = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": repo.url}
    return make_config([rule], storage={"path": str(tmp_path / "state")}, **sections), repo


async def client_for(serve_client, tmp_path: Path, **sections):
    config, repo = images_config(tmp_path, **sections)
    return await indexed_in_full(await serve_client(config)), repo


# The tests taking `images` only read what `gitreg serve` builds (its index process too) for the
# image repository: one app for the module, run on the module's event loop (`module_loop`).
module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def images(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[TestClient, GitRepo]]:
    config, repo = images_config(tmp_path_factory.mktemp("images"))
    async with TestClient(TestServer(served_app(config))) as client:
        yield await indexed_in_full(client), repo


@pytest.mark.slow
async def test_the_files_endpoint_needs_a_session_as_the_pages_do(serve_client, tmp_path):
    auth = {"tokens": ["files-token-0123456789abcdef"], "signing_key": "s" * 40}
    client, _ = await client_for(serve_client, tmp_path, auth=auth)
    resp = await client.get(FILES + "docs/diagram.png", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"].startswith("/login?")


def test_only_paths_inside_the_folder_named_and_shaped_as_images_pass():
    for bad in ("../x.png", "a/../../x.png", "/etc/x.png", "a\\..\\x.png", "./x.png", "a//x.png", "x.png\x00", "x.txt"):
        with pytest.raises(NotAnImage):
            checked_path(bad)
    assert checked_path("docs/a b.PNG") == "docs/a b.PNG"
    assert sniffed(png(1), "image/png") and not sniffed(png(1), "image/gif")
    assert sniffed(SVG, "image/svg+xml") and not sniffed(b"<html><svg>", "image/svg+xml")


@pytest.mark.slow
async def test_a_terraform_docs_readme_page_shows_no_markup_and_its_anchors_have_targets(serve_client, tmp_path):
    repo = GitRepo(tmp_path / "repos", "docs")
    repo.commit({"README.md": TERRAFORM_DOCS_README, "main.tf": 'variable "cidr" {}\n'})
    repo.tag("v1.0.0")
    rule = {"namespace": "acme", "name": "docs", "system": "aws", "repository": repo.url}
    client = await indexed_in_full(await serve_client(make_config([rule], storage={"path": str(tmp_path / "state")})))
    text = await (await client.get("/modules/acme/docs/aws")).text()
    readme = text.split('id="readme"', 1)[1].split('<div class="markdown">', 1)[1].split("</section>", 1)[0]
    assert "&lt;" not in readme.replace("&gt;= ", "") and "BEGIN_TF_DOCS" not in readme
    links = set(re.findall(r'href="#([^"]+)"', readme))
    targets = set(re.findall(r'(?:id|name)="([^"]+)"', readme))
    assert {"user-content-inputs", "user-content-input_cidr"} <= links <= targets


def _rss_bytes(pid: int) -> int:
    """The resident set size of process `pid` (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _many_images_repo(root: Path, commits: int, per_commit: int, size: int) -> GitRepo:
    """A repository of `commits` tagged commits (v1.0.0, v1.1.0...), each with `per_commit` distinct
    images of `size` bytes (random, so every one is its own blob)."""
    repo = GitRepo(root, "pictures")
    for where in (repo.work, repo.bare):  # random bytes neither compress nor delta: no time spent trying
        subprocess.run(["git", "-C", str(where), "config", "core.compression", "0"], check=True)
        subprocess.run(["git", "-C", str(where), "config", "core.bigFileThreshold", "1m"], check=True)
    for c in range(commits):
        for i in range(per_commit):
            (repo.work / f"img{i}.png").write_bytes(png(1) + os.urandom(size))
        repo.commit({"main.tf": f"# {c}\n"})
        repo.tag(f"v1.{c}.0")
    return repo


@pytest.mark.slow
async def test_many_distinct_large_images_at_once_keep_the_servers_memory_bounded(tmp_path):
    # 8 versions of 6 distinct 5 MB images, each asked for twice at once (96 requests): the
    # serving process's memory stays within what the README states (64 MiB of images: 32 kept,
    # one commit of at most 32 being read), and comes back to its start plus what is kept. Before:
    # 8 commits read at once, each image a 5 MB `bytes` in malloc's arenas: +125 MiB, +68 after.
    commits, per_commit, size = 8, 6, 5_000_000
    repo = await asyncio.to_thread(_many_images_repo, tmp_path / "repos", commits, per_commit, size)
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "state"}"\n'
        f'[[modules]]\nnamespace = "acme"\nname = "pictures"\nsystem = "aws"\nrepository = "{repo.url}"\n'
    )
    args = ("--config", str(config))
    urls = [f"/modules/acme/pictures/aws/1.{c}.0/files/img{i}.png" for c in range(commits) for i in range(per_commit)]
    with GitregProcess(*args, cwd=tmp_path) as proc:
        assert proc.proc is not None
        pid = proc.proc.pid
        for c in range(commits):  # the mirror made and every version's page shown once
            await asyncio.to_thread(_shown, f"{proc.url}/modules/acme/pictures/aws/1.{c}.0")
        start = _rss_bytes(pid)
        peak = start
        sampling = True

        def sample() -> None:
            nonlocal peak
            while sampling:
                peak = max(peak, _rss_bytes(pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            with ThreadPoolExecutor(len(urls) * 2) as pool:
                sizes = list(pool.map(lambda u: _length(proc.url + u), urls * 2))
            assert sizes == [len(png(1)) + size] * len(urls) * 2
        finally:
            sampling = False
            sampler.join()
        await asyncio.sleep(2)
        after = _rss_bytes(pid)
    mib = 1 << 20
    print(f"RSS start {start / mib:.0f} MiB, peak {peak / mib:.0f} MiB, after {after / mib:.0f} MiB")
    assert peak - start <= 64 * mib + 24 * mib, (start / mib, peak / mib)  # the images, and serving's own
    assert after - start <= 32 * mib + 12 * mib, (start / mib, after / mib)  # what is kept


def _shown(url: str, timeout: float = 120) -> None:
    """Wait until the page at `url` answers 200 (not "being indexed")."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=60) as resp:
                resp.read()
                return
        except urllib.error.HTTPError as e:
            if e.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _length(url: str) -> int:
    with urllib.request.urlopen(url, timeout=600) as resp:  # 8 commits read one after another, on a busy machine
        assert resp.status == 200
        return len(resp.read())


# --- the tests of the app built once for the module, last, as its event loop runs only while they
# do (paused longer than SILENCE_SECONDS, the serving process kills its index process) ---------------


@module_loop
async def test_a_file_repositorys_readme_images_come_from_gitreg(images):
    client, repo = images
    text = await (await client.get(PAGE)).text()
    assert f'<img src="{FILES}docs/diagram.png" alt="Diagram"' in text and f'src="{FILES}logo.svg"' in text
    assert "guide" in text and "docs/guide.md" not in text  # no web page to link to: the text stays
    assert "<strong>CIDR</strong>" in text  # descriptions' Markdown is rendered too
    resp = await client.get(FILES + "docs/diagram.png")
    assert resp.status == 200 and resp.content_type == "image/png"
    assert await resp.read() == png(40, 20)
    sha = repo.git("rev-parse", "v1.0.0")
    assert resp.headers["ETag"] == f'"{sha}"' and "immutable" in resp.headers["Cache-Control"]
    again = await client.get(FILES + "docs/diagram.png", headers={"If-None-Match": f'"{sha}"'})
    assert again.status == 304
    # One read of the commit serves every image of the page.
    assert (await client.get(FILES + "logo.svg")).status == 200 and client.app[BROWSE].files.reads == 1


@module_loop
async def test_an_svg_is_served_so_that_it_cannot_run_script(images):
    client, _ = images
    resp = await client.get(FILES + "logo.svg")
    assert resp.status == 200 and resp.headers["Content-Type"] == "image/svg+xml"
    assert resp.headers["Content-Security-Policy"] == "default-src 'none'; style-src 'unsafe-inline'; sandbox"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"


@module_loop
async def test_the_files_endpoint_refuses_non_images_traversal_and_large_files(images):
    client, _ = images
    for path in ("fake.png", "notes.txt", "README.md", "missing.png", "docs//diagram.png"):
        resp = await client.get(FILES + path)
        assert resp.status == 404 and resp.content_type == "text/html", path
    for raw in ("..%2F..%2Fetc%2Fpasswd.png", "%2E%2E/vpc.git/config.png", "docs%2F..%2F..%2Fx.png", "%2Fetc%2Fx.png"):
        resp = await client.get(FILES + raw)
        assert resp.status == 404, raw
    resp = await client.get(FILES + "big.png")
    assert resp.status == 413 and "larger than 5 MiB" in await resp.text()
    assert (await client.get("/modules/acme/vpc/aws/9.9.9/files/docs/diagram.png")).status == 404
