"""The first ten minutes: `gitreg demo`, the starter config, the example config, the README's promises."""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.gitreg_process import ROOT, GitregProcess, run_gitreg
from tests.support.terraform import TerraformClient, clean_env, require_clients, terraform_clients

CLIENTS = terraform_clients()


def terraform_on_path(client: TerraformClient, bin_dir: Path) -> Path:
    """A `terraform` command running `client`, for a command line that says `terraform init`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "terraform"
    shim.write_text(f'#!/bin/sh\nexec {shlex.join(client.argv)} "$@"\n')
    shim.chmod(0o755)
    return bin_dir


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS or [None], ids=lambda c: c.name if c else "no-client")
def test_gitreg_demo_prints_the_terraform_init_that_installs_its_module(client, tmp_path):
    if client is None:
        require_clients()  # fails under CI=true, skips elsewhere
    demo = GitregProcess(command="demo", cwd=tmp_path).start()
    try:
        printed = "".join(demo.log)
        command = re.search(r"^  (cd \S+ && TF_CLI_CONFIG_FILE=\S+ terraform init)$", printed, re.MULTILINE)
        assert command, printed
        assert f"The module browser: {demo.url}/" in printed
        env = clean_env(tmp_path / "home")
        env["PATH"] = f"{terraform_on_path(client, tmp_path / 'bin')}:{env['PATH']}"
        result = subprocess.run(["bash", "-c", command.group(1)], env=env, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Downloading registry.example.test/demo/hello/null 1.2.0" in result.stdout
        with urllib.request.urlopen(f"{demo.url}/", timeout=10) as page:  # the page it names answers
            assert page.status == 200
        directory = Path(command.group(1).split()[1]).parent
        assert (directory / "terraform/.terraform/modules/hello/main.tf").read_text().count("hello (v1.2.0)") == 1
    finally:
        code = demo.stop(sig=signal.SIGINT)  # Ctrl-C
    assert code == 0
    said = "".join(demo.log)
    assert f"gitreg demo: stopped; removed {directory} (" in said
    assert not directory.exists()
    assert not (tmp_path / "state").exists()  # the default [storage] path ($XDG_STATE_HOME/gitreg) untouched


def test_gitreg_demo_never_replaces_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me\n")
    result = run_gitreg("demo", "--dir", str(tmp_path / "mine"), "--no-serve", cwd=tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr
        == f"gitreg: {tmp_path / 'mine'} exists and is not a gitreg demo directory; choose another --dir\n"
    )
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me\n"


OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "ALL_PROXY": "http://127.0.0.1:9"}


def test_the_starter_config_passes_check_once_its_variable_is_set_without_network(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)  # (CI services set one)
    starter = ROOT / "examples/gitreg.toml"
    result = run_gitreg(
        "check", "--config", str(starter), env={"GITHUB_TOKEN": "github_pat_x", **OFFLINE}, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("config OK: 1 module rule(s), 1 credential(s), 1 org(s) from ")
    assert result.stderr == ""
    unset = run_gitreg("check", "--config", str(starter), env=OFFLINE, cwd=tmp_path)
    assert unset.returncode == 2
    assert "orgs[0].token: environment variable GITHUB_TOKEN is not set" in unset.stderr


def test_the_example_config_copied_as_is_says_which_variable_is_unset_and_where(tmp_path, monkeypatch):
    monkeypatch.delenv("GITLAB_TOKEN", raising=False)  # as a newcomer runs it
    shutil.copy(ROOT / "config.example.toml", tmp_path / "gitreg.toml")
    result = run_gitreg("check", cwd=tmp_path)  # ./gitreg.toml
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "gitreg: invalid configuration (gitreg.toml):",
        "  credentials[0].password: environment variable GITLAB_TOKEN is not set",
        (
            "  (a ${VAR} is read from gitreg's environment: export GITLAB_TOKEN=... before running gitreg, "
            "or write the value in gitreg.toml)"
        ),
    ]
