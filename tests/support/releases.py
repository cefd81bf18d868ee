"""Releases on the fake Git hosts, built as goreleaser builds a Terraform provider's.

- `SigningKey`: a real OpenPGP key made by real `gpg` in a GNUPGHOME of its own; it signs
  SHA256SUMS as goreleaser's `signs` step does (`--detach-sign`, binary). `signing_key` makes one
  and, when done, stops the `gpg-agent` that signing started for that home (`close`).
- `goreleaser_assets`: a release's files: a zip per platform holding a stub provider binary,
  `terraform-provider-{type}_{version}_SHA256SUMS`, its `.sig`, `_manifest.json`.
- `FakeStorage`: the storage host GitHub's asset downloads redirect to (presigned URLs); like
  S3 it refuses a request that carries an `Authorization` header besides its query signature.
- `ReleasesMixin`: what `FakeForge` (forges.py) serves of releases: GitHub's "List releases"
  and asset downloads (`Accept: application/octet-stream`: 302 to the storage), GitLab's "List
  releases" with asset links and generic packages.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import itertools
import json
import os
import secrets
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web

_IDS = itertools.count(7000001)
PLATFORMS = (("linux", "amd64"), ("darwin", "arm64"))


@dataclass(frozen=True)
class SigningKey:
    """A real OpenPGP signing key in its own GNUPGHOME."""

    home: Path
    fingerprint: str
    armored: str

    def sign(self, data: bytes) -> bytes:
        """A binary detached signature of `data` (goreleaser: `gpg --batch --detach-sign`)."""
        out = subprocess.run(
            ["gpg", "--homedir", str(self.home), "--batch", "--local-user", self.fingerprint, "--detach-sign"],
            input=data,
            capture_output=True,
            check=True,
            timeout=30,
        )
        return out.stdout

    def write(self, path: Path) -> Path:
        """The armored public key in `path` (a `[[providers]] keys` file)."""
        path.write_text(self.armored)
        return path

    def close(self) -> None:
        """Stop the daemons gpg started for this home (its `gpg-agent`): none outlives the test."""
        subprocess.run(
            ["gpgconf", "--homedir", str(self.home), "--kill", "all"], capture_output=True, check=False, timeout=30
        )


@contextlib.contextmanager
def signing_key(directory: Path, who: str = "Acme Providers <providers@acme.example>") -> Iterator[SigningKey]:
    """make_key(), its home's `gpg-agent` stopped at the end (fixtures: `with signing_key(d) as k: yield k`)."""
    key = make_key(directory, who)
    try:
        yield key
    finally:
        key.close()


def make_key(directory: Path, who: str = "Acme Providers <providers@acme.example>") -> SigningKey:
    """A new ed25519 signing key made by `gpg` in `directory` (its GNUPGHOME)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    base = ["gpg", "--homedir", str(directory), "--batch"]
    subprocess.run(
        [*base, "--passphrase", "", "--quick-gen-key", who, "ed25519", "sign", "never"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    listing = subprocess.run([*base, "--with-colons", "--list-keys"], capture_output=True, text=True, check=True)
    fingerprint = next(line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:"))
    armored = subprocess.run([*base, "--armor", "--export", fingerprint], capture_output=True, text=True, check=True)
    return SigningKey(directory, fingerprint, armored.stdout)


def provider_zip(type_: str, version: str, os_: str, arch: str, payload: int = 0) -> bytes:
    """A provider package as goreleaser zips it: the binary alone, no directory entries (`payload`
    random bytes in it make a large, incompressible zip)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        info = zipfile.ZipInfo(f"terraform-provider-{type_}_v{version}", date_time=(2026, 1, 1, 0, 0, 0))
        info.external_attr = 0o100755 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        stub = f"#!/bin/sh\n# stub provider {type_} {version} for {os_}_{arch}\nexit 1\n".encode()
        z.writestr(info, stub + b"x" * 4096 + secrets.token_bytes(payload))
    return buffer.getvalue()


def shasums(files: dict[str, bytes]) -> bytes:
    """`sha256sum`'s output for `files`, sorted by name (goreleaser's checksums file)."""
    return "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(files.items())).encode()


def goreleaser_assets(
    type_: str,
    version: str,
    key: SigningKey | None,
    platforms: tuple[tuple[str, str], ...] = PLATFORMS,
    protocols: tuple[str, ...] | None = ("6.0",),
    payload: int = 0,
) -> dict[str, bytes]:
    """A release's files as goreleaser makes them (`key` None: no signature; `protocols` None: no manifest)."""
    prefix = f"terraform-provider-{type_}_{version}"
    files = {f"{prefix}_{os_}_{arch}.zip": provider_zip(type_, version, os_, arch, payload) for os_, arch in platforms}
    if protocols is not None:
        files[f"{prefix}_manifest.json"] = json.dumps(
            {"version": 1, "metadata": {"protocol_versions": list(protocols)}}
        ).encode()
    sums = shasums(files)
    files[f"{prefix}_SHA256SUMS"] = sums
    if key is not None:
        files[f"{prefix}_SHA256SUMS.sig"] = key.sign(sums)
    return files


class FakeStorage:
    """The storage host of release assets (GitHub's objects.githubusercontent.com): presigned URLs only."""

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}
        self.seen: list[dict[str, str]] = []  # the headers of every request
        # A slow or failing storage (prefetch tests): the first `hold_at` bytes of a larger asset, then
        # nothing until `go` is set; then the rest, or (`cut`) the connection dropped.
        self.hold_at: int | None = None
        self.go = asyncio.Event()
        self.cut = False
        # Bytes a second each answer is sent at (the bench's host behind a real link); None: at once.
        self.rate: float | None = None
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def put(self, data: bytes) -> str:
        """Store `data`; its presigned URL."""
        name = secrets.token_hex(8)
        self._objects[name] = data
        return f"{self.base_url}/objects/{name}?X-Amz-Signature={secrets.token_hex(16)}"

    async def _get(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        if "Authorization" in request.headers:  # S3's answer to a second credential
            return web.Response(status=400, text="Only one auth mechanism allowed")
        data = self._objects.get(request.match_info["name"])
        if data is None or "X-Amz-Signature" not in request.query:
            return web.Response(status=403, text="AccessDenied")
        if self.rate is not None:
            return await self._paced(request, data, self.rate)
        if self.hold_at is None or len(data) <= self.hold_at:
            return web.Response(body=data, content_type="application/octet-stream")
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = len(data)
        await response.prepare(request)
        await response.write(data[: self.hold_at])
        await self.go.wait()
        if self.cut:  # a storage host failing half-way
            self.cut = False
            assert request.transport is not None
            request.transport.abort()
            return response
        await response.write(data[self.hold_at :])
        await response.write_eof()
        return response

    async def _paced(self, request: web.Request, data: bytes, rate: float) -> web.StreamResponse:
        """`data` at `rate` bytes a second, 256 KiB at a time."""
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = len(data)
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        started, piece = loop.time(), 256 * 1024
        for offset in range(0, len(data), piece):
            await response.write(data[offset : offset + piece])
            await asyncio.sleep(max(0.0, started + (offset + piece) / rate - loop.time()))
        await response.write_eof()
        return response

    async def start(self) -> FakeStorage:
        app = web.Application()
        app.router.add_get("/objects/{name}", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://localhost:{self._runner.addresses[0][1]}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class ReleasesMixin:
    """Releases and their assets on a `FakeForge` (the attributes below are the forge's)."""

    provider: str
    group: str
    base_url: str
    api_path: str
    _lock: threading.Lock
    storage: FakeStorage | None = None  # where GitHub asset downloads redirect (None: served directly)

    @property
    def gitlab_api(self) -> str:
        """GitLab: the API's path on the host (below the sub-path it is served under, if any)."""
        return f"{self.api_path}/api/v4"

    def _release_state(self) -> tuple[dict[str, list[dict[str, Any]]], dict[int, bytes]]:
        if not hasattr(self, "_releases"):
            self._releases: dict[str, list[dict[str, Any]]] = {}
            self._asset_bytes: dict[int, bytes] = {}
        return self._releases, self._asset_bytes

    def add_release(
        self,
        name: str,
        tag: str,
        files: dict[str, bytes],
        *,
        draft: bool = False,
        prerelease: bool = False,
        package: bool = False,
    ) -> dict[str, Any]:
        """Publish release `tag` of repository `name` with `files` (GitLab `package`: generic-package links)."""
        releases, stored = self._release_state()
        full = f"{self.group}/{name}"
        with self._lock:
            assets = []
            for file_name, data in files.items():
                aid = next(_IDS)
                stored[aid] = data
                assets.append((aid, file_name, data))
            obj = (
                self._github_release(full, tag, assets, draft, prerelease)
                if self.provider == "github"
                else self._gitlab_release(full, tag, assets, package)
            )
            releases.setdefault(full.lower(), []).insert(0, obj)  # newest first, as both hosts list them
            return json.loads(json.dumps(obj))

    def replace_asset(self, name: str, tag: str, file_name: str, data: bytes) -> None:
        """Change an asset's bytes behind the release's back (a tampered upload)."""
        releases, stored = self._release_state()
        with self._lock:
            for release in releases[f"{self.group}/{name}".lower()]:
                if release["tag_name"] == tag:
                    assets = release["assets"]
                    for asset in assets["links"] if isinstance(assets, dict) else assets:
                        if asset["name"] == file_name:
                            stored[int(asset["id"])] = data

    def _github_release(
        self, full: str, tag: str, assets: list[tuple[int, str, bytes]], draft: bool, prerelease: bool
    ) -> dict[str, Any]:
        api = f"{self.base_url}/repos/{full}/releases"
        return {
            "url": f"{api}/{next(_IDS)}",
            "id": next(_IDS),
            "tag_name": tag,
            "name": tag,
            "draft": draft,
            "prerelease": prerelease,
            "created_at": "2026-01-01T00:00:00Z",
            "published_at": None if draft else "2026-01-01T00:00:00Z",
            "assets": [
                {
                    "url": f"{api}/assets/{aid}",
                    "id": aid,
                    "name": file_name,
                    "label": "",
                    "content_type": "application/zip" if file_name.endswith(".zip") else "application/octet-stream",
                    "state": "uploaded",
                    "size": len(data),
                    "digest": f"sha256:{hashlib.sha256(data).hexdigest()}",
                    "browser_download_url": f"https://github.com/{full}/releases/download/{tag}/{file_name}",
                }
                for aid, file_name, data in assets
            ],
        }

    def _gitlab_release(
        self, full: str, tag: str, assets: list[tuple[int, str, bytes]], package: bool
    ) -> dict[str, Any]:
        project = quote(full, safe="")
        links = []
        for aid, file_name, _ in assets:
            if package:
                url = f"{self.base_url}{self.gitlab_api}/projects/{project}/packages/generic/release/{tag}/{file_name}"
                url += f"?aid={aid}"
            else:
                url = f"{self.base_url}{self.api_path}/{full}/-/releases/{tag}/downloads/{file_name}?aid={aid}"
            links.append(
                {
                    "id": aid,
                    "name": file_name,
                    "url": url,
                    "direct_asset_url": url,
                    "link_type": "package" if package else "other",
                }
            )
        return {
            "tag_name": tag,
            "name": tag,
            "description": "",
            "created_at": "2026-01-01T00:00:00Z",
            "released_at": "2026-01-01T00:00:00Z",
            "upcoming_release": False,
            "assets": {"count": len(links), "sources": [], "links": links},
        }

    async def _list_releases(self, request: web.Request, full: str) -> web.Response:
        releases, _ = self._release_state()
        with self._lock:
            listed = releases.get(full.lower())
            repos: dict[str, dict[str, Any]] = getattr(self, "_repos", {})
            known = listed is not None or any(
                str(r.get("full_name") or r.get("path_with_namespace")).lower() == full.lower() for r in repos.values()
            )
            found = json.loads(json.dumps(listed or []))
        if not known:  # as both hosts answer for a repository that does not exist (or is not visible)
            return web.json_response({"message": "Not Found"}, status=404)
        per_page = int(request.query.get("per_page", "30"))
        page = max(1, int(request.query.get("page", "1")))
        chunk = found[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(found):
            url = f"{self.base_url}{request.raw_path.partition('?')[0]}?per_page={per_page}&page={page + 1}"
            headers["Link"] = f'<{url}>; rel="next"'
        return web.json_response(chunk, headers=headers)

    async def _github_releases(self, request: web.Request) -> web.Response:
        return await self._list_releases(request, f"{request.match_info['owner']}/{request.match_info['repo']}")

    async def _asset_data(self, aid: str) -> bytes | None:
        _, stored = self._release_state()
        with self._lock:
            return stored.get(int(aid)) if aid.isdigit() else None

    async def _github_asset(self, request: web.Request) -> web.StreamResponse:
        data = await self._asset_data(request.match_info["id"])
        if data is None:
            return web.json_response({"message": "Not Found"}, status=404)
        if request.headers.get("Accept") != "application/octet-stream":
            return web.json_response({"id": int(request.match_info["id"]), "size": len(data)})
        if self.storage is not None:
            return web.Response(status=302, headers={"Location": self.storage.put(data)})
        return web.Response(body=data, content_type="application/octet-stream")

    async def _gitlab_releases(self, request: web.Request) -> web.Response:
        raw = request.raw_path.partition("?")[0].removeprefix(f"{self.gitlab_api}/projects/").removesuffix("/releases")
        return await self._list_releases(request, unquote(raw))

    async def _gitlab_download(self, request: web.Request) -> web.StreamResponse:
        data = await self._asset_data(request.query.get("aid", ""))
        if data is None:
            return web.json_response({"message": "404 Not Found"}, status=404)
        if "/-/releases/" in request.path and self.storage is not None:  # a release link: to its package
            tail = f"{request.match_info['tag']}/{request.match_info['file']}?aid={request.query['aid']}"
            project = quote(request.match_info["path"], safe="")
            target = f"{self.gitlab_api}/projects/{project}/packages/generic/release/{tail}"
            return web.Response(status=302, headers={"Location": target})
        if self.storage is not None:  # object storage without proxy_download: a presigned URL
            return web.Response(status=302, headers={"Location": self.storage.put(data)})
        return web.Response(body=data, content_type="application/octet-stream")

    def add_release_routes(self, app: web.Application) -> None:
        """The release endpoints (before the host's catch-all project route)."""
        if self.provider == "github":
            app.router.add_get("/repos/{owner}/{repo}/releases", self._github_releases)
            app.router.add_get("/repos/{owner}/{repo}/releases/assets/{id}", self._github_asset)
        else:
            app.router.add_get(f"{self.gitlab_api}/projects/{{project:[^/]+}}/releases", self._gitlab_releases)
            app.router.add_get(
                f"{self.gitlab_api}/projects/{{project:[^/]+}}/packages/generic/{{tail:.+}}", self._gitlab_download
            )
            app.router.add_get("/{path:.+}/-/releases/{tag}/downloads/{file}", self._gitlab_download)
