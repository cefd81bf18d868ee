"""Archive mode is the default (issue 35): a module rule with no `download` key is installed by both
real Terraform CLIs from gitreg's archive, by a config with registry tokens and no `[auth]
signing_key` (one that started before, in git mode): gitreg makes a key, keeps it in its storage
and reads it back at the next start."""

from __future__ import annotations

import json
import stat
import urllib.request
from urllib.parse import urlsplit

import pytest

from tests.support.app import GIT_PASSWORD, GIT_USER
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.terraform import clean_env, cli_config

pytestmark = pytest.mark.slow  # a real gitreg process and both real Terraform CLIs

TOKEN = "e2e-default-archive-token-31c9"


def get(url: str, token: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=20) as resp:
        return resp.status, resp.read(), dict(resp.headers)


def test_terraform_installs_a_module_with_no_download_key_from_its_archive_with_a_generated_key(
    terraform_client, tmp_path
):
    root = tmp_path / "repos"
    hello = GitRepo(root, "hello")
    hello.commit({"main.tf": 'output "v" { value = "hello-1.2.0" }\n'})
    hello.tag("v1.2.0")
    store = tmp_path / "store"
    with GitHttpServer(root, username=GIT_USER, password=GIT_PASSWORD) as git_http:
        config = tmp_path / "gitreg.toml"
        config.write_text(
            '[git]\nprotocols = ["http"]\n'
            f'[storage]\npath = "{store}"\n'
            f'[auth]\ntokens = ["{TOKEN}"]\n'  # no signing_key
            f'[[credentials]]\nurl = "{git_http.base_url}/"\nusername = "{GIT_USER}"\npassword = "${{GIT_PASSWORD}}"\n'
            '[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\n'
            f'repository = "{git_http.url("hello.git")}"\n'  # no download: archive
        )
        env = {"GIT_PASSWORD": GIT_PASSWORD}
        with GitregProcess("--config", str(config), env=env) as server:
            work = tmp_path / "work"
            work.mkdir()
            (work / "main.tf").write_text(
                'module "hello" {\n  source  = "registry.example.test/demo/hello/null"\n  version = "1.2.0"\n}\n'
            )
            cli_config(tmp_path / "cli.tfrc", server.url)
            empty_bin = tmp_path / "empty-bin"  # no git for Terraform: only an archive can be installed
            empty_bin.mkdir()
            tf_env = clean_env(
                tmp_path / "home",
                TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"),
                TF_TOKEN_registry_example_test=TOKEN,
                PATH=str(empty_bin),
            )
            result = terraform_client.run(["init", "-input=false", "-no-color"], cwd=work, env=tf_env)
            assert result.returncode == 0, f"{terraform_client.name} init failed:\n{result.stdout}\n{result.stderr}"
            _, body, headers = get(f"{server.url}/v1/modules/demo/hello/null/1.2.0/download", TOKEN)
            location = json.loads(body)["location"]
            assert location == headers["X-Terraform-Get"]
            assert "/1.2.0/archive.tar.gz?expires=" in location and "&checksum=sha256:" in location
            # The version's details (read by the index process) name the commit and that sha256.
            server.wait_indexed()
            details = json.loads(get(f"{server.url}/v1/modules/demo/hello/null/1.2.0", TOKEN)[1])
            assert details["commit"] == hello.head() and details["moved"] is None
            assert location.endswith(f"&checksum=sha256:{details['archive_sha256']}")
        first_log = "".join(server.log)
        seen = git_http.requests()
        key_file = store / "signing-key"
        key = key_file.read_text().strip()
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        # A restart reads the key back: a URL the first run signed still opens the archive.
        with GitregProcess("--config", str(config), env=env) as again:
            parts = urlsplit(location)
            status, archive, _ = get(f"{again.url}{parts.path}?{parts.query}")
            assert status == 200 and archive[:2] == b"\x1f\x8b"
        second_log = "".join(again.log)
    manifest = json.loads((work / ".terraform/modules/modules.json").read_text())
    (installed,) = [m for m in manifest["Modules"] if m["Key"] == "hello"]
    assert (work / installed["Dir"] / "main.tf").read_text() == 'output "v" { value = "hello-1.2.0" }\n'
    assert seen and all(r.headers.get("User-Agent", "").startswith("git/") for r in seen)  # gitreg alone
    assert key_file.read_text().strip() == key
    for log in (first_log, second_log):
        assert key not in log and TOKEN not in log and GIT_PASSWORD not in log
