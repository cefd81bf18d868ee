"""`[[orgs]]`: GitLab groups and GitHub organizations whose repositories are served as modules.

Each table becomes an `OrgConfig`: its provider and API URL (an https:// origin the token may be
sent to), the group's path as the host spells it, the namespace, the `repository_pattern` that
turns a repository's name into {name} and {system}; each group listed once.
"""

from __future__ import annotations

import re

from gitreg.config.model import (
    DEFAULT_API_URLS,
    DEFAULT_REPOSITORY_PATTERN,
    MAX_REFRESH_SECONDS,
    MIN_REFRESH_SECONDS,
    Clone,
    OrgConfig,
    Provider,
    ProviderDownload,
)
from gitreg.config.module_rules import check_download
from gitreg.config.reader import TableReader, one_of
from gitreg.config.signing import read_require_signed
from gitreg.core import urls
from gitreg.core.names import NAME_RE

_GITHUB_OWNER_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})", re.ASCII)
_GITLAB_SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}", re.ASCII)
# A DNS name or IPv4 address: no scheme, user, port or path, and never starting with `-`.
_CLONE_HOST_RE = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?", re.ASCII)


def check_repository_pattern(r: TableReader, pattern: str) -> None:
    """The pattern names {name} and {system} once each, apart, and nothing else in braces."""
    for placeholder in ("name", "system"):
        count = pattern.count(f"{{{placeholder}}}")
        if count != 1:
            r.error(
                "repository_pattern",
                f"must contain {{{placeholder}}} exactly once, e.g. {DEFAULT_REPOSITORY_PATTERN!r}",
            )
    rest = pattern.replace("{name}", "").replace("{system}", "")
    if "{" in rest or "}" in rest:
        r.error("repository_pattern", "only {name} and {system} may appear in braces")
    if "{name}{system}" in pattern or "{system}{name}" in pattern:
        r.error("repository_pattern", "{name} and {system} need a separator between them, e.g. '-'")
    if len(pattern) > 200:
        r.error("repository_pattern", "is longer than 200 characters")


def check_api_url(r: TableReader, url: str) -> None:
    parts = urls.parse(url)  # the one URL parser
    if parts is None or parts.is_scp or parts.scheme not in ("https", "http") or not parts.host:
        r.error("api_url", f"{url!r} must be an https:// URL like https://gitlab.example.com/api/v4")
        return
    if parts.user is not None or parts.password is not None:
        r.error("api_url", "must not contain user info; put the API token in `token`")
    if parts.query or parts.fragment:
        r.error("api_url", "must not contain a query string or fragment")


def provider_download(r: TableReader, key: str) -> ProviderDownload:
    """How provider zips reach clients (`[[providers]] download`, `[[orgs]] provider_download`):
    "proxy" (the default) or "redirect"."""
    return one_of(r, key, r.str(key, "proxy"), ("proxy", "redirect")) or "proxy"


def _providers(r: TableReader) -> tuple[bool, str | None, ProviderDownload]:
    """`providers` (its terraform-provider-{type} repositories serve providers), `provider_keys` and
    `provider_download`."""
    providers = r.bool("providers", False)
    provider_keys = r.str("provider_keys")
    if providers and provider_keys is None:
        r.error("provider_keys", "is required with providers = true: the OpenPGP keys that sign the releases")
    download = provider_download(r, "provider_download")
    return providers, provider_keys, download


# long: one key after another, in the order the table documents them; split up it would hide none
def parse_org(r: TableReader) -> OrgConfig | None:
    provider: Provider | None = one_of(r, "provider", r.str("provider", required=True), ("gitlab", "github"))
    api_url = r.str("api_url")
    if api_url is None and provider is not None:
        api_url = DEFAULT_API_URLS[provider]
    if api_url is not None:
        api_url = api_url.rstrip("/")
        check_api_url(r, api_url)
    group = r.str("group", required=True)
    if group is not None and provider == "github" and not _GITHUB_OWNER_RE.fullmatch(group):
        r.error("group", f"{group!r} is not a GitHub organization or user name")
    if group is not None and provider == "gitlab":
        group = group.strip("/")
        if not group or not all(_GITLAB_SEGMENT_RE.fullmatch(s) and s not in (".", "..") for s in group.split("/")):
            r.error("group", f"{group!r} is not a GitLab group path like 'platform/terraform'")
    namespace = r.str("namespace", required=True)
    if namespace is not None and not NAME_RE.fullmatch(namespace):
        r.error(
            "namespace",
            f"{namespace!r} is not a valid namespace: expected 1-64 letters, digits, '-' or '_', "
            "starting and ending with a letter or digit",
        )
    token = r.str("token") or None
    pattern = r.str("repository_pattern", DEFAULT_REPOSITORY_PATTERN) or DEFAULT_REPOSITORY_PATTERN
    check_repository_pattern(r, pattern)
    topic = r.str("topic")
    if topic is not None and not topic.strip():
        r.error("topic", "must not be empty; leave it out to take repositories with any topics")
    clone: Clone = one_of(r, "clone", r.str("clone", OrgConfig.clone), ("https", "ssh")) or OrgConfig.clone
    download = r.str("download", OrgConfig.download) or OrgConfig.download
    check_download(r, download)
    refresh = r.number(
        "refresh_seconds", OrgConfig.refresh_seconds, minimum=MIN_REFRESH_SECONDS, maximum=MAX_REFRESH_SECONDS
    )
    include_archived = r.bool("include_archived", False)
    clone_hosts = tuple(h.lower() for h in r.str_list("clone_hosts"))
    for h in clone_hosts:
        if not _CLONE_HOST_RE.fullmatch(h):
            r.error("clone_hosts", f"{h[:100]!r} is not a host name like 'git.example.com' (no scheme, port or path)")
    max_repositories = r.int("max_repositories", OrgConfig.max_repositories, 1, 10_000_000)
    providers, provider_keys, download_providers = _providers(r)
    require_signed = read_require_signed(r)
    r.finish()
    if provider is None or api_url is None or group is None or namespace is None:
        return None
    return OrgConfig(
        provider=provider,
        api_url=api_url,
        group=group,
        namespace=namespace,
        token=token,
        repository_pattern=pattern,
        topic=topic.strip() if topic else None,
        clone=clone,
        download=download,
        refresh_seconds=refresh,
        include_archived=include_archived,
        clone_hosts=clone_hosts,
        max_repositories=max_repositories,
        providers=providers,
        provider_keys=provider_keys,
        provider_download=download_providers,
        require_signed=require_signed,
    )


def parse_orgs(root: TableReader) -> list[OrgConfig]:
    """`[[orgs]]`, each group listed once (archive mode needs no configured key: see `module_rules.parse_modules`)."""
    orgs: list[OrgConfig] = []
    seen_groups: dict[tuple[str, str, str], int] = {}
    for i, table in enumerate(root.table_list("orgs")):
        org = parse_org(TableReader(table, f"orgs[{i}]", root.problems, root.env))
        if org is None:
            continue
        group_key = (org.provider, org.api_url, org.group.lower())
        if group_key in seen_groups:
            root.problems.append(f"orgs[{i}].group: {org.group!r} is already listed by orgs[{seen_groups[group_key]}]")
        seen_groups.setdefault(group_key, i)
        orgs.append(org)
    return orgs
