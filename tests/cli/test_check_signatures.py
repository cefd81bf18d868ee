"""`gitreg check` with [signing] (#35): key files checked at start, `--probe` says who signed each version."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.process import run_gitreg
from tests.support.repos import GitRepo
from tests.support.signing import allowed_signers, ssh_key, ssh_signed_tag

pytestmark = pytest.mark.slow  # a real gitreg process and real git verifications


def write_config(tmp_path: Path, allowed: Path, repo: GitRepo, require: str = "true") -> Path:
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[signing]\nallowed_signers = "{allowed}"\nrequire = {require}\n'
        f'[storage]\npath = "{tmp_path / "state"}"\n'
        f'[[modules]]\nnamespace = "acme"\nname = "vpc"\nsystem = "aws"\nrepository = "{repo.url}"\n'
        'download = "git"\n'
    )
    return config


def test_check_probe_lists_who_signed_each_version_and_which_are_refused_and_why(tmp_path):
    alice, mallory = ssh_key(tmp_path / "keys", "alice"), ssh_key(tmp_path / "keys", "mallory")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"alice@example.com": alice})
    repo = GitRepo(tmp_path / "repos", "vpc")
    repo.commit({"main.tf": "# 1\n"})
    ssh_signed_tag(repo, "v1.0.0", alice)
    repo.commit({"main.tf": "# 2\n"})
    ssh_signed_tag(repo, "v1.1.0", mallory)
    repo.commit({"main.tf": "# 3\n"})
    repo.tag("v1.2.0")
    result = run_gitreg("check", "--config", str(write_config(tmp_path, allowed, repo)), "--probe")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "signatures (required):" in out
    assert "1.0.0: signed by alice@example.com (SSH key SHA256:" in out and "on the tag)" in out
    assert "1.1.0: REFUSED: version 1.1.0 is not served" in out and "not in [signing] allowed_signers" in out
    assert "1.2.0: REFUSED: version 1.2.0 is not served" in out and "neither its tag nor its commit is signed" in out


def test_check_probe_fails_when_signatures_are_required_and_no_version_is_signed(tmp_path):
    alice = ssh_key(tmp_path / "keys", "alice")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"alice@example.com": alice})
    repo = GitRepo(tmp_path / "repos", "vpc")
    repo.commit({"main.tf": "# 1\n"})
    repo.tag("v1.0.0", annotated=True)
    result = run_gitreg("check", "--config", str(write_config(tmp_path, allowed, repo)), "--probe")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1.0.0: REFUSED" in result.stdout


def test_a_missing_allowed_signers_file_is_a_config_error_naming_the_key(tmp_path):
    repo = GitRepo(tmp_path / "repos", "vpc")
    config = write_config(tmp_path, tmp_path / "nowhere" / "allowed_signers", repo)
    for command in (["check"], ["serve", "--port", "0"]):
        result = run_gitreg(*command, "--config", str(config))
        assert result.returncode == 2, result.stdout + result.stderr
        assert "signing.allowed_signers: cannot read" in result.stderr
        assert "No such file or directory" in result.stderr


def test_an_openpgp_keys_file_gpg_cannot_import_is_refused_at_start(tmp_path):
    repo = GitRepo(tmp_path / "repos", "vpc")
    keys = tmp_path / "release-keys.asc"
    keys.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot a key\n-----END PGP PUBLIC KEY BLOCK-----\n")
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[signing]\nopenpgp_keys = "{keys}"\n[storage]\npath = "{tmp_path / "state"}"\n'
        f'[[modules]]\nnamespace = "acme"\nname = "vpc"\nsystem = "aws"\nrepository = "{repo.url}"\ndownload = "git"\n'
    )
    for command in (["check"], ["serve", "--port", "0"]):
        result = run_gitreg(*command, "--config", str(config))
        assert result.returncode == 2, result.stdout + result.stderr
        assert "signing.openpgp_keys: gpg imports no public key from" in result.stderr
