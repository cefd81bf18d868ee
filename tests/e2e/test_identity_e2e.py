"""The real Terraform CLIs with the credentials people and CI jobs already have.

`terraform init` with a GitLab personal access token and with a GitHub token as
`TF_TOKEN_<host>`, and with a CI job's OIDC ID token: each installs a module its identity can
read, and a Git host token is refused (403) a module whose repository its user cannot read.
Then revocation: the fake host drops the user from the project and, within recheck_seconds
(10 here), `terraform init` fails and the list hides the module; restoring restores both.
gitreg runs as a subprocess (`gitreg serve`); the fake hosts and issuer in threads.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.oidc import AUDIENCE, FakeIssuer
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.terraform import TerraformClient, clean_env, cli_config, require_clients

pytestmark = pytest.mark.slow

GITLAB_PAT = "glpat-e2e-alice-7Qw3Rt9Yp2"
GITHUB_PAT = "ghp_e2eAlice5Lm8Nb2Vc4"
NET, DNS = "terraform-aws-net", "terraform-aws-dns"


@dataclass
class World:
    server: GitregProcess
    gitlab: FakeForge
    github: FakeForge
    issuer: FakeIssuer


def _config(tmp_path: Path, gitlab: FakeForge, github: FakeForge, issuer: FakeIssuer) -> Path:
    path = tmp_path / "gitreg.toml"
    path.write_text(
        f"""
[git]
protocols = ["http"]
[storage]
path = "{tmp_path / "state"}"
[[orgs]]
provider = "gitlab"
api_url = "{gitlab.api_url}"
group = "acme"
namespace = "acme"
token = "glpat-org-token-e2e-0001"
[[orgs]]
provider = "github"
api_url = "{github.api_url}"
group = "acme"
namespace = "gh"
token = "ghp_orgTokenE2e0001"
clone_hosts = ["localhost"]
[[auth.forges]]
provider = "gitlab"
url = "{gitlab.base_url}"
recheck_seconds = 10
[[auth.forges]]
provider = "github"
url = "{github.base_url}"
api_url = "{github.api_url}"
recheck_seconds = 10
[[auth.oidc]]
issuer = "{issuer.issuer}"
audience = "{AUDIENCE}"
namespaces = ["acme"]
claims = {{ namespace_path = "acme" }}
"""
    )
    return path


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    root = tmp_path / "repos"
    for name in (NET, DNS):
        repo = GitRepo(root, f"acme/{name}")
        repo.commit({"main.tf": f'output "name" {{ value = "{name}" }}\n'})
        repo.tag("v1.0.0")
    with GitHttpServer(root) as git:
        gitlab = FakeForge("gitlab", git, "acme", token="glpat-org-token-e2e-0001")
        github = FakeForge("github", git, "acme", token="ghp_orgTokenE2e0001")
        for fake, token in ((gitlab, GITLAB_PAT), (github, GITHUB_PAT)):
            for name in (NET, DNS):
                fake.add(name, repo=f"acme/{name}")
            fake.add_user("alice", token, sees=(NET,))
        for name in (NET, DNS):  # GitHub's clones come from another host (both APIs are on 127.0.0.1)
            github.update(name, clone_url=git.url(f"acme/{name}.git").replace("127.0.0.1", "localhost"))
        with gitlab.in_thread(), github.in_thread(), FakeIssuer().in_thread() as issuer:
            server = GitregProcess("--config", str(_config(tmp_path, gitlab, github, issuer))).start()
            try:
                server.wait_indexed()
                yield World(server, gitlab, github, issuer)
            finally:
                server.stop()


def _init(terraform: TerraformClient, tmp_path: Path, server_url: str, source: str, token: str, name: str):
    work = tmp_path / name
    work.mkdir(parents=True)
    (work / "main.tf").write_text(f'module "m" {{\n  source  = "{source}"\n  version = "~> 1.0"\n}}\n')
    cli = cli_config(tmp_path / f"{name}.tfrc", server_url)
    env = clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=str(cli), TF_TOKEN_registry_example_test=token)
    result = terraform.run(["init", "-input=false", "-no-color"], cwd=work, env=env)
    return result, result.stdout + result.stderr


def _listed(server_url: str, token: str) -> list[str]:
    request = urllib.request.Request(server_url + "/v1/modules", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return [m["id"].rsplit("/", 1)[0] for m in json.loads(resp.read())["modules"]]


def test_terraform_init_with_a_gitlab_token_a_github_token_and_a_ci_id_token(terraform_client, world, tmp_path):
    url = world.server.url
    ok, out = _init(terraform_client, tmp_path, url, "registry.example.test/acme/net/aws", GITLAB_PAT, "gitlab-ok")
    assert ok.returncode == 0, out
    refused, out = _init(
        terraform_client, tmp_path, url, "registry.example.test/acme/dns/aws", GITLAB_PAT, "gitlab-403"
    )
    assert refused.returncode != 0
    assert "403" in out or "Forbidden" in out, out
    assert not (tmp_path / "gitlab-403/.terraform/modules/m").exists()
    ok, out = _init(terraform_client, tmp_path, url, "registry.example.test/gh/net/aws", GITHUB_PAT, "github-ok")
    assert ok.returncode == 0, out
    jwt = world.issuer.sign(world.issuer.claims())
    ok, out = _init(terraform_client, tmp_path, url, "registry.example.test/acme/dns/aws", jwt, "oidc-ok")
    assert ok.returncode == 0, out
    # The CI job's install is recorded (#35, observed installs); a CI token is shown counts, not names.
    request = urllib.request.Request(
        url + "/v1/modules/acme/dns/aws/consumers", headers={"Authorization": f"Bearer {jwt}"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert json.loads(resp.read())["installs_hidden"] == 1
    # The access log names who installed what (written within a quarter of a second), and never carries a token.
    world.server.wait_for_log("alice@127.0.0.1")
    world.server.wait_for_log("oidc:acme/infra")
    log = "".join(world.server.log)
    for secret in (GITLAB_PAT, GITHUB_PAT, jwt):
        assert secret not in log


def test_dropping_a_user_from_the_project_cuts_terraform_init_within_recheck_seconds(world, tmp_path):
    terraform = require_clients()[0]
    url, source = world.server.url, "registry.example.test/acme/net/aws"
    assert _init(terraform, tmp_path, url, source, GITLAB_PAT, "before")[0].returncode == 0
    assert _listed(url, GITLAB_PAT) == ["acme/net/aws"]
    world.gitlab.revoke("alice", NET)
    time.sleep(11)  # recheck_seconds = 10
    refused, out = _init(terraform, tmp_path, url, source, GITLAB_PAT, "revoked")
    assert refused.returncode != 0 and ("403" in out or "Forbidden" in out), out
    assert _listed(url, GITLAB_PAT) == []
    world.gitlab.grant("alice", NET)
    time.sleep(11)
    assert _init(terraform, tmp_path, url, source, GITLAB_PAT, "restored")[0].returncode == 0
    assert _listed(url, GITLAB_PAT) == ["acme/net/aws"]
