"""`download = "archive"` is the default for [[modules]] and [[orgs]] (issue 35); "git" stays available."""

from __future__ import annotations

from gitreg.config.parse import parse_config


def test_a_rule_or_org_with_no_download_key_is_archive_and_git_stays_available():
    config = parse_config(
        {
            "modules": [
                {"namespace": "a", "repository": "https://git.example.com/a.git"},
                {"namespace": "b", "repository": "https://git.example.com/b.git", "download": "git"},
            ],
            "orgs": [{"provider": "github", "group": "acme-infra", "namespace": "acme"}],
        },
        {},
    )
    assert [r.download for r in config.modules] == ["archive", "git"]
    assert config.orgs[0].download == "archive"


def test_a_rule_that_asks_for_a_shallow_clone_and_names_no_download_mode_stays_in_git_mode():
    # `shallow` exists only in git mode: such a config started before archive became the default.
    config = parse_config(
        {"modules": [{"namespace": "a", "repository": "https://g.example.com/a.git", "shallow": True}]}, {}
    )
    assert config.modules[0].download == "git" and config.modules[0].shallow


def test_registry_auth_without_a_signing_key_no_longer_refuses_archive_mode():
    auth = {"tokens": ["a-registry-token-0123456789"]}
    for download in ({}, {"download": "archive"}):
        rule = {"namespace": "a", "repository": "https://g.example.com/a.git", **download}
        org = {"provider": "github", "group": "acme-infra", "namespace": "acme", **download}
        config = parse_config({"auth": auth, "modules": [rule], "orgs": [org]}, {})
        assert config.modules[0].download == config.orgs[0].download == "archive"
