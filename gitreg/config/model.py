"""Configuration: TOML -> frozen dataclasses -> validation -> ConfigError.

Every problem is collected (not just the first) and named by its key path, e.g.
`modules[2].repository: missing`, so `gitreg check` can list them all at once.
"""

from __future__ import annotations

import builtins
import dataclasses
import difflib
import functools
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from gitreg.core import urls
from gitreg.core.errors import ConfigError
from gitreg.core.names import NAME_RE, SYSTEM_RE
from gitreg.git.pool import default_max_per_host, default_max_queue

PLACEHOLDERS = ("namespace", "name", "system")
DOWNLOAD_PLACEHOLDERS = ("namespace", "name", "system", "tag", "version", "sha")
DEFAULT_PROTOCOLS = ("https", "ssh", "git", "file")
KNOWN_PROTOCOLS = ("https", "http", "ssh", "git", "file")
# The keys that take one of a few words; read with _one_of, which returns the Literal.
Backend = Literal["memory", "redis"]
Ref = Literal["tag", "commit"]
Provider = Literal["gitlab", "github"]
Clone = Literal["https", "ssh"]
Choice = TypeVar("Choice", bound=str)
_ENV_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TEMPLATE_RE = re.compile(r"\{([^{}]*)\}")
# Upper bounds of the number keys. Every key has one, so no value can overflow a timer
# (threading.Timer raises OverflowError past about 292 years; nan never fires), turn a cache
# off by accident (`ttl_seconds = nan` compares false with everything), or reach an absurd size.
DAY = 86400.0
MAX_TIMEOUT = DAY  # a timeout past a day is a missing timeout
MAX_CACHE_SECONDS = 30 * DAY  # tag lists are re-read within a month even with webhooks
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config file is a few KiB; refuse to read /dev/zero whole


@dataclass(frozen=True)
class ServerConfig:
    """`[server]`: where to listen, and optional TLS."""

    host: str = "127.0.0.1"
    port: int = 8080
    tls_cert: str | None = None
    tls_key: str | None = None
    public_url: str | None = None
    # A connection with no complete request (headers) for this long is closed: the header-read
    # timeout of a new connection and the keep-alive idle timeout between requests, in one timer.
    idle_timeout_seconds: float = 15.0


@dataclass(frozen=True)
class CacheConfig:
    """`[cache]`: how long a repository's tag list is reused, and what happens when it expires."""

    ttl_seconds: float = 300.0
    stale_seconds: float = 86400.0
    negative_ttl_seconds: float = 30.0
    error_retry_seconds: float = 5.0
    max_repositories: int = 10000
    refresh_ahead: bool = False
    # "memory": this process only. "redis": replicas share tag lists, invalidations, download
    # counts, moved-tag records and the index through Redis (gitreg/shared.py).
    backend: Backend = "memory"
    redis_url: str | None = field(default=None, repr=False)  # may hold a password
    redis_prefix: str = "gitreg:"


@dataclass(frozen=True)
class GitConfig:
    """`[git]`: how gitreg runs git against upstream hosts."""

    timeout_seconds: float = 30.0
    max_concurrency: int = 8
    max_queue: int = 256  # gitpool.default_max_queue(max_concurrency) when unset
    max_per_host: int = 6  # gitpool.default_max_per_host(max_concurrency) when unset
    protocols: tuple[str, ...] = DEFAULT_PROTOCOLS
    allow_moved_tags: bool = False


@dataclass(frozen=True)
class StorageConfig:
    """`[storage]`: gitreg's own files (mirrors, archives, moved-tag records, download counts)."""

    path: str = field(default_factory=lambda: default_storage_path())
    max_bytes: int = 5 * 1024**3


@dataclass(frozen=True)
class UiConfig:
    """`[ui]`: the module browser pages (`/`, `/modules/...`)."""

    enabled: bool = True
    title: str = "gitreg"


@dataclass(frozen=True)
class IndexConfig:
    """`[index]`: the background index that list, search, details and pages answer from."""

    # Off: no background git at all, and nothing is listed (a registry only for `terraform init`).
    enabled: bool = True


@dataclass(frozen=True)
class WebhooksConfig:
    """`[webhooks]`: shared secrets of the GitHub and GitLab webhooks; unset disables one."""

    github_secret: str | None = field(default=None, repr=False)
    gitlab_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class TokenConfig:
    """One registry token, optionally limited to namespaces; `token` may be `sha256:<hex>`."""

    token: str = field(repr=False)
    namespaces: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AuthConfig:
    """`[auth]`: registry tokens; empty means the registry is open."""

    tokens: tuple[TokenConfig, ...] = field(default=(), repr=False)
    metrics_token: str | None = field(default=None, repr=False)
    signing_key: str | None = field(default=None, repr=False)
    # How long a signed archive URL stays valid (Terraform fetches it right after the lookup).
    signed_url_ttl_seconds: float = 600.0

    @property
    def enabled(self) -> bool:
        """True when `/v1/...` requests need a bearer token."""
        return bool(self.tokens)


@dataclass(frozen=True)
class ModuleRule:
    """One `[[modules]]` entry; None in namespace/name/system matches anything."""

    repository: str
    namespace: str | None = None
    name: str | None = None
    system: str | None = None
    path: str = ""
    tag_prefix: str = ""
    clone_url: str | None = None
    ref: Ref = "tag"
    download: str = "git"
    verified: bool = False
    # For a tarball URL template: the wrapper directory inside the tarball (a template too);
    # None means "infer it for GitHub and GitLab URLs, else the files are at the root".
    archive_root: str | None = None

    @property
    def specificity(self) -> int:
        """How many of namespace/name/system the rule fixes."""
        return sum(v is not None for v in (self.namespace, self.name, self.system))

    @property
    def explicit(self) -> bool:
        """True when the rule names exactly one module."""
        return self.specificity == 3


@dataclass(frozen=True)
class Credential:
    """One `[[credentials]]` entry, applied to repositories under `url`."""

    url: str
    username: str
    password: str = field(repr=False)


DEFAULT_REPOSITORY_PATTERN = "terraform-{system}-{name}"
DEFAULT_API_URLS = {"github": "https://api.github.com", "gitlab": "https://gitlab.com/api/v4"}
# An org listing costs one API call per 100 repositories: more often than this hammers the
# host (GitHub allows 5,000 calls an hour); less often than this leaves the listing stale.
MIN_REFRESH_SECONDS = 10.0
MAX_REFRESH_SECONDS = 7 * 86400.0
_GITHUB_OWNER_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})", re.ASCII)
_GITLAB_SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}", re.ASCII)


@dataclass(frozen=True)
class OrgConfig:
    """One `[[orgs]]` entry: a GitLab group or GitHub organization whose repositories are modules."""

    provider: Provider
    api_url: str
    group: str
    namespace: str
    token: str | None = field(default=None, repr=False)
    repository_pattern: str = DEFAULT_REPOSITORY_PATTERN
    topic: str | None = None
    clone: Clone = "https"
    download: str = "git"
    refresh_seconds: float = 600.0
    include_archived: bool = False

    @property
    def pattern(self) -> re.Pattern[str]:
        """`repository_pattern` as an anchored regex with `name` and `system` groups."""
        return compile_repository_pattern(self.repository_pattern)

    @property
    def label(self) -> str:
        """How logs, metrics and reports name the org (no token, no URL)."""
        return f"{self.provider}:{self.group}"


@functools.lru_cache(maxsize=256)
def compile_repository_pattern(pattern: str) -> re.Pattern[str]:
    """`terraform-{system}-{name}` -> an anchored regex; {name} and {system} follow the registry grammar."""
    parts = re.split(r"(\{name\}|\{system\})", pattern)
    groups = {"{name}": f"(?P<name>{NAME_RE.pattern})", "{system}": f"(?P<system>{SYSTEM_RE.pattern})"}
    return re.compile(r"\A" + "".join(groups.get(part) or re.escape(part) for part in parts) + r"\Z", re.ASCII)


@dataclass(frozen=True)
class Config:
    """The whole, validated configuration."""

    server: ServerConfig = ServerConfig()
    cache: CacheConfig = CacheConfig()
    git: GitConfig = GitConfig()
    auth: AuthConfig = AuthConfig()
    storage: StorageConfig = field(default_factory=lambda: StorageConfig())
    webhooks: WebhooksConfig = WebhooksConfig()
    index: IndexConfig = IndexConfig()
    ui: UiConfig = UiConfig()
    modules: tuple[ModuleRule, ...] = ()
    credentials: tuple[Credential, ...] = field(default=(), repr=False)
    source: str | None = None
    orgs: tuple[OrgConfig, ...] = ()


def default_storage_path() -> str:
    """`$XDG_STATE_HOME/gitreg`, else `~/.local/state/gitreg`."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "gitreg")


class _Reader:
    """Reads one TOML table, recording problems under its key path instead of raising."""

    # The methods `str`, `int` and `bool` shadow the built-in types in this class's body: the
    # annotations after them spell the types `builtins.str` and so on.

    def __init__(self, table: Any, path: str, problems: list[str], env: Mapping[str, str]) -> None:
        self.path = path
        self.problems = problems
        self.env = env
        self.seen: set[str] = set()
        if not isinstance(table, dict):
            self.error("", f"must be a table, not {_type_name(table)}")
            table = {}
        self.table: dict[str, Any] = table

    def key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path and key else (self.path or key)

    def error(self, key: str, reason: str) -> None:
        self.problems.append(f"{self.key(key)}: {reason}")

    def _get(self, key: str, required: bool) -> Any:
        self.seen.add(key)
        if key not in self.table:
            if required:
                self.error(key, "missing")
            return None
        return self.table[key]

    def str(self, key: str, default: str | None = None, required: bool = False) -> str | None:
        value = self._get(key, required)
        if value is None:
            return default
        if not isinstance(value, str):
            self.error(key, f"must be a string, not {_type_name(value)}")
            return default
        return self._expand(key, value, default)

    def _expand(self, key: builtins.str, value: builtins.str, default: builtins.str | None) -> builtins.str | None:
        """`value` with `${VAR}` expanded; `default` when a variable is unset (reported once, here).

        A value missing its variable is not checked further: "${TOKEN} is not set" is the one
        problem, not also "shorter than 16 characters" or "not a Git URL".
        """
        failed: list[str] = []
        expanded = expand_env(value, self.env, failed.append)
        for reason in failed:
            self.error(key, reason)
        return default if failed else expanded

    def number(self, key: builtins.str, default: float, minimum: float = 0.0, maximum: float = MAX_TIMEOUT) -> float:
        """A finite number in [minimum, maximum]; nan, inf and out-of-range values are problems."""
        value = self._get(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.error(key, f"must be a number, not {_type_name(value)}")
            return default
        # `not minimum <= value <= maximum` is also true for nan; an int beyond any float compares exactly.
        if not minimum <= value <= maximum:
            self.error(key, f"must be a number between {minimum:g} and {maximum:g}, not {_shown(value)}")
            return default
        return float(value)

    def int(
        self, key: builtins.str, default: builtins.int, minimum: builtins.int = 0, maximum: builtins.int = 2**53
    ) -> builtins.int:
        value = self._get(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(key, f"must be an integer, not {_type_name(value)}")
            return default
        if not minimum <= value <= maximum:
            self.error(key, f"must be between {minimum} and {maximum}, not {_shown(value)}")
            return default
        return value

    def bool(self, key: builtins.str, default: builtins.bool) -> builtins.bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(key, f"must be true or false, not {_type_name(value)}")
            return default
        return value

    def str_list(self, key: builtins.str, default: tuple[builtins.str, ...] = ()) -> tuple[builtins.str, ...]:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, list):
            self.error(key, f"must be a list of strings, not {_type_name(value)}")
            return default
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.error(f"{key}[{i}]", f"must be a string, not {_type_name(item)}")
                continue
            expanded = self._expand(f"{key}[{i}]", item, None)
            if expanded is not None:
                out.append(expanded)
        return tuple(out)

    def table_list(self, key: builtins.str) -> list[Any]:
        value = self._get(key, False)
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(key, f"must be an array of tables ([[{key}]]), not {_type_name(value)}")
            return []
        return value

    def problems_for(self, key: builtins.str) -> builtins.bool:
        """True when a problem was already recorded for `key` or a key inside it."""
        full = self.key(key)
        return any(p.startswith((f"{full}:", f"{full}.", f"{full}[")) for p in self.problems)

    def finish(self) -> None:
        """Report keys nobody asked for: a typo must not be silently ignored."""
        for key in self.table:
            if key not in self.seen:
                self.error(key, "unknown key" + did_you_mean(key, self.seen))


def _one_of(r: _Reader, key: str, value: str | None, choices: tuple[Choice, ...]) -> Choice | None:
    """`value` as one of `choices` (typed as the Literal they are); a problem, and None, for any other."""
    if value is None:
        return None
    for choice in choices:
        if value == choice:
            return choice
    expected = " or ".join(f'"{choice}"' for choice in choices)
    r.error(key, f"must be {expected}, not {value!r}")
    return None


def did_you_mean(key: str, known: set[str] | frozenset[str]) -> str:
    """`; did you mean X?` for the known key a typo most likely meant, else "".

    A known key the typo begins (`repo` -> `repository`) comes first, then the closest by
    difflib's ratio (`repsitory`, `tag_prefx`).
    """
    if not known:
        return ""
    lowered = key.lower()
    prefixed = sorted(k for k in known if len(lowered) >= 3 and k.startswith(lowered) and k != lowered)
    close = prefixed[:1] or difflib.get_close_matches(lowered, sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def _shown(value: int | float) -> str:
    """A number for a message: TOML integers have no size limit, so a huge one is cut short."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else text[:20] + "..."


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def expand_env(value: str, env: Mapping[str, str], error: Any) -> str:
    """Replace `${VAR}` with the environment's value; `$$` is a literal `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        var = match.group(1)
        if var not in env:
            error(f"environment variable {var} is not set")
            return ""
        return env[var]

    return _ENV_RE.sub(replace, value)


def _check_redis(c: _Reader, cache: CacheConfig) -> None:
    """`redis_url` is a redis://, rediss:// or unix:// URL, required with backend = "redis"."""
    if cache.backend == "redis" and cache.redis_url is None and not c.problems_for("redis_url"):
        c.error("redis_url", 'is required with backend = "redis" (e.g. redis_url = "${GITREG_REDIS_URL}")')
    if cache.redis_url is not None:
        reason = redis_url_problem(cache.redis_url)
        if reason is not None:
            c.error("redis_url", f"{urls.mask(cache.redis_url)!r} {reason}")
    if not re.fullmatch(r"[A-Za-z0-9:._/-]{0,64}", cache.redis_prefix):
        c.error("redis_prefix", "may contain only letters, digits and ':', '.', '_', '/', '-' (at most 64)")


def redis_url_problem(url: str) -> str | None:
    """Why `url` is not a Redis URL gitreg can use, or None."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        return f"is not a valid URL: {e}"
    if parts.scheme not in ("redis", "rediss", "unix"):
        return "must start with redis://, rediss:// (TLS) or unix://"
    if parts.scheme == "unix":
        return None if parts.path else "needs the socket's path, e.g. unix:///run/redis.sock"
    if not parts.hostname:
        return "needs a host, e.g. redis://redis:6379/0"
    if port == 0:
        return "has port 0"
    db = parts.path.strip("/")
    if db and not db.isdigit():
        return f"has database {db!r}; the path must be a database number like /0"
    return None


def _check_placeholders(r: _Reader, key: str, template: str, allowed: tuple[str, ...]) -> None:
    """Every `{placeholder}` in `template` must be one of `allowed`."""
    for placeholder in _TEMPLATE_RE.findall(template):
        if placeholder not in allowed:
            names = [f"{{{p}}}" for p in allowed]
            r.error(key, f"unknown placeholder {{{placeholder}}}; use {', '.join(names[:-1])} or {names[-1]}")


def _check_url(r: _Reader, key: str, url: str, protocols: tuple[str, ...], template: bool) -> None:
    """A repository URL must be a transport we allow, and carry no password."""
    if template:
        _check_placeholders(r, key, url, PLACEHOLDERS)
    # Placeholders are filled from grammar-checked segments: check the URL's shape with a stand-in.
    found = urls.parse_or_reason(_TEMPLATE_RE.sub("x", url) if template else url)
    if isinstance(found, str):
        r.error(key, f"{url!r} is {found}")
        return
    if found.transport not in protocols:
        r.error(
            key, f"transport {found.transport!r} is not allowed; allowed: {', '.join(protocols)} (see [git] protocols)"
        )
    if found.password is not None:
        r.error(key, "must not contain a password; put it in [[credentials]] so it never leaves the server")
    if found.query or found.fragment:
        r.error(key, "must not contain a query string or fragment")


def _check_download(r: _Reader, download: str) -> None:
    """`download` is "git", "archive" or an https:// tarball URL template (for [[modules]] and [[orgs]])."""
    if download not in ("git", "archive"):
        if not download.startswith("https://"):
            r.error("download", f'must be "git", "archive" or an https:// tarball URL template, not {download!r}')
        else:
            _check_placeholders(r, "download", download, DOWNLOAD_PLACEHOLDERS)


def _parse_rule(r: _Reader, protocols: tuple[str, ...]) -> ModuleRule | None:
    fields: dict[str, str | None] = {}
    for key in PLACEHOLDERS:
        value = r.str(key)
        if value is not None:
            grammar = SYSTEM_RE if key == "system" else NAME_RE
            if not grammar.fullmatch(value):
                expected = (
                    "1-64 lowercase letters and digits"
                    if key == "system"
                    else "1-64 letters, digits, '-' or '_', starting and ending with a letter or digit"
                )
                r.error(key, f"{value!r} is not a valid {key}: expected {expected}")
        fields[key] = value
    repository = r.str("repository", required=True)
    path = (r.str("path", ModuleRule.path) or "").strip("/")
    tag_prefix = r.str("tag_prefix", ModuleRule.tag_prefix) or ""
    clone_url = r.str("clone_url")
    ref = r.str("ref", ModuleRule.ref)
    download = r.str("download", ModuleRule.download) or ModuleRule.download
    verified = r.bool("verified", ModuleRule.verified)
    archive_root = r.str("archive_root")
    if archive_root is not None and not download.startswith("https://"):
        r.error("archive_root", "applies only to an https:// tarball URL template in `download`")
    if archive_root is not None:
        _check_placeholders(r, "archive_root", archive_root, DOWNLOAD_PLACEHOLDERS)
        if any(part in ("", ".", "..") for part in archive_root.strip("/").split("/")):
            r.error("archive_root", f"{archive_root!r} must be a relative directory name, without '.' or '..'")
    _check_download(r, download)
    if repository is not None:
        _check_url(r, "repository", repository, protocols, template=True)
    if clone_url is not None:
        # What clients clone is not fetched by gitreg, so any transport the CLI understands is fine.
        _check_url(r, "clone_url", clone_url, KNOWN_PROTOCOLS, template=True)
    if path and any(part in ("", ".", "..") for part in path.split("/")):
        r.error("path", f"{path!r} must be a relative path inside the repository, without '.' or '..'")
    if path and not re.fullmatch(r"[A-Za-z0-9._/-]+", path):
        r.error("path", f"{path!r} may contain only letters, digits, '.', '_', '-' and '/'")
    if tag_prefix and not re.fullmatch(r"[A-Za-z0-9._/-]+", tag_prefix):
        r.error("tag_prefix", f"{tag_prefix!r} may contain only letters, digits, '.', '_', '-' and '/'")
    checked_ref: Ref = _one_of(r, "ref", ref, ("tag", "commit")) or ModuleRule.ref
    r.finish()
    if repository is None:
        return None
    return ModuleRule(
        repository=repository,
        namespace=fields["namespace"],
        name=fields["name"],
        system=fields["system"],
        path=path,
        tag_prefix=tag_prefix,
        clone_url=clone_url,
        ref=checked_ref,
        download=download,
        verified=verified,
        archive_root=archive_root.strip("/") if archive_root else None,
    )


def _check_repository_pattern(r: _Reader, pattern: str) -> None:
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


def _check_api_url(r: _Reader, url: str) -> None:
    parts = urls.parse(url)  # the one URL parser
    if parts is None or parts.is_scp or parts.scheme not in ("https", "http") or not parts.host:
        r.error("api_url", f"{url!r} must be an https:// URL like https://gitlab.example.com/api/v4")
        return
    if parts.user is not None or parts.password is not None:
        r.error("api_url", "must not contain user info; put the API token in `token`")
    if parts.query or parts.fragment:
        r.error("api_url", "must not contain a query string or fragment")


def _parse_org(r: _Reader) -> OrgConfig | None:
    provider: Provider | None = _one_of(r, "provider", r.str("provider", required=True), ("gitlab", "github"))
    api_url = r.str("api_url")
    if api_url is None and provider is not None:
        api_url = DEFAULT_API_URLS[provider]
    if api_url is not None:
        api_url = api_url.rstrip("/")
        _check_api_url(r, api_url)
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
    _check_repository_pattern(r, pattern)
    topic = r.str("topic")
    if topic is not None and not topic.strip():
        r.error("topic", "must not be empty; leave it out to take repositories with any topics")
    clone: Clone = _one_of(r, "clone", r.str("clone", OrgConfig.clone), ("https", "ssh")) or OrgConfig.clone
    download = r.str("download", "git") or "git"
    _check_download(r, download)
    refresh = r.number(
        "refresh_seconds", OrgConfig.refresh_seconds, minimum=MIN_REFRESH_SECONDS, maximum=MAX_REFRESH_SECONDS
    )
    include_archived = r.bool("include_archived", False)
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
    )


def _parse_tokens(a: _Reader) -> tuple[TokenConfig, ...]:
    """`tokens` is a list of strings, or of tables `{token = "...", namespaces = [...]}`."""
    value = a._get("tokens", False)
    if value is None:
        return ()
    if not isinstance(value, list):
        a.error("tokens", f"must be a list of tokens, not {_type_name(value)}")
        return ()
    out = []
    for i, item in enumerate(value):
        key = f"tokens[{i}]"
        if isinstance(item, str):
            expanded = a._expand(key, item, None)
            if expanded is None:  # its variable is unset: reported once, nothing more to check
                continue
            token, namespaces = expanded, None
        elif isinstance(item, dict):
            t = _Reader(item, a.key(key), a.problems, a.env)
            token = t.str("token", required=True) or ""
            listed = t.str_list("namespaces") if "namespaces" in item else None
            namespaces = None
            if listed is not None:
                namespaces = listed
                for j, ns in enumerate(listed):
                    if not NAME_RE.fullmatch(ns):
                        t.error(f"namespaces[{j}]", f"{ns!r} is not a valid namespace")
            t.finish()
        else:
            a.error(key, f"must be a string or a table with token and namespaces, not {_type_name(item)}")
            continue
        if token.startswith("sha256:"):
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", token):
                a.error(key, "a hashed token must be sha256: followed by 64 lowercase hex digits")
        elif len(token) < 16 and not a.problems_for(key):
            a.error(key, "is shorter than 16 characters; use a long random token")
        out.append(TokenConfig(token=token, namespaces=namespaces))
    return tuple(out)


def _parse_credential(r: _Reader) -> Credential | None:
    url = r.str("url", required=True)
    username = r.str("username", required=True)
    password = r.str("password", required=True)
    if url is not None and urls.transport(url) not in ("https", "http"):
        r.error("url", f"{url!r} must be an https:// (or http://) URL prefix; ssh uses keys, not passwords")
    r.finish()
    if url is None or username is None or password is None:
        return None
    return Credential(url=url, username=username, password=password)


def parse_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None, source: str | None = None) -> Config:
    """Validate a decoded TOML document; raise ConfigError listing every problem."""
    env = os.environ if env is None else env
    problems: list[str] = []
    root = _Reader(dict(data), "", problems, env)

    # Defaults are the dataclasses' own: stated once, there.
    s = _Reader(root._get("server", False) or {}, "server", problems, env)
    server = ServerConfig(
        host=s.str("host", ServerConfig.host) or ServerConfig.host,
        port=s.int("port", ServerConfig.port, 0, 65535),
        tls_cert=s.str("tls_cert"),
        tls_key=s.str("tls_key"),
        public_url=s.str("public_url"),
        idle_timeout_seconds=s.number(
            "idle_timeout_seconds", ServerConfig.idle_timeout_seconds, minimum=1.0, maximum=MAX_TIMEOUT
        ),
    )
    if server.public_url is not None:
        public = urls.parse(server.public_url)
        if public is None or public.scheme not in ("http", "https") or public.query or public.fragment:
            s.error("public_url", f"{server.public_url!r} must be an http(s) URL like https://registry.example.com")
        server = dataclasses.replace(server, public_url=server.public_url.rstrip("/"))
    if (server.tls_cert is None) != (server.tls_key is None) and not (
        s.problems_for("tls_cert") or s.problems_for("tls_key")
    ):
        missing = "tls_key" if server.tls_key is None else "tls_cert"
        s.error(missing, "tls_cert and tls_key must be given together (both or neither)")
    for key in ("tls_cert", "tls_key"):
        value = getattr(server, key)
        if value is not None and not Path(value).is_file():
            s.error(key, f"file {value!r} does not exist")
    s.finish()

    c = _Reader(root._get("cache", False) or {}, "cache", problems, env)
    cache = CacheConfig(
        ttl_seconds=c.number("ttl_seconds", CacheConfig.ttl_seconds, maximum=MAX_CACHE_SECONDS),
        stale_seconds=c.number("stale_seconds", CacheConfig.stale_seconds, maximum=MAX_CACHE_SECONDS),
        negative_ttl_seconds=c.number("negative_ttl_seconds", CacheConfig.negative_ttl_seconds, maximum=DAY),
        error_retry_seconds=c.number("error_retry_seconds", CacheConfig.error_retry_seconds, maximum=DAY),
        # Each entry holds a tag list in memory: ten million would be gigabytes.
        max_repositories=c.int("max_repositories", CacheConfig.max_repositories, 1, 10_000_000),
        refresh_ahead=c.bool("refresh_ahead", CacheConfig.refresh_ahead),
        redis_url=c.str("redis_url"),
        redis_prefix=c.str("redis_prefix", CacheConfig.redis_prefix) or "",
    )
    backend: Backend | None = _one_of(c, "backend", c.str("backend", CacheConfig.backend), ("memory", "redis"))
    if backend is not None:
        cache = dataclasses.replace(cache, backend=backend)
    _check_redis(c, cache)
    c.finish()

    g = _Reader(root._get("git", False) or {}, "git", problems, env)
    protocols = g.str_list("protocols", GitConfig.protocols)
    for i, proto in enumerate(protocols):
        if proto not in KNOWN_PROTOCOLS:
            g.error(f"protocols[{i}]", f"unknown transport {proto!r}; choose from {', '.join(KNOWN_PROTOCOLS)}")
    max_concurrency = g.int("max_concurrency", GitConfig.max_concurrency, 1, 256)
    max_per_host = g.int("max_per_host", default_max_per_host(max_concurrency), 1, 256)
    if max_per_host > max_concurrency:
        g.error("max_per_host", f"must be at most [git] max_concurrency ({max_concurrency}), not {max_per_host}")
    gitcfg = GitConfig(
        timeout_seconds=g.number("timeout_seconds", GitConfig.timeout_seconds, minimum=0.1, maximum=MAX_TIMEOUT),
        max_concurrency=max_concurrency,
        max_queue=g.int("max_queue", default_max_queue(max_concurrency), 1, 100_000),
        max_per_host=max_per_host,
        protocols=tuple(p for p in protocols if p in KNOWN_PROTOCOLS),
        allow_moved_tags=g.bool("allow_moved_tags", GitConfig.allow_moved_tags),
    )
    g.finish()

    a = _Reader(root._get("auth", False) or {}, "auth", problems, env)
    auth = AuthConfig(
        tokens=_parse_tokens(a),
        metrics_token=a.str("metrics_token"),
        signing_key=a.str("signing_key"),
        # A signed URL is a capability: Terraform uses it within seconds, a leaked one should die soon.
        signed_url_ttl_seconds=a.number(
            "signed_url_ttl_seconds", AuthConfig.signed_url_ttl_seconds, minimum=10.0, maximum=DAY
        ),
    )
    if auth.metrics_token is not None and len(auth.metrics_token) < 16:
        a.error("metrics_token", "is shorter than 16 characters; use a long random token")
    if auth.signing_key is not None and len(auth.signing_key) < 32:
        a.error("signing_key", "is shorter than 32 characters; use a long random key (e.g. `openssl rand -hex 32`)")
    a.finish()

    st = _Reader(root._get("storage", False) or {}, "storage", problems, env)
    storage = StorageConfig(
        path=st.str("path") or default_storage_path(),
        max_bytes=st.int("max_bytes", StorageConfig.max_bytes, 1024 * 1024, 2**50),  # 1 PiB: beyond any disk
    )
    st.finish()

    ix = _Reader(root._get("index", False) or {}, "index", problems, env)
    index = IndexConfig(enabled=ix.bool("enabled", True))
    ix.finish()

    u = _Reader(root._get("ui", False) or {}, "ui", problems, env)
    ui = UiConfig(enabled=u.bool("enabled", True), title=u.str("title", "gitreg") or "gitreg")
    if len(ui.title) > 100:
        u.error("title", "is longer than 100 characters")
    u.finish()

    w = _Reader(root._get("webhooks", False) or {}, "webhooks", problems, env)
    webhooks = WebhooksConfig(github_secret=w.str("github_secret"), gitlab_token=w.str("gitlab_token"))
    for key in ("github_secret", "gitlab_token"):
        value = getattr(webhooks, key)
        if value is not None and len(value) < 16:
            w.error(key, "is shorter than 16 characters; use a long random secret")
    w.finish()

    modules = []
    for i, table in enumerate(root.table_list("modules")):
        rule = _parse_rule(_Reader(table, f"modules[{i}]", problems, env), gitcfg.protocols)
        if rule is not None:
            modules.append(rule)
    if auth.tokens and auth.signing_key is None and not a.problems_for("signing_key"):
        for i, rule in enumerate(modules):
            if rule.download == "archive":
                problems.append(
                    f'modules[{i}].download: "archive" with [auth] tokens needs [auth] signing_key, which signs the '
                    'archive URLs Terraform fetches without its token (e.g. signing_key = "${GITREG_SIGNING_KEY}")'
                )
                break
    orgs: list[OrgConfig] = []
    seen_groups: dict[tuple[str, str, str], int] = {}
    for i, table in enumerate(root.table_list("orgs")):
        org = _parse_org(_Reader(table, f"orgs[{i}]", problems, env))
        if org is None:
            continue
        group_key = (org.provider, org.api_url, org.group.lower())
        if group_key in seen_groups:
            problems.append(f"orgs[{i}].group: {org.group!r} is already listed by orgs[{seen_groups[group_key]}]")
        seen_groups.setdefault(group_key, i)
        orgs.append(org)
    if auth.tokens and auth.signing_key is None and any(org.download == "archive" for org in orgs):
        problems.append('orgs: download = "archive" with [auth] tokens needs [auth] signing_key')
    credentials = []
    for i, table in enumerate(root.table_list("credentials")):
        cred = _parse_credential(_Reader(table, f"credentials[{i}]", problems, env))
        if cred is not None:
            credentials.append(cred)
    root.finish()
    if problems:
        raise ConfigError(problems)
    return Config(
        server=server,
        cache=cache,
        git=gitcfg,
        auth=auth,
        storage=storage,
        webhooks=webhooks,
        index=index,
        ui=ui,
        modules=tuple(modules),
        credentials=tuple(credentials),
        source=source,
        orgs=tuple(orgs),
    )


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a TOML config file; every way it can be unreadable is a ConfigError."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError([f"{path}: file not found"]) from None
    except OSError as e:
        raise ConfigError([f"{path}: cannot read: {e.strerror}"]) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError([f"{path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; not a config file"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(
            [f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} on line {line}); TOML files must be UTF-8"]
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"{path}: not valid TOML: {e}"]) from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError([f"{path}: not valid TOML: arrays or tables nested too deeply"]) from None
    return parse_config(data, env, source=str(path))


def module_rule_from_flag(value: str, protocols: tuple[str, ...] = DEFAULT_PROTOCOLS) -> ModuleRule:
    """Parse `--module NAMESPACE/NAME/SYSTEM=REPOSITORY_URL` into an explicit rule."""
    address, sep, repository = value.partition("=")
    parts = address.split("/")
    if not sep or len(parts) != 3 or not repository:
        raise ConfigError([f"--module {value!r}: expected NAMESPACE/NAME/SYSTEM=REPOSITORY_URL"])
    table = {"namespace": parts[0], "name": parts[1], "system": parts[2], "repository": repository}
    problems: list[str] = []
    rule = _parse_rule(_Reader(table, f"--module {address}", problems, {}), protocols)
    if problems or rule is None:
        raise ConfigError(problems)
    return rule
