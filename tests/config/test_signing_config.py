"""`[signing]` and `require_signed` (#35): read and checked at start, every problem naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitreg.core.errors import ConfigError
from tests.support.app import make_config

MODULE = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": "https://git.example.com/vpc.git"}


def test_signing_keys_and_require_signed_are_read(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("alice@example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummyKeyForTheConfigTestOnly0000000\n")
    config = make_config(
        [{**MODULE, "require_signed": False, "download": "git"}],
        signing={"allowed_signers": str(allowed), "require": True},
    )
    assert config.signing.allowed_signers == str(allowed) and config.signing.require
    assert config.modules[0].require_signed is False
    assert make_config([{**MODULE, "download": "git"}]).modules[0].require_signed is None


@pytest.mark.parametrize(
    ("signing", "module", "expected"),
    [
        (
            {"allowed_signers": "/nonexistent/allowed"},
            {},
            "signing.allowed_signers: cannot read '/nonexistent/allowed'",
        ),
        ({"openpgp_keys": "/nonexistent/keys.asc"}, {}, "signing.openpgp_keys: cannot read '/nonexistent/keys.asc'"),
        ({"require": True}, {}, "signing.allowed_signers: signatures are required"),
        ({}, {"require_signed": True}, "signing: signatures are required"),
        ({"require": "yes"}, {}, "signing.require: must be true or false"),
        ({}, {"require_signed": 1}, "modules[0].require_signed: must be true or false"),
        ({"allowed": "x"}, {}, "signing.allowed: unknown key"),
    ],
)
def test_signing_problems_name_the_key(signing, module, expected) -> None:
    with pytest.raises(ConfigError) as raised:
        make_config([{**MODULE, "download": "git", **module}], signing=signing)
    assert any(expected in problem for problem in raised.value.problems), raised.value.problems


def test_a_keys_file_without_an_armored_key_is_refused(tmp_path: Path) -> None:
    keys = tmp_path / "keys.asc"
    keys.write_text("not a key\n")
    with pytest.raises(ConfigError) as raised:
        make_config([{**MODULE, "download": "git"}], signing={"openpgp_keys": str(keys)})
    assert "signing.openpgp_keys" in str(raised.value) and "no armored OpenPGP public key" in str(raised.value)


def test_require_signed_on_an_org_is_read(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("alice@example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummyKeyForTheConfigTestOnly0000000\n")
    org = {"provider": "github", "group": "acme", "namespace": "acme", "require_signed": True, "download": "git"}
    config = make_config([], orgs=[org], signing={"allowed_signers": str(allowed)})
    assert config.orgs[0].require_signed is True and not config.signing.require
    with pytest.raises(ConfigError) as raised:  # /dev/null lists no key
        make_config([], orgs=[org], signing={"allowed_signers": "/dev/null"})
    assert "lists no key" in str(raised.value)
