"""`[[providers]]`: providers served from a repository's releases, validated like every section."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitreg.config.parse import parse_config
from gitreg.core.errors import ConfigError

ARMORED = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQENBF...\n-----END PGP PUBLIC KEY BLOCK-----\n"


@pytest.fixture
def keys(tmp_path: Path) -> str:
    path = tmp_path / "keys.asc"
    path.write_text(ARMORED)
    return str(path)


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, {})
    return info.value.problems


def test_a_provider_rule_for_any_type_on_github_infers_the_api(keys):
    table = {"namespace": "acme", "type": "*", "repository": "https://github.com/acme/terraform-provider-{type}"}
    config = parse_config({"providers": [{**table, "keys": keys}]}, {})
    (rule,) = config.providers
    assert (rule.namespace, rule.type, rule.keys) == ("acme", None, keys)
    assert (rule.provider, rule.api_url) == ("github", "https://api.github.com")
    assert rule.repository_for("widget") == "https://github.com/acme/terraform-provider-widget"


def test_the_api_of_a_self_hosted_gitlab_comes_from_an_org_on_that_host(keys):
    org = {"provider": "gitlab", "api_url": "https://git.example.com/api/v4", "group": "infra", "namespace": "acme"}
    rule = {"namespace": "acme", "type": "dns", "repository": "https://git.example.com/infra/tf-dns", "keys": keys}
    config = parse_config({"orgs": [org], "providers": [rule]}, {})
    assert (config.providers[0].provider, config.providers[0].api_url) == ("gitlab", "https://git.example.com/api/v4")


def test_every_problem_of_a_provider_rule_is_named_by_its_key(tmp_path, keys):
    bare = tmp_path / "bare.asc"
    bare.write_text("not a key")
    found = problems(
        {
            "providers": [
                {"namespace": "a b", "type": "*", "repository": "https://github.com/acme/fixed", "keys": keys},
                {"namespace": "acme", "type": "Wid_get", "repository": "ssh://git@h/x/y", "keys": str(bare)},
                {"namespace": "acme", "type": "w", "repository": "https://git.example.com/x/y", "keys": "/nope.asc"},
                {"type": "w"},
            ]
        }
    )
    assert "providers[0].namespace: 'a b' is not a valid namespace: expected 1-64 letters, digits, '-' or '_'" in found
    assert 'providers[0].repository: must contain {type} exactly once with type = "*"' in found
    assert "providers[1].type: 'Wid_get' is not a provider type" in " ".join(found)
    assert "providers[1].repository: 'ssh://git@h/x/y' must be the repository's https://" in " ".join(found)
    assert f"providers[1].keys: {str(bare)!r} holds no armored OpenPGP public key" in " ".join(found)
    assert "providers[2].keys: cannot read '/nope.asc': No such file or directory" in found
    assert "providers[2].api_url: the Git host of 'git.example.com' is not known: set provider and api_url" in found
    assert {"providers[3].namespace: missing", "providers[3].repository: missing", "providers[3].keys: missing"} <= set(
        found
    )


def test_a_provider_served_twice_and_auth_without_a_signing_key_are_refused(keys):
    rule = {"namespace": "acme", "type": "w", "repository": "https://github.com/acme/w", "keys": keys}
    found = problems({"auth": {"tokens": ["t" * 20]}, "providers": [rule, rule]})
    assert "providers[1]: acme/w is already served by providers[0]" in found
    assert any(p.startswith("providers: registry auth") and "signing_key" in p for p in found)


def test_an_org_with_providers_serves_its_terraform_provider_repositories(keys):
    org = {"provider": "github", "group": "acme", "namespace": "acme", "providers": True, "provider_keys": keys}
    gitlab = {"provider": "gitlab", "api_url": "https://git.example.com/api/v4", "group": "infra/tf"}
    config = parse_config(
        {"orgs": [org, {**gitlab, "namespace": "infra", "providers": True, "provider_keys": keys}]}, {}
    )
    hub, lab = config.providers
    assert (hub.namespace, hub.type, hub.keys) == ("acme", None, keys)
    assert hub.repository_for("widget") == "https://github.com/acme/terraform-provider-widget"
    assert lab.repository_for("dns") == "https://git.example.com/infra/tf/terraform-provider-dns"
    assert lab.api_url == "https://git.example.com/api/v4"
    found = problems(
        {"orgs": [{**org, "provider_keys": None}]}
        if False
        else {"orgs": [{k: v for k, v in org.items() if k != "provider_keys"}]}
    )
    assert found == [
        "orgs[0].provider_keys: is required with providers = true: the OpenPGP keys that sign the releases"
    ]


def test_how_zips_reach_clients_is_proxy_unless_a_rule_or_org_says_redirect(keys):
    rule = {"namespace": "acme", "type": "w", "repository": "https://github.com/acme/w", "keys": keys}
    org = {"provider": "github", "group": "infra", "namespace": "infra", "providers": True, "provider_keys": keys}
    config = parse_config({"providers": [rule], "orgs": [org]}, {})
    assert [p.download for p in config.providers] == ["proxy", "proxy"]
    config = parse_config(
        {"providers": [{**rule, "download": "redirect"}], "orgs": [{**org, "provider_download": "redirect"}]}, {}
    )
    assert [p.download for p in config.providers] == ["redirect", "redirect"]
    found = problems({"providers": [{**rule, "download": "presigned"}], "orgs": [{**org, "provider_download": 1}]})
    assert 'providers[0].download: must be "proxy" or "redirect", not \'presigned\'' in found
    assert any(p.startswith("orgs[0].provider_download: ") for p in found), found
