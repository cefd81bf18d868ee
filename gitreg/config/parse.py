"""Configuration: TOML -> frozen dataclasses (`gitreg.config.model`) -> validation -> ConfigError.

Every problem is collected (not just the first) and named by its key path, e.g.
`modules[2].repository: missing`, so `gitreg check` can list them all at once.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gitreg.config.identity import parse_identities
from gitreg.config.model import (
    DAY,
    DEFAULT_API_URLS,
    DEFAULT_PROTOCOLS,
    DEFAULT_REPOSITORY_PATTERN,
    DOWNLOAD_PLACEHOLDERS,
    KNOWN_PROTOCOLS,
    MAX_CACHE_SECONDS,
    MAX_REFRESH_SECONDS,
    MAX_TIMEOUT,
    MIN_REFRESH_SECONDS,
    PLACEHOLDERS,
    AuthConfig,
    Backend,
    CacheConfig,
    Clone,
    Config,
    Credential,
    GitConfig,
    IndexConfig,
    ModuleRule,
    OrgConfig,
    Provider,
    Ref,
    ServerConfig,
    StorageConfig,
    TokenConfig,
    UiConfig,
    WebhooksConfig,
    default_max_per_host,
    default_max_queue,
    default_storage_path,
)
from gitreg.config.reader import TableReader, one_of, type_name
from gitreg.config.rules import TEMPLATE_RE
from gitreg.core import urls
from gitreg.core.errors import ConfigError
from gitreg.core.names import NAME_RE, REGISTRY_HOST_RE, SYSTEM_RE

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config file is a few KiB; refuse to read /dev/zero whole
_GITHUB_OWNER_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})", re.ASCII)
_GITLAB_SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}", re.ASCII)
# A DNS name or IPv4 address: no scheme, user, port or path, and never starting with `-`.
_CLONE_HOST_RE = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?", re.ASCII)


def _validate_redis(c: TableReader, cache: CacheConfig) -> None:
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


def _check_placeholders(r: TableReader, key: str, template: str, allowed: tuple[str, ...]) -> None:
    """Every `{placeholder}` in `template` must be one of `allowed`."""
    for placeholder in TEMPLATE_RE.findall(template):
        if placeholder not in allowed:
            names = [f"{{{p}}}" for p in allowed]
            r.error(key, f"unknown placeholder {{{placeholder}}}; use {', '.join(names[:-1])} or {names[-1]}")


def _check_url(r: TableReader, key: str, url: str, protocols: tuple[str, ...], template: bool) -> None:
    """A repository URL must be a transport we allow, and carry no password nor a token as its user name."""
    if template:
        _check_placeholders(r, key, url, PLACEHOLDERS)
    # Placeholders are filled from grammar-checked segments: check the URL's shape with a stand-in.
    found = urls.parse_or_reason(TEMPLATE_RE.sub("x", url) if template else url)
    if isinstance(found, str):
        r.error(key, f"{url!r} is {found}")
        return
    if found.transport not in protocols:
        r.error(
            key, f"transport {found.transport!r} is not allowed; allowed: {', '.join(protocols)} (see [git] protocols)"
        )
    if found.password is not None:
        r.error(key, "must not contain a password; put it in [[credentials]] so it never leaves the server")
    elif not urls.has_plain_user(found):  # a token written as the user name is a password too
        r.error(key, "must not contain user info but a login name (git@, bot@); put a token in [[credentials]]")
    if found.query or found.fragment:
        r.error(key, "must not contain a query string or fragment")


def _check_download(r: TableReader, download: str) -> None:
    """`download` is "git", "archive" or an https:// tarball URL template (for [[modules]] and [[orgs]])."""
    if download not in ("git", "archive"):
        if not download.startswith("https://"):
            r.error("download", f'must be "git", "archive" or an https:// tarball URL template, not {download!r}')
        else:
            _check_placeholders(r, "download", download, DOWNLOAD_PLACEHOLDERS)


def _parse_rule(r: TableReader, protocols: tuple[str, ...]) -> ModuleRule | None:
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
    checked_ref: Ref = one_of(r, "ref", ref, ("tag", "commit")) or ModuleRule.ref
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


def _check_repository_pattern(r: TableReader, pattern: str) -> None:
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


def _check_api_url(r: TableReader, url: str) -> None:
    parts = urls.parse(url)  # the one URL parser
    if parts is None or parts.is_scp or parts.scheme not in ("https", "http") or not parts.host:
        r.error("api_url", f"{url!r} must be an https:// URL like https://gitlab.example.com/api/v4")
        return
    if parts.user is not None or parts.password is not None:
        r.error("api_url", "must not contain user info; put the API token in `token`")
    if parts.query or parts.fragment:
        r.error("api_url", "must not contain a query string or fragment")


def _parse_org(r: TableReader) -> OrgConfig | None:
    provider: Provider | None = one_of(r, "provider", r.str("provider", required=True), ("gitlab", "github"))
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
    clone: Clone = one_of(r, "clone", r.str("clone", OrgConfig.clone), ("https", "ssh")) or OrgConfig.clone
    download = r.str("download", "git") or "git"
    _check_download(r, download)
    refresh = r.number(
        "refresh_seconds", OrgConfig.refresh_seconds, minimum=MIN_REFRESH_SECONDS, maximum=MAX_REFRESH_SECONDS
    )
    include_archived = r.bool("include_archived", False)
    clone_hosts = tuple(h.lower() for h in r.str_list("clone_hosts"))
    for h in clone_hosts:
        if not _CLONE_HOST_RE.fullmatch(h):
            r.error("clone_hosts", f"{h[:100]!r} is not a host name like 'git.example.com' (no scheme, port or path)")
    max_repositories = r.int("max_repositories", OrgConfig.max_repositories, 1, 10_000_000)
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
    )


def _parse_tokens(a: TableReader) -> tuple[TokenConfig, ...]:
    """`tokens` is a list of strings, or of tables `{token = "...", namespaces = [...]}`."""
    value = a.raw("tokens", False)
    if value is None:
        return ()
    if not isinstance(value, list):
        a.error("tokens", f"must be a list of tokens, not {type_name(value)}")
        return ()
    out = []
    for i, item in enumerate(value):
        key = f"tokens[{i}]"
        if isinstance(item, str):
            expanded = a.expand(key, item, None)
            if expanded is None:  # its variable is unset: reported once, nothing more to check
                continue
            token, namespaces = expanded, None
        elif isinstance(item, dict):
            t = TableReader(item, a.key(key), a.problems, a.env)
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
            a.error(key, f"must be a string or a table with token and namespaces, not {type_name(item)}")
            continue
        if token.startswith("sha256:"):
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", token):
                a.error(key, "a hashed token must be sha256: followed by 64 lowercase hex digits")
        elif len(token) < 16 and not a.problems_for(key):
            a.error(key, "is shorter than 16 characters; use a long random token")
        out.append(TokenConfig(token=token, namespaces=namespaces))
    return tuple(out)


def _parse_credential(r: TableReader) -> Credential | None:
    url = r.str("url", required=True)
    username = r.str("username", required=True)
    password = r.str("password", required=True)
    if url is not None and urls.transport(url) not in ("https", "http"):
        r.error("url", f"{url!r} must be an https:// (or http://) URL prefix; ssh uses keys, not passwords")
    r.finish()
    if url is None or username is None or password is None:
        return None
    return Credential(url=url, username=username, password=password)


def _parse_server(s: TableReader) -> ServerConfig:
    server = ServerConfig(
        host=s.str("host", ServerConfig.host) or ServerConfig.host,
        port=s.int("port", ServerConfig.port, 0, 65535),
        tls_cert=s.str("tls_cert"),
        tls_key=s.str("tls_key"),
        public_url=s.str("public_url"),
        registry_host=s.str("registry_host"),
        trusted_proxies=s.str_list("trusted_proxies"),
        idle_timeout_seconds=s.number(
            "idle_timeout_seconds", ServerConfig.idle_timeout_seconds, minimum=1.0, maximum=MAX_TIMEOUT
        ),
    )
    if server.public_url is not None:
        public = urls.parse(server.public_url)
        if public is None or public.scheme not in ("http", "https") or public.query or public.fragment:
            s.error("public_url", f"{server.public_url!r} must be an http(s) URL like https://registry.example.com")
        server = dataclasses.replace(server, public_url=server.public_url.rstrip("/"))
    if server.registry_host is not None and not REGISTRY_HOST_RE.fullmatch(server.registry_host):
        s.error(
            "registry_host",
            f"{server.registry_host!r} must be a host name like registry.example.com (a port may follow)",
        )
    for i, proxy in enumerate(server.trusted_proxies):
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            s.error(f"trusted_proxies[{i}]", f"{proxy!r} is not an IP address or CIDR network like 10.0.0.0/8")
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
    return server


def _parse_cache(c: TableReader) -> CacheConfig:
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
    backend: Backend | None = one_of(c, "backend", c.str("backend", CacheConfig.backend), ("memory", "redis"))
    if backend is not None:
        cache = dataclasses.replace(cache, backend=backend)
    _validate_redis(c, cache)
    c.finish()
    return cache


def _parse_git(g: TableReader) -> GitConfig:
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
    return gitcfg


def _parse_auth(a: TableReader, protocols: tuple[str, ...]) -> AuthConfig:
    signing_key = a.str("signing_key")
    forges, oidc = parse_identities(a, protocols, signing_key)
    auth = AuthConfig(
        tokens=_parse_tokens(a),
        forges=forges,
        oidc=oidc,
        metrics_token=a.str("metrics_token"),
        signing_key=signing_key,
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
    return auth


def _parse_storage(st: TableReader) -> StorageConfig:
    storage = StorageConfig(
        path=st.str("path") or default_storage_path(),
        max_bytes=st.int("max_bytes", StorageConfig.max_bytes, 1024 * 1024, 2**50),  # 1 PiB: beyond any disk
    )
    st.finish()
    return storage


def _parse_index(ix: TableReader) -> IndexConfig:
    index = IndexConfig(enabled=ix.bool("enabled", True))
    ix.finish()
    return index


def _parse_ui(u: TableReader) -> UiConfig:
    ui = UiConfig(enabled=u.bool("enabled", True), title=u.str("title", "gitreg") or "gitreg")
    if len(ui.title) > 100:
        u.error("title", "is longer than 100 characters")
    u.finish()
    return ui


def _parse_webhooks(w: TableReader) -> WebhooksConfig:
    webhooks = WebhooksConfig(github_secret=w.str("github_secret"), gitlab_token=w.str("gitlab_token"))
    for key in ("github_secret", "gitlab_token"):
        value = getattr(webhooks, key)
        if value is not None and len(value) < 16:
            w.error(key, "is shorter than 16 characters; use a long random secret")
    w.finish()
    return webhooks


def _parse_modules(root: TableReader, protocols: tuple[str, ...], unsigned: bool) -> list[ModuleRule]:
    """`[[modules]]`; `unsigned`: [auth] has tokens and no signing key, which archive downloads need."""
    modules = []
    for i, table in enumerate(root.table_list("modules")):
        rule = _parse_rule(TableReader(table, f"modules[{i}]", root.problems, root.env), protocols)
        if rule is not None:
            modules.append(rule)
    if unsigned:
        for i, rule in enumerate(modules):
            if rule.download == "archive":
                root.problems.append(
                    f'modules[{i}].download: "archive" with registry auth ([auth] tokens, forges or oidc) needs '
                    "[auth] signing_key, which signs the "
                    'archive URLs Terraform fetches without its token (e.g. signing_key = "${GITREG_SIGNING_KEY}")'
                )
                break
    return modules


def _parse_orgs(root: TableReader, unsigned: bool) -> list[OrgConfig]:
    """`[[orgs]]`, each group listed once; `unsigned` as for `_parse_modules`."""
    orgs: list[OrgConfig] = []
    seen_groups: dict[tuple[str, str, str], int] = {}
    for i, table in enumerate(root.table_list("orgs")):
        org = _parse_org(TableReader(table, f"orgs[{i}]", root.problems, root.env))
        if org is None:
            continue
        group_key = (org.provider, org.api_url, org.group.lower())
        if group_key in seen_groups:
            root.problems.append(f"orgs[{i}].group: {org.group!r} is already listed by orgs[{seen_groups[group_key]}]")
        seen_groups.setdefault(group_key, i)
        orgs.append(org)
    if unsigned and any(org.download == "archive" for org in orgs):
        root.problems.append(
            'orgs: download = "archive" with registry auth ([auth] tokens, forges or oidc) needs [auth] signing_key'
        )
    return orgs


def _parse_credentials(root: TableReader) -> tuple[Credential, ...]:
    credentials = []
    for i, table in enumerate(root.table_list("credentials")):
        cred = _parse_credential(TableReader(table, f"credentials[{i}]", root.problems, root.env))
        if cred is not None:
            credentials.append(cred)
    return tuple(credentials)


def parse_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None, source: str | None = None) -> Config:
    """Validate a decoded TOML document; raise ConfigError listing every problem."""
    env = os.environ if env is None else env
    problems: list[str] = []
    root = TableReader(dict(data), "", problems, env)
    # Defaults are the dataclasses' own: stated once, there. Sections are read in this order,
    # so problems are listed in it.
    server = _parse_server(root.section("server"))
    cache = _parse_cache(root.section("cache"))
    gitcfg = _parse_git(root.section("git"))
    a = root.section("auth")
    auth = _parse_auth(a, gitcfg.protocols)
    storage = _parse_storage(root.section("storage"))
    index = _parse_index(root.section("index"))
    ui = _parse_ui(root.section("ui"))
    webhooks = _parse_webhooks(root.section("webhooks"))
    unsigned = auth.enabled and auth.signing_key is None  # archives would need a signing key
    modules = _parse_modules(root, gitcfg.protocols, unsigned and not a.problems_for("signing_key"))
    orgs = _parse_orgs(root, unsigned)
    credentials = _parse_credentials(root)
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
        credentials=credentials,
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
    rule = _parse_rule(TableReader(table, f"--module {address}", problems, {}), protocols)
    if problems or rule is None:
        raise ConfigError(problems)
    return rule
