"""Deprecation and revocation (#35) end to end: both real Terraform CLIs against a real gitreg process.

A deprecated version carries `deprecation` in the versions answer and still installs; a revoked one
is not listed, so `~> 1.4` moves to the previous version and an exact pin fails (the reason is in
the download answer's 410, which the CLIs do not print: see CLIENTS.md). In git and archive modes.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.lifecycle import module_repo
from tests.support.process import GitregProcess
from tests.support.terraform import (
    REGISTRY_HOST,
    clean_env,
    cli_config,
)

pytestmark = pytest.mark.slow  # a real gitreg process and both real Terraform CLIs

DECLARED = """
[[deprecated]]
versions = "< 1.4.0"
reason   = "1.3 reads the old VPC layout"
link     = "https://wiki.example.com/vpc-1.4"
[[revoked]]
versions = "= 1.4.2"
reason   = "leaks the KMS key ARN in an output"
"""
REASON = "leaks the KMS key ARN in an output"


def root_module(directory: Path, blocks: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join(
        f'module "{key}" {{\n  source  = "{REGISTRY_HOST}/demo/hello/null"\n  version = "{version}"\n}}\n'
        for key, version in blocks.items()
    )
    (directory / "main.tf").write_text(text)
    return directory


def installed(directory: Path) -> dict[str, str]:
    manifest = json.loads((directory / ".terraform/modules/modules.json").read_text())
    return {m["Key"]: m.get("Version", "") for m in manifest["Modules"] if m["Key"]}


def output_of(directory: Path, key: str) -> str:
    return (directory / ".terraform/modules" / key / "main.tf").read_text()


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("download", ["git", "archive"])
def test_terraform_installs_a_deprecated_version_and_skips_a_revoked_one(terraform_client, tmp_path, download):
    repo = module_repo(tmp_path / "repos", "hello", DECLARED, ("1.3.0", "1.4.0", "1.4.1", "1.4.2"))
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "store"}"\n'
        '[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\n'
        f'repository = "{repo.url}"\ndownload = "{download}"\n'
    )
    with GitregProcess("--config", str(config)) as server:
        status, body = get(f"{server.url}/v1/modules/demo/hello/null/versions")
        assert status == 200
        assert body["modules"][0]["versions"] == [
            {"version": "1.4.1"},
            {"version": "1.4.0"},
            {
                "version": "1.3.0",
                "deprecation": {"reason": "1.3 reads the old VPC layout", "link": "https://wiki.example.com/vpc-1.4"},
            },
        ]
        cli = cli_config(tmp_path / "cli.tfrc", server.url)
        env = clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=str(cli))
        work = root_module(tmp_path / "work", {"deprecated": "1.3.0", "constrained": "~> 1.4"})
        result = terraform_client.run(["init", "-input=false", "-no-color"], cwd=work, env=env)
        assert result.returncode == 0, f"{terraform_client.name} init failed:\n{result.stdout}\n{result.stderr}"
        # Neither CLI prints anything of `deprecation` (1.11.4 and 1.15: only HCP Terraform's runs warn).
        # Installed with `deprecation` present; `~> 1.4` resolves to the newest version not revoked.
        assert installed(work) == {"deprecated": "1.3.0", "constrained": "1.4.1"}
        assert '"1.4.1"' in output_of(work, "constrained") and '"1.3.0"' in output_of(work, "deprecated")

        pinned = root_module(tmp_path / "pinned", {"revoked": "1.4.2"})
        result = terraform_client.run(["init", "-input=false", "-no-color"], cwd=pinned, env=env)
        assert result.returncode != 0, result.stdout
        assert "Unresolvable module version constraint" in result.stderr
        assert "The newest available version is 1.4.1" in result.stderr
        assert not (pinned / ".terraform/modules/revoked").exists()
        # What the CLIs do not print, the download answer says (curl, Renovate, scanners): 410 and why.
        status, body = get(f"{server.url}/v1/modules/demo/hello/null/1.4.2/download")
        assert status == 410
        assert body == {
            "errors": ["module demo/hello/null version 1.4.2 is revoked: leaks the KMS key ARN in an output"]
        }
