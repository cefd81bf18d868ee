"""Configuration: every problem named by its key path; every key documented."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from gitreg.config.model import (
    AuthConfig,
    CacheConfig,
    Config,
    Credential,
    ForgeAuthConfig,
    GitConfig,
    ModuleRule,
    OidcConfig,
    OrgConfig,
    ProviderRule,
    ServerConfig,
    StorageConfig,
    TokenConfig,
    WebhooksConfig,
)
from gitreg.config.parse import load_config, module_rule_from_flag, parse_config
from gitreg.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"


def problems(data: dict, env: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, env or {})
    return info.value.problems


def test_example_config_is_valid():
    config = load_config(EXAMPLE, {"GITLAB_TOKEN": "glpat-secret-value"})
    assert config.modules[1].path == "modules/network"
    assert config.credentials[0].password == "glpat-secret-value"


@pytest.mark.parametrize(
    ("section", "cls"),
    [
        ("server", ServerConfig),
        ("cache", CacheConfig),
        ("git", GitConfig),
        ("auth", AuthConfig),
        ("modules", ModuleRule),
        ("credentials", Credential),
        ("storage", StorageConfig),
        ("webhooks", WebhooksConfig),
        ("auth", TokenConfig),
        ("orgs", OrgConfig),
        ("auth.forges", ForgeAuthConfig),
        ("auth.oidc", OidcConfig),
        ("providers", ProviderRule),
    ],
)
def test_every_config_key_is_documented_in_the_example(section, cls):
    text = EXAMPLE.read_text()
    documented = set(re.findall(r"\b([a-z_]+)\s*=", text))
    assert f"[{section}]" in text or f"[[{section}]]" in text
    # An array of tables inside a section ([[auth.forges]]) documents that field by its header.
    documented |= {m.rsplit(".", 1)[-1] for m in re.findall(rf"\[\[{re.escape(section)}\.(\w+)\]\]", text)}
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in documented]
    assert not missing, f"[{section}] keys missing from config.example.toml: {missing}"


def test_every_top_level_section_is_documented():
    sections = {f.name for f in dataclasses.fields(Config)} - {"source"}
    text = EXAMPLE.read_text()
    for section in sections:
        assert re.search(rf"^#?\s*\[\[?{section}\]\]?", text, re.MULTILINE), section


def test_example_documents_only_keys_the_parser_accepts(tmp_path):
    # Every commented key and every commented array-of-tables header ([[auth.forges]]) uncommented.
    text = re.sub(r"^# ?(\w+\s*=|\[\[[\w.]+\]\]$)", r"\1", EXAMPLE.read_text(), flags=re.MULTILINE)
    for name in ("cert.pem", "key.pem"):
        (tmp_path / name).write_text("x")
        text = text.replace(f"/etc/gitreg/tls/{name}", str(tmp_path / name))
    (tmp_path / "keys.asc").write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    text = text.replace("/etc/gitreg/provider-keys.asc", str(tmp_path / "keys.asc"))
    text = text.replace("/etc/gitreg/release-keys.asc", str(tmp_path / "keys.asc"))
    (tmp_path / "allowed_signers").write_text("release@example.com ssh-ed25519 AAAA\n")
    text = text.replace("/etc/gitreg/allowed_signers", str(tmp_path / "allowed_signers"))
    data = tomllib.loads(text)
    env = dict.fromkeys(re.findall(r"\$\{(\w+)\}", text), "x" * 40)
    parse_config(data, env)


def test_missing_repository_is_named_by_key_path():
    assert problems({"modules": [{"namespace": "acme", "repository": "file:///r"}, {"namespace": "x"}]}) == [
        "modules[1].repository: missing"
    ]


def test_unknown_keys_and_wrong_types_are_all_reported():
    found = problems({"server": {"port": "80", "hots": "x"}, "cache": {"ttl_seconds": True}, "extra": 1})
    assert "server.port: must be an integer, not a string" in found
    assert "server.hots: unknown key; did you mean host?" in found
    assert "cache.ttl_seconds: must be a number, not a boolean" in found
    assert "extra: unknown key" in found


def test_missing_environment_variable_names_key_and_variable():
    found = problems({"credentials": [{"url": "https://h/", "username": "u", "password": "${NOPE_TOKEN}"}]})
    assert found == ["credentials[0].password: environment variable NOPE_TOKEN is not set"]


def test_a_change_me_placeholder_is_refused_as_written_or_through_a_variable_naming_key_and_variable():
    found = problems(
        {
            "auth": {"tokens": ["${REGISTRY_TOKEN}"], "metrics_token": "change-me-metrics-token-0123"},
            "webhooks": {"gitlab_token": " CHANGE-ME"},
            "credentials": [{"url": "https://h/", "username": "u", "password": "${TOKEN}"}],
        },
        env={"REGISTRY_TOKEN": "CHANGE-ME-registry-token-0123456789", "TOKEN": "Change-Me"},
    )
    assert found == [
        "auth.tokens[0]: environment variable REGISTRY_TOKEN holds a placeholder (CHANGE-ME...): set the real value",
        "auth.metrics_token: is a placeholder (CHANGE-ME...): set the real value",
        "webhooks.gitlab_token: is a placeholder (CHANGE-ME...): set the real value",
        "credentials[0].password: environment variable TOKEN holds a placeholder (CHANGE-ME...): set the real value",
    ]
    # A value that only contains the words further on is a value like any other.
    parse_config({"webhooks": {"gitlab_token": "${T}"}}, {"T": "real-secret-not-CHANGE-ME-0123"})


def test_environment_variables_expand_and_dollar_escapes():
    config = parse_config(
        {"credentials": [{"url": "https://h/", "username": "u$$er", "password": "${TOK}"}]}, {"TOK": "s3cret"}
    )
    assert config.credentials[0].username == "u$er"
    assert config.credentials[0].password == "s3cret"


def test_tls_needs_both_cert_and_key(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    assert problems({"server": {"tls_cert": str(cert)}}) == [
        "server.tls_key: tls_cert and tls_key must be given together (both or neither)"
    ]


def test_tls_files_must_exist(tmp_path):
    found = problems({"server": {"tls_cert": str(tmp_path / "a"), "tls_key": str(tmp_path / "b")}})
    assert any(p.startswith("server.tls_cert: file") for p in found)
    assert any(p.startswith("server.tls_key: file") for p in found)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"repository": "https://u:pw@h/r.git"}, "modules[0].repository: must not contain a password"),
        ({"repository": "ext::sh -c id"}, "modules[0].repository: 'ext::sh -c id' is not a Git URL"),
        ({"repository": "http://h/r.git"}, "modules[0].repository: transport 'http' is not allowed"),
        ({"repository": "https://h/{org}.git"}, "modules[0].repository: unknown placeholder {org}"),
        ({"repository": "file:///r", "path": "../x"}, "modules[0].path: '../x' must be a relative path"),
        ({"repository": "file:///r", "ref": "branch"}, 'modules[0].ref: must be "tag" or "commit"'),
        ({"repository": "file:///r", "system": "AWS"}, "modules[0].system: 'AWS' is not a valid system"),
        ({"repository": "file:///r", "namespace": "-acme"}, "modules[0].namespace: '-acme' is not a valid namespace"),
        ({"repository": "file:///r", "tag_prefix": "a b"}, "modules[0].tag_prefix: 'a b' may contain only"),
        ({"repository": "https://[oops/r.git"}, "modules[0].repository: 'https://[oops/r.git' is not a valid URL"),
        ({"repository": "https://h:99999/r.git"}, "modules[0].repository: 'https://h:99999/r.git' is not a valid URL"),
    ],
)
def test_bad_rules_are_rejected_with_the_reason(rule, expected):
    found = problems({"modules": [rule]})
    assert any(p.startswith(expected) for p in found), found


def test_http_transport_can_be_allowed_explicitly():
    config = parse_config({"git": {"protocols": ["https", "http"]}, "modules": [{"repository": "http://h/r.git"}]}, {})
    assert config.modules[0].repository == "http://h/r.git"


def test_short_registry_tokens_are_rejected():
    assert problems({"auth": {"tokens": ["short"]}}) == [
        "auth.tokens[0]: is shorter than 16 characters; use a long random token"
    ]


def test_secrets_are_not_in_the_repr_of_config_objects():
    config = parse_config(
        {
            "auth": {"tokens": ["registry-token-0123456789"]},
            "credentials": [{"url": "https://h/", "username": "u", "password": "git-password-0123"}],
        },
        {},
    )
    text = repr(config) + repr(config.auth) + repr(config.credentials) + str(config)
    assert "registry-token-0123456789" not in text
    assert "git-password-0123" not in text


@pytest.mark.parametrize("host", ["https://registry.example.com", "a b", "-x.example", "h:port", "tf.example/x", ""])
def test_a_registry_host_that_no_module_source_can_name_is_a_config_error(host):
    assert problems({"server": {"registry_host": host}}) == [
        f"server.registry_host: {host!r} must be a host name like registry.example.com (a port may follow)"
    ]
    assert parse_config({"server": {"registry_host": "registry.example.test:8443"}}, {}).server.registry_host


@pytest.mark.parametrize("url", ["https://[oops", "https://h:port", "ftp://h", "https://"])
def test_bad_public_url_is_a_config_error_not_a_traceback(url):
    assert problems({"server": {"public_url": url}}) == [
        f"server.public_url: {url!r} must be an http(s) URL like https://registry.example.com"
    ]


def test_module_flag_makes_an_explicit_rule():
    rule = module_rule_from_flag("demo/hello/null=file:///srv/hello.git")
    assert (rule.namespace, rule.name, rule.system, rule.repository) == (
        "demo",
        "hello",
        "null",
        "file:///srv/hello.git",
    )
    assert rule.explicit


@pytest.mark.parametrize("value", ["demo/hello=file:///r", "demo/hello/null", "demo/hello/NULL=file:///r", "a/b/c="])
def test_bad_module_flags_are_config_errors(value):
    with pytest.raises(ConfigError):
        module_rule_from_flag(value)


def test_invalid_toml_is_a_config_error(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[server\nport = 1")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "not valid TOML" in info.value.problems[0]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"modules": [{"namespace": "acme", "repo": "https://h/x.git"}]},
            "modules[0].repo: unknown key; did you mean repository?",
        ),
        (
            {"modules": [{"repository": "https://h/x.git", "tag_prefx": "net/"}]},
            "modules[0].tag_prefx: unknown key; did you mean tag_prefix?",
        ),
        ({"cache": {"ttl": 60}}, "cache.ttl: unknown key; did you mean ttl_seconds?"),
        ({"servr": {"port": 80}}, "servr: unknown key; did you mean server?"),
    ],
)
def test_an_unknown_key_names_the_key_it_probably_meant(data, expected):
    assert expected in problems(data)


def test_an_unknown_key_like_no_known_key_gets_no_guess():
    assert "modules[0].colour: unknown key" in problems(
        {"modules": [{"repository": "https://h/x.git", "colour": "red"}]}
    )


@pytest.mark.parametrize(
    "data",
    [
        {"modules": [{"namespace": "acme", "repository": "${UNSET}"}]},
        {"modules": [{"namespace": "acme", "repository": "https://${UNSET}/acme/{name}.git"}]},
        {"modules": [{"namespace": "acme", "repository": "https://h/x.git", "clone_url": "${UNSET}"}]},
        {"auth": {"tokens": ["${UNSET}"]}},
        {"auth": {"tokens": [{"token": "${UNSET}", "namespaces": ["acme"]}]}},
        {"auth": {"metrics_token": "${UNSET}"}},
        {
            "auth": {"tokens": ["registry-token-long-enough"], "signing_key": "${UNSET}"},
            "modules": [{"namespace": "acme", "repository": "https://h/x.git", "download": "archive"}],
        },
        {"webhooks": {"github_secret": "${UNSET}"}},
        {"server": {"public_url": "${UNSET}"}},
        {"server": {"tls_cert": "${UNSET}", "tls_key": "/etc/key.pem"}},
        {"credentials": [{"url": "${UNSET}", "username": "u", "password": "p"}]},
        {"git": {"protocols": ["${UNSET}"]}},
    ],
)
def test_one_unset_environment_variable_is_one_problem(data):
    found = [p for p in problems(data) if "key.pem" not in p]  # tls_key's own file check is another fact
    assert len(found) == 1 and found[0].endswith("environment variable UNSET is not set"), found


# --- numbers: finite and bounded; unreadable files ------------------------------------------------

NUMBER_KEYS = [
    ("server", "idle_timeout_seconds"),
    ("cache", "ttl_seconds"),
    ("cache", "stale_seconds"),
    ("cache", "negative_ttl_seconds"),
    ("cache", "error_retry_seconds"),
    ("git", "timeout_seconds"),
    ("auth", "signed_url_ttl_seconds"),
]


@pytest.mark.parametrize(("section", "key"), NUMBER_KEYS)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 1e308, 10**400, -1])
def test_every_number_key_refuses_nan_infinity_and_absurd_values_naming_the_key(section, key, value):
    found = problems({section: {key: value}})
    assert len(found) == 1 and found[0].startswith(f"{section}.{key}: must be a number between "), found
    assert len(found[0]) < 200  # a 400-digit integer is not echoed whole


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("cache", "max_repositories", 10**30),
        ("storage", "max_bytes", 2**80),
        ("git", "max_concurrency", 10**6),
        ("server", "port", 70000),
    ],
)
def test_every_integer_key_has_a_maximum(section, key, value):
    found = problems({section: {key: value}})
    assert len(found) == 1 and found[0].startswith(f"{section}.{key}: must be between "), found


def test_sane_numbers_at_the_bounds_are_accepted():
    config = parse_config(
        {
            "server": {"idle_timeout_seconds": 86400},
            "cache": {"ttl_seconds": 0, "stale_seconds": 2592000},
            "git": {"timeout_seconds": 86400},
            "auth": {"signed_url_ttl_seconds": 86400},
        },
        {},
    )
    assert config.git.timeout_seconds == 86400.0 and config.cache.ttl_seconds == 0.0
    assert config.server.idle_timeout_seconds == 86400.0
    assert parse_config({}, {}).server.idle_timeout_seconds == 15.0


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('[server]\nhost = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [f"{path}: not UTF-8 text (byte 0xe9 on line 2); TOML files must be UTF-8"]


@pytest.mark.parametrize("nested", ["x = " + "[" * 5000 + "]" * 5000, "x = " + "{a = " * 5000 + "1" + "}" * 5000])
def test_deeply_nested_toml_is_a_config_error_not_a_recursion_error(tmp_path, nested):
    path = tmp_path / "deep.toml"
    path.write_text(nested + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [f"{path}: not valid TOML: arrays or tables nested too deeply"]


def test_a_huge_config_file_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "huge.toml"
    path.write_text("# padding\n" * 500_000)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [f"{path}: larger than 4 MiB; not a config file"]


def test_trusted_proxies_are_ip_addresses_or_networks():
    assert parse_config({"server": {"trusted_proxies": ["127.0.0.1", "10.0.0.0/8", "::1"]}}, {}).server.trusted_proxies
    assert problems({"server": {"trusted_proxies": ["10.0.0.0/8", "proxy.example"]}}) == [
        "server.trusted_proxies[1]: 'proxy.example' is not an IP address or CIDR network like 10.0.0.0/8"
    ]


def test_auth_forges_and_oidc_are_read_with_their_defaults():
    config = parse_config(
        {
            "auth": {
                "signing_key": "k" * 40,
                "forges": [
                    {
                        "provider": "gitlab",
                        "url": "https://gitlab.example.com/",
                        "oauth_client_id": "id",
                        "oauth_client_secret": "${SECRET}",
                    },
                    {"provider": "github"},
                    {"provider": "github", "url": "https://ghe.example.com", "recheck_seconds": 60},
                ],
                "oidc": [
                    {
                        "issuer": "https://token.actions.githubusercontent.com",
                        "audience": "https://r.example",
                        "namespaces": ["acme"],
                        "claims": {"repository_owner": "acme"},
                    }
                ],
            }
        },
        {"SECRET": "s3cret"},
    )
    gitlab, github, ghe = config.auth.forges
    assert (gitlab.url, gitlab.api_url, gitlab.oauth, gitlab.recheck_seconds) == (
        "https://gitlab.example.com",
        "https://gitlab.example.com/api/v4",
        True,
        300.0,
    )
    assert "s3cret" not in repr(gitlab)
    assert (github.url, github.api_url, github.oauth) == ("https://github.com", "https://api.github.com", False)
    assert (ghe.api_url, ghe.recheck_seconds) == ("https://ghe.example.com/api/v3", 60.0)
    (oidc,) = config.auth.oidc
    assert oidc.namespaces == ("acme",) and oidc.claims == (("repository_owner", "acme"),)
    assert config.auth.enabled


def test_auth_identity_keys_are_validated_by_key():
    found = problems(
        {
            "auth": {
                "forges": [
                    {
                        "provider": "gitlab",
                        "url": "http://gitlab.example.com",
                        "recheck_seconds": float("inf"),
                        "oauth_client_id": "id",
                    },
                    {"provider": "github", "oauth_client_id": "id", "oauth_client_secret": "s"},
                ],
                "oidc": [{"issuer": "http://issuer.example", "audience": ""}],
            }
        }
    )
    assert (
        "auth.forges[0].url: 'http://gitlab.example.com' must be an https:// URL (http:// only when [git] "
        "protocols allows http)" in found
    )
    assert "auth.forges[0].recheck_seconds: must be a number between 10 and 3600, not inf" in found
    assert "auth.forges[0].oauth_client_id: needs oauth_client_secret too (the OAuth application's secret)" in found
    assert any(p.startswith("auth.forges[1].oauth_client_id: needs [auth] signing_key") for p in found)
    assert any(p.startswith("auth.oidc[0].issuer: 'http://issuer.example' must be an https:// URL") for p in found)
    assert "auth.oidc[0].audience: must not be empty: it is the `aud` the CI job asks its token for" in found


def test_oidc_claims_take_a_glob_or_an_exact_value_and_refuse_the_rest():
    oidc = {
        "issuer": "https://issuer.example",
        "audience": "https://registry.example",
        "claims": {"ref": {"exact": "refs/heads/ma*n"}, "sub": "a\\", "aud2": {"equals": "x"}, "n": 3},
    }
    found = problems({"auth": {"oidc": [oidc]}})
    assert "auth.oidc[0].claims.sub: ends with a lone \\ (it makes the next character literal)" in found
    assert 'auth.oidc[0].claims.aud2: must be a non-empty string (a glob) or { exact = "value" }, not a table' in found
    assert 'auth.oidc[0].claims.n: must be a non-empty string (a glob) or { exact = "value" }, not an integer' in found
    assert not any("claims.ref" in p for p in found)


def test_an_auth_forges_api_url_must_be_on_the_hosts_own_host():
    found = problems(
        {
            "auth": {
                "forges": [
                    {
                        "provider": "gitlab",
                        "url": "https://gitlab.example.com",
                        "api_url": "https://evil.example/api/v4",
                    },
                    {"provider": "github", "api_url": "https://api.github.com"},
                    {
                        "provider": "github",
                        "url": "https://ghe.example.com",
                        "api_url": "https://ghe.example.com/api/v3",
                    },
                ]
            }
        }
    )
    assert found == [
        (
            "auth.forges[0].api_url: 'https://evil.example/api/v4' must be on the host of url "
            "('https://gitlab.example.com'); people's tokens are sent there"
        )
    ]


def test_auth_forges_may_be_plain_http_when_git_allows_http():
    config = parse_config(
        {
            "git": {"protocols": ["https", "http"]},
            "auth": {"forges": [{"provider": "gitlab", "url": "http://127.0.0.1:9/"}]},
        }
    )
    assert config.auth.forges[0].api_url == "http://127.0.0.1:9/api/v4"
