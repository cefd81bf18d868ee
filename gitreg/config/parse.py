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
    DEFAULT_PROTOCOLS,
    KNOWN_PROTOCOLS,
    MAX_CACHE_SECONDS,
    MAX_TIMEOUT,
    AuthConfig,
    Backend,
    CacheConfig,
    Config,
    Credential,
    GitConfig,
    IndexConfig,
    ModuleRule,
    ServerConfig,
    StorageConfig,
    TokenConfig,
    UiConfig,
    UsageConfig,
    WebhooksConfig,
    default_max_per_host,
    default_max_queue,
    default_storage_path,
)
from gitreg.config.module_rules import parse_modules, parse_rule
from gitreg.config.orgs import parse_orgs
from gitreg.config.providers import parse_providers
from gitreg.config.reader import TableReader, one_of, type_name
from gitreg.config.signing import parse_signing
from gitreg.core import urls
from gitreg.core.errors import ConfigError
from gitreg.core.names import NAME_RE, REGISTRY_HOST_RE

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config file is a few KiB; refuse to read /dev/zero whole


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
    index = IndexConfig(
        enabled=ix.bool("enabled", True),
        parse_seconds=ix.number("parse_seconds", IndexConfig.parse_seconds, minimum=0.1, maximum=3600.0),
    )
    ix.finish()
    return index


def _parse_usage(u: TableReader, server: ServerConfig) -> UsageConfig:
    """`[usage]`: `hosts` lowercased; without it, public_url's host (none: an error when `scan` is on)."""
    scan = u.bool("scan", False)
    hosts = tuple(h.strip().lower() for h in u.str_list("hosts"))
    for host in hosts:
        if not REGISTRY_HOST_RE.fullmatch(host):
            u.error("hosts", f"{host[:80]!r} is not a host name (e.g. registry.example.com or host:8443)")
    if not hosts and server.public_url is not None:
        public = urls.parse(server.public_url)
        if public is not None and public.host:
            hosts = (public.host + (f":{public.port}" if public.port else ""),)
    if scan and not hosts:
        u.error("hosts", "is needed when scan = true and [server] public_url is not set")
    u.finish()
    return UsageConfig(scan=scan, hosts=hosts)


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
    unsigned = auth.enabled and auth.signing_key is None  # provider package URLs would need a signing key
    modules = parse_modules(root, gitcfg.protocols)
    orgs = parse_orgs(root)
    providers = parse_providers(root, tuple(orgs), auth.forges, unsigned and not a.problems_for("signing_key"))
    credentials = _parse_credentials(root)
    usage = _parse_usage(root.section("usage"), server)
    required = any(rule.require_signed for rule in modules) or any(org.require_signed for org in orgs)
    signing = parse_signing(root.section("signing"), required)
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
        providers=tuple(providers),
        usage=usage,
        signing=signing,
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
    rule = parse_rule(TableReader(table, f"--module {address}", problems, {}), protocols)
    if problems or rule is None:
        raise ConfigError(problems)
    return rule
