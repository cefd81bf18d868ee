"""The registry service: module address -> rule -> cached tags -> versions and locations."""

from __future__ import annotations

import re
from urllib.parse import quote

from .cache import TagCache
from .config import Config
from .errors import BadRequest, ModuleNotFound, VersionNotFound
from .names import ModuleAddress
from .rules import ResolvedModule, RuleIndex
from .versions import ModuleVersions, TaggedVersion, parse_version, select_versions

_SCP_RE = re.compile(r"^(?P<user>[A-Za-z0-9._-]+@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>(?!//).*)$")


class Registry:
    """Answers the module registry protocol from configured rules and Git tags."""

    def __init__(self, config: Config, cache: TagCache) -> None:
        self.config = config
        self.cache = cache
        self.rules = RuleIndex(config.modules)

    def resolve(self, address: ModuleAddress) -> ResolvedModule:
        """The rule serving `address`; ModuleNotFound when no rule allows it."""
        resolved = self.rules.match(address)
        if resolved is None:
            raise ModuleNotFound(f"module {address} is not served by this registry: no [[modules]] rule matches it")
        return resolved

    async def versions(self, address: ModuleAddress) -> tuple[ResolvedModule, ModuleVersions]:
        """The module's versions from its repository's (cached) tags."""
        resolved = self.resolve(address)
        tags = await self.cache.get(resolved.repository)
        key = ("versions", resolved.rule.tag_prefix)
        found = tags.derived.get(key)
        if found is None:
            # Parsed once per fetched tag list, not per request: this is the warm path.
            found = tags.derived[key] = select_versions(tags.tags, resolved.rule.tag_prefix)
        assert isinstance(found, ModuleVersions)
        return resolved, found

    async def find_version(self, address: ModuleAddress, version: str) -> tuple[ResolvedModule, TaggedVersion]:
        """The tagged version a client asked for; VersionNotFound when it is not a tag."""
        if parse_version(version) is None:
            raise BadRequest(f"{version[:80]!r} is not a SemVer version (expected MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD])")
        resolved, versions = await self.versions(address)
        found = versions.find(version)
        if found is None:
            listed = ", ".join(tv.canonical for tv in versions.versions[:5]) or "none"
            raise VersionNotFound(f"module {address} has no version {version}; the highest listed: {listed}")
        return resolved, found

    async def download_location(self, address: ModuleAddress, version: str) -> str:
        """The go-getter address Terraform and OpenTofu fetch the version from."""
        resolved, found = await self.find_version(address, version)
        return git_location(resolved.clone_url, resolved.rule.path, found.sha if resolved.rule.ref == "commit" else found.tag)


def git_location(clone_url: str, path: str, ref: str) -> str:
    """`git::<url>[//<path>]?ref=<ref>`, with `ref` percent-encoded (a `+` must reach git as `+`)."""
    scp = _SCP_RE.match(clone_url) if "://" not in clone_url else None
    if scp is not None:
        # go-getter's forced git:: form wants a URL; scp-like `user@host:path` is ssh.
        clone_url = f"ssh://{scp.group('user') or ''}{scp.group('host')}/{scp.group('path').lstrip('/')}"
    subdir = f"//{path}" if path else ""
    return f"git::{clone_url}{subdir}?ref={quote(ref, safe='/')}"
