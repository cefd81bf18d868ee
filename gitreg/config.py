"""Configuration: TOML -> frozen dataclasses -> validation -> ConfigError.

Every problem is collected (not just the first) and named by its key path, e.g.
`modules[2].repository: missing`, so `gitreg check` can list them all at once.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from .errors import ConfigError
from .names import NAME_RE, SYSTEM_RE

PLACEHOLDERS = ("namespace", "name", "system")
DOWNLOAD_PLACEHOLDERS = ("namespace", "name", "system", "tag", "version", "sha")
DEFAULT_PROTOCOLS = ("https", "ssh", "git", "file")
KNOWN_PROTOCOLS = ("https", "http", "ssh", "git", "file")
_ENV_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TEMPLATE_RE = re.compile(r"\{([^{}]*)\}")
_SCP_RE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!//)(?!:)")
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


@dataclass(frozen=True)
class GitConfig:
    """`[git]`: how gitreg runs git against upstream hosts."""

    timeout_seconds: float = 30.0
    max_concurrency: int = 8
    protocols: tuple[str, ...] = DEFAULT_PROTOCOLS
    allow_moved_tags: bool = False


@dataclass(frozen=True)
class StorageConfig:
    """`[storage]`: gitreg's own files (mirrors, archives, moved-tag records, download counts)."""

    path: str = field(default_factory=lambda: default_storage_path())
    max_bytes: int = 5 * 1024**3


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
    ref: Literal["tag", "commit"] = "tag"
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


@dataclass(frozen=True)
class Config:
    """The whole, validated configuration."""

    server: ServerConfig = ServerConfig()
    cache: CacheConfig = CacheConfig()
    git: GitConfig = GitConfig()
    auth: AuthConfig = AuthConfig()
    storage: StorageConfig = field(default_factory=lambda: StorageConfig())
    webhooks: WebhooksConfig = WebhooksConfig()
    modules: tuple[ModuleRule, ...] = ()
    credentials: tuple[Credential, ...] = field(default=(), repr=False)
    source: str | None = None


def default_storage_path() -> str:
    """`$XDG_STATE_HOME/gitreg`, else `~/.local/state/gitreg`."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "gitreg")


class _Reader:
    """Reads one TOML table, recording problems under its key path instead of raising."""

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
        return expand_env(value, self.env, lambda reason: self.error(key, reason))

    def number(self, key: str, default: float, minimum: float = 0.0, maximum: float = MAX_TIMEOUT) -> float:
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

    def int(self, key: str, default: int, minimum: int = 0, maximum: int = 2**53) -> int:
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

    def bool(self, key: str, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(key, f"must be true or false, not {_type_name(value)}")
            return default
        return value

    def str_list(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
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
            out.append(expand_env(item, self.env, lambda reason, i=i: self.error(f"{key}[{i}]", reason)))
        return tuple(out)

    def table_list(self, key: str) -> list[Any]:
        value = self._get(key, False)
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(key, f"must be an array of tables ([[{key}]]), not {_type_name(value)}")
            return []
        return value

    def problems_for(self, key: str) -> bool:
        """True when a problem was already recorded for `key`."""
        prefix = f"{self.key(key)}:"
        return any(p.startswith(prefix) for p in self.problems)

    def finish(self) -> None:
        """Report keys nobody asked for: a typo must not be silently ignored."""
        for key in self.table:
            if key not in self.seen:
                self.error(key, "unknown key")


def _shown(value: float) -> str:
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


def url_scheme(url: str) -> str | None:
    """The transport git would use for `url` (`ssh` for scp-like `host:path`)."""
    if "://" in url:
        return url.partition("://")[0].lower()
    if _SCP_RE.match(url):
        return "ssh"
    return None


def _check_url(r: _Reader, key: str, url: str, protocols: tuple[str, ...], template: bool) -> None:
    """A repository URL must be a transport we allow, and carry no password."""
    if template:
        for placeholder in _TEMPLATE_RE.findall(url):
            if placeholder not in PLACEHOLDERS:
                r.error(key, f"unknown placeholder {{{placeholder}}}; use {{namespace}}, {{name}} or {{system}}")
    # Placeholders are filled from grammar-checked segments: check the URL's shape with a stand-in.
    sample = _TEMPLATE_RE.sub("x", url) if template else url
    scheme = url_scheme(sample)
    if scheme is None:
        r.error(key, f"{url!r} is not a Git URL (expected https://, ssh://, git://, file:// or user@host:path)")
        return
    if scheme not in protocols:
        r.error(key, f"transport {scheme!r} is not allowed; allowed: {', '.join(protocols)} (see [git] protocols)")
    if "://" in sample:
        try:
            parts = urlsplit(sample)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError as e:
            r.error(key, f"{url!r} is not a valid URL: {e}")
            return
        if parts.password is not None:
            r.error(key, "must not contain a password; put it in [[credentials]] so it never leaves the server")
        if parts.query or parts.fragment:
            r.error(key, "must not contain a query string or fragment")
    if sample.startswith("-"):
        r.error(key, "must not start with '-'")


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
    path = (r.str("path", "") or "").strip("/")
    tag_prefix = r.str("tag_prefix", "") or ""
    clone_url = r.str("clone_url")
    ref = r.str("ref", "tag")
    download = r.str("download", "git") or "git"
    verified = r.bool("verified", False)
    archive_root = r.str("archive_root")
    if archive_root is not None and not download.startswith("https://"):
        r.error("archive_root", "applies only to an https:// tarball URL template in `download`")
    if archive_root is not None:
        for placeholder in _TEMPLATE_RE.findall(archive_root):
            if placeholder not in DOWNLOAD_PLACEHOLDERS:
                r.error("archive_root", f"unknown placeholder {{{placeholder}}}; use one of "
                        + ", ".join(f"{{{p}}}" for p in DOWNLOAD_PLACEHOLDERS))
        if any(part in ("", ".", "..") for part in archive_root.strip("/").split("/")):
            r.error("archive_root", f"{archive_root!r} must be a relative directory name, without '.' or '..'")
    if download not in ("git", "archive"):
        if not download.startswith("https://"):
            r.error("download", f'must be "git", "archive" or an https:// tarball URL template, not {download!r}')
        else:
            for placeholder in _TEMPLATE_RE.findall(download):
                if placeholder not in DOWNLOAD_PLACEHOLDERS:
                    r.error("download", f"unknown placeholder {{{placeholder}}}; use one of "
                            + ", ".join(f"{{{p}}}" for p in DOWNLOAD_PLACEHOLDERS))
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
    if ref not in ("tag", "commit"):
        r.error("ref", f"must be \"tag\" or \"commit\", not {ref!r}")
        ref = "tag"
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
        ref=ref,  # type: ignore[arg-type]
        download=download,
        verified=verified,
        archive_root=archive_root.strip("/") if archive_root else None,
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
            token, namespaces = expand_env(item, a.env, lambda reason, key=key: a.error(key, reason)), None
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
    if url is not None and url_scheme(url) not in ("https", "http"):
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

    s = _Reader(root._get("server", False) or {}, "server", problems, env)
    server = ServerConfig(
        host=s.str("host", "127.0.0.1") or "127.0.0.1",
        port=s.int("port", 8080, 0, 65535),
        tls_cert=s.str("tls_cert"),
        tls_key=s.str("tls_key"),
        public_url=s.str("public_url"),
        idle_timeout_seconds=s.number("idle_timeout_seconds", 15.0, minimum=1.0, maximum=MAX_TIMEOUT),
    )
    if server.public_url is not None:
        try:
            parts = urlsplit(server.public_url)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query and not parts.fragment
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            valid = False
        if not valid:
            s.error("public_url", f"{server.public_url!r} must be an http(s) URL like https://registry.example.com")
        server = dataclasses.replace(server, public_url=server.public_url.rstrip("/"))
    if (server.tls_cert is None) != (server.tls_key is None):
        missing = "tls_key" if server.tls_key is None else "tls_cert"
        s.error(missing, "tls_cert and tls_key must be given together (both or neither)")
    for key in ("tls_cert", "tls_key"):
        value = getattr(server, key)
        if value is not None and not Path(value).is_file():
            s.error(key, f"file {value!r} does not exist")
    s.finish()

    c = _Reader(root._get("cache", False) or {}, "cache", problems, env)
    cache = CacheConfig(
        ttl_seconds=c.number("ttl_seconds", 300.0, maximum=MAX_CACHE_SECONDS),
        stale_seconds=c.number("stale_seconds", 86400.0, maximum=MAX_CACHE_SECONDS),
        negative_ttl_seconds=c.number("negative_ttl_seconds", 30.0, maximum=DAY),
        error_retry_seconds=c.number("error_retry_seconds", 5.0, maximum=DAY),
        # Each entry holds a tag list in memory: ten million would be gigabytes.
        max_repositories=c.int("max_repositories", 10000, 1, 10_000_000),
        refresh_ahead=c.bool("refresh_ahead", False),
    )
    c.finish()

    g = _Reader(root._get("git", False) or {}, "git", problems, env)
    protocols = g.str_list("protocols", DEFAULT_PROTOCOLS)
    for i, proto in enumerate(protocols):
        if proto not in KNOWN_PROTOCOLS:
            g.error(f"protocols[{i}]", f"unknown transport {proto!r}; choose from {', '.join(KNOWN_PROTOCOLS)}")
    gitcfg = GitConfig(
        timeout_seconds=g.number("timeout_seconds", 30.0, minimum=0.1, maximum=MAX_TIMEOUT),
        max_concurrency=g.int("max_concurrency", 8, 1, 256),
        protocols=tuple(p for p in protocols if p in KNOWN_PROTOCOLS),
        allow_moved_tags=g.bool("allow_moved_tags", False),
    )
    g.finish()

    a = _Reader(root._get("auth", False) or {}, "auth", problems, env)
    auth = AuthConfig(
        tokens=_parse_tokens(a),
        metrics_token=a.str("metrics_token"),
        signing_key=a.str("signing_key"),
        # A signed URL is a capability: Terraform uses it within seconds, a leaked one should die soon.
        signed_url_ttl_seconds=a.number("signed_url_ttl_seconds", 600.0, minimum=10.0, maximum=DAY),
    )
    if auth.metrics_token is not None and len(auth.metrics_token) < 16:
        a.error("metrics_token", "is shorter than 16 characters; use a long random token")
    if auth.signing_key is not None and len(auth.signing_key) < 32:
        a.error("signing_key", "is shorter than 32 characters; use a long random key (e.g. `openssl rand -hex 32`)")
    a.finish()

    st = _Reader(root._get("storage", False) or {}, "storage", problems, env)
    storage = StorageConfig(
        path=st.str("path") or default_storage_path(),
        max_bytes=st.int("max_bytes", 5 * 1024**3, 1024 * 1024, 2**50),  # 1 PiB: beyond any disk
    )
    st.finish()

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
    if auth.tokens and auth.signing_key is None:
        for i, rule in enumerate(modules):
            if rule.download == "archive":
                problems.append(
                    f'modules[{i}].download: "archive" with [auth] tokens needs [auth] signing_key, which signs the '
                    "archive URLs Terraform fetches without its token (e.g. signing_key = \"${GITREG_SIGNING_KEY}\")"
                )
                break
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
        modules=tuple(modules),
        credentials=tuple(credentials),
        source=source,
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
        raise ConfigError([f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} on line {line}); "
                           "TOML files must be UTF-8"]) from None
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
