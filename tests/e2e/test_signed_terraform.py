"""End to end (#35): the real Terraform CLIs against a gitreg that serves only signed versions.

`~> 1.0` installs the newest *signed* version, and an exact pin on an unsigned one fails with the
registry's reason, whether the module is downloaded with git or as an archive.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.signing import allowed_signers, ssh_key, ssh_signed_tag
from tests.support.terraform import clean_env, cli_config

pytestmark = pytest.mark.slow
HOST = "registry.example.test"


def signed_setup(tmp_path: Path, download: str) -> Path:
    """A repository whose newest version (1.2.0) is not signed; a config requiring signatures."""
    key = ssh_key(tmp_path / "keys", "release")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"release@example.com": key})
    repo = GitRepo(tmp_path / "repos", "hello")
    for version in ("1.0.0", "1.1.0", "1.2.0"):
        repo.commit({"main.tf": f'output "version" {{ value = "{version}" }}\n'})
        if version == "1.2.0":
            repo.tag(f"v{version}", annotated=True)  # pushed by someone without a trusted key
        else:
            ssh_signed_tag(repo, f"v{version}", key)
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[signing]\nallowed_signers = "{allowed}"\nrequire = true\n'
        f'[storage]\npath = "{tmp_path / "state"}"\n'
        f'[auth]\nsigning_key = "e2e-signing-key-for-archive-urls-0123"\n'
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
        f'download = "{download}"\n'
    )
    return config


def root_module(directory: Path, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "main.tf").write_text(
        f'module "m" {{\n  source  = "{HOST}/demo/hello/null"\n  version = "{version}"\n}}\n'
    )
    return directory


@pytest.mark.parametrize("download", ["git", "archive"])
def test_terraform_installs_the_newest_signed_version_and_refuses_an_unsigned_pin(terraform_client, tmp_path, download):
    config = signed_setup(tmp_path, download)
    with GitregProcess("--config", str(config)) as server:
        cli_config(tmp_path / "cli.tfrc", server.url)
        env = clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"))
        moving = root_module(tmp_path / "moving", "~> 1.0")
        result = terraform_client.run(["init", "-input=false", "-no-color"], cwd=moving, env=env)
        assert result.returncode == 0, f"{terraform_client.name} init failed:\n{result.stdout}\n{result.stderr}"
        manifest = json.loads((moving / ".terraform/modules/modules.json").read_text())
        assert {m["Key"]: m.get("Version") for m in manifest["Modules"] if m["Key"]} == {"m": "1.1.0"}
        assert 'value = "1.1.0"' in (moving / ".terraform/modules/m/main.tf").read_text()
        pinned = root_module(tmp_path / "pinned", "1.2.0")
        refused = terraform_client.run(["init", "-input=false", "-no-color"], cwd=pinned, env=env)
    assert refused.returncode != 0
    text = refused.stdout + refused.stderr
    # Not listed, so the CLI never reaches the download: no version matches, the newest is the signed one.
    assert "Unresolvable module version constraint" in text, text
    assert "The newest available version is 1.1.0" in " ".join(text.split()), text
