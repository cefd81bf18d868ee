"""What a provider release must hold, read without any I/O: goreleaser's names and files.

`terraform-provider-{type}_{version}_{os}_{arch}.zip` per platform, `..._SHA256SUMS` listing
them (`<64 hex>  <name>` lines, as `sha256sum` writes), `..._SHA256SUMS.sig` (a detached
OpenPGP signature over it) and, optionally, `..._manifest.json` whose
`metadata.protocol_versions` are the plugin protocols (default `["5.0"]`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from gitreg.core.versions import parse_version
from gitreg.forges.records import Release, ReleaseAsset

DEFAULT_PROTOCOLS = ("5.0",)
_SUMS_LINE_RE = re.compile(r"([0-9a-f]{64})[ \t]+\*?(\S+)")
_PROTOCOL_RE = re.compile(r"[1-9][0-9]{0,2}\.[0-9]{1,3}")
_PLATFORM_RE = re.compile(r"[a-z0-9]{1,32}", re.ASCII)


@dataclass(frozen=True)
class Package:
    """One platform's zip: its file name, SHA-256 (from the signed SHA256SUMS) and the release asset."""

    os: str
    arch: str
    filename: str
    shasum: str
    asset: ReleaseAsset


@dataclass(frozen=True)
class ProviderVersion:
    """A release whose SHA256SUMS signature verified and whose packages SHA256SUMS lists."""

    version: str
    tag: str
    prerelease: bool
    protocols: tuple[str, ...]
    packages: tuple[Package, ...]
    sums_name: str
    sums: bytes = field(repr=False)
    signature: bytes = field(repr=False)
    key_id: str  # the key that signed (upper-case hex, 16 digits)

    def package(self, os: str, arch: str) -> Package | None:
        """The package for `os`/`arch`, if the release has one."""
        return next((p for p in self.packages if p.os == os and p.arch == arch), None)

    def by_name(self, filename: str) -> Package | None:
        """The package whose zip is called `filename`."""
        return next((p for p in self.packages if p.filename == filename), None)


@dataclass(frozen=True)
class Refusal:
    """A release not served, and why (what `gitreg check --probe` says)."""

    tag: str
    reason: str


@dataclass(frozen=True)
class Candidate:
    """A release that looks like a provider release, before its signature and sums are checked."""

    version: str
    tag: str
    prerelease: bool
    prefix: str  # terraform-provider-{type}_{version}
    sums: ReleaseAsset
    signature: ReleaseAsset
    manifest: ReleaseAsset | None
    zips: tuple[tuple[str, str, ReleaseAsset], ...]  # (os, arch, asset)


def candidate(type_: str, release: Release) -> Candidate | Refusal | None:
    """The release's provider files; a Refusal saying what is missing; None for a draft or a non-SemVer tag."""
    parsed = parse_version(release.tag)
    if release.draft or parsed is None:
        return None
    version = str(parsed)
    prefix = f"terraform-provider-{type_}_{version}"
    sums = release.asset(f"{prefix}_SHA256SUMS")
    if sums is None:
        return Refusal(release.tag, f"the release has no {prefix}_SHA256SUMS")
    signature = release.asset(f"{prefix}_SHA256SUMS.sig")
    if signature is None:
        return Refusal(release.tag, f"the release has no signature {prefix}_SHA256SUMS.sig: it cannot be verified")
    zips = []
    for asset in release.assets:
        rest = asset.name.removeprefix(prefix + "_")
        if rest != asset.name and rest.endswith(".zip"):
            os_, _, arch = rest.removesuffix(".zip").partition("_")
            if _PLATFORM_RE.fullmatch(os_) and _PLATFORM_RE.fullmatch(arch):
                zips.append((os_, arch, asset))
    if not zips:
        return Refusal(release.tag, f"the release has no package {prefix}_<os>_<arch>.zip")
    return Candidate(
        version=version,
        tag=release.tag,
        prerelease=release.prerelease or parsed.prerelease is not None,
        prefix=prefix,
        sums=sums,
        signature=signature,
        manifest=release.asset(f"{prefix}_manifest.json"),
        zips=tuple(sorted(zips, key=lambda z: (z[0], z[1]))),
    )


def checksums(document: bytes) -> dict[str, str] | None:
    """SHA256SUMS as {file name: hex}; None when a line is not `<64 hex>  <name>` (not a checksums file)."""
    try:
        text = document.decode("utf-8")
    except UnicodeDecodeError:
        return None
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _SUMS_LINE_RE.fullmatch(line.strip())
        if m is None:
            return None
        found[m.group(2)] = m.group(1)
    return found


def packages(c: Candidate, sums: dict[str, str]) -> tuple[Package, ...] | Refusal:
    """Every zip with its signed SHA-256; a Refusal when SHA256SUMS lacks one, or the host's digest disagrees."""
    found = []
    for os_, arch, asset in c.zips:
        shasum = sums.get(asset.name)
        if shasum is None:
            return Refusal(c.tag, f"SHA256SUMS does not list {asset.name}")
        if asset.digest is not None and asset.digest != f"sha256:{shasum}":
            return Refusal(c.tag, f"{asset.name} does not match SHA256SUMS (the Git host says {asset.digest})")
        found.append(Package(os_, arch, asset.name, shasum, asset))
    return tuple(found)


def protocols(manifest: bytes | None) -> tuple[str, ...] | str:
    """The manifest's `metadata.protocol_versions` (default ["5.0"]); a reason when it is malformed."""
    if manifest is None:
        return DEFAULT_PROTOCOLS
    try:
        data = json.loads(manifest)
    except (ValueError, RecursionError):
        return "the manifest is not JSON"
    listed = data.get("metadata", {}).get("protocol_versions") if isinstance(data, dict) else None
    if listed is None:
        return DEFAULT_PROTOCOLS
    if (
        not isinstance(listed, list)
        or not listed
        or not all(isinstance(p, str) and _PROTOCOL_RE.fullmatch(p) for p in listed)
    ):
        return 'the manifest\'s metadata.protocol_versions must be a list like ["6.0"]'
    return tuple(listed)
