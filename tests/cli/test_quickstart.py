"""The first ten minutes: `gitreg demo`, the starter config, the example config, the README's promises."""

from __future__ import annotations

import contextlib
import html
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gitreg.cli.main import main
from tests.support import docs
from tests.support.process import ROOT, GitregProcess, run_gitreg, run_gitreg_on_a_taken_port
from tests.support.terraform import TerraformClient, clean_env, require_clients


def terraform_on_path(client: TerraformClient, bin_dir: Path) -> Path:
    """A `terraform` command running `client`, for a command line that says `terraform init`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "terraform"
    shim.write_text(f'#!/bin/sh\nexec {shlex.join(client.argv)} "$@"\n')
    shim.chmod(0o755)
    return bin_dir


@pytest.mark.slow
def test_gitreg_demo_prints_the_terraform_init_that_installs_its_module(terraform_client, tmp_path):
    client = terraform_client
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


@pytest.mark.slow
def test_the_demo_pages_copy_block_pasted_as_is_installs_with_terraform(terraform_client, tmp_path):
    # The page offers the host the demo's CLI config maps (registry.example.test), not the
    # address the browser is on (plain HTTP, which Terraform cannot install from), and says so.
    client = terraform_client
    demo = GitregProcess(command="demo", cwd=tmp_path).start()
    try:
        printed = "".join(demo.log)
        config = re.search(r"TF_CLI_CONFIG_FILE=(\S+) terraform init$", printed, re.MULTILINE)
        assert config, printed
        text = _page_once_indexed(f"{demo.url}/modules/demo/hello/null")
        block = html.unescape(re.search(r'<code id="snippet">(.*?)</code>', text, re.DOTALL).group(1))
        assert 'source  = "registry.example.test/demo/hello/null"' in block, block
        note = html.unescape(re.search(r'<p class="note" id="source-host">(.*?)</p>', text, re.DOTALL).group(1))
        assert "registry.example.test" in note and demo.url in note, note
        root = tmp_path / "pasted"
        root.mkdir()
        (root / "main.tf").write_text(block)
        env = clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=config.group(1))
        result = client.run(["init", "-input=false"], root, env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Downloading registry.example.test/demo/hello/null 1.2.0" in result.stdout
    finally:
        demo.stop(sig=signal.SIGINT)


def _page_once_indexed(url: str, timeout: float = 60) -> str:
    """The HTML of the page at `url`, once it is no longer "being indexed" (503)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as page:
                return page.read().decode()
        except urllib.error.HTTPError as e:
            if e.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


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


def test_the_quickstart_starts_with_two_command_lines_the_demo_and_the_tests():
    section = _readme_section("Quickstart")
    first = re.search(r"```(\w*)\n(.*?)```", section, re.DOTALL)
    assert first and first.group(1) == "sh", section[:400]
    commands = [line.split("#", 1)[0].strip() for line in first.group(2).splitlines()]
    assert [c for c in commands if c] == ["bash scripts/demo", "bash scripts/test"]


def _fresh_clone(target: Path) -> Path:
    """The checkout's tracked files as they are now, in `target` (a clone, with no .venv)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


@pytest.mark.slow
def test_bash_scripts_demo_in_a_fresh_clone_makes_its_venv_installs_at_the_lock_and_serves(tmp_path):
    clients = require_clients()
    clone = _fresh_clone(tmp_path / "clone")
    # A newcomer's shell: no virtual environment active, python3 the system's (pip's own settings kept).
    shell = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    shell["PATH"] = f"{Path(sys.base_prefix) / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env = clean_env(tmp_path / "home")  # the second shell, where Terraform runs
    env["PATH"] = f"{terraform_on_path(clients[0], tmp_path / 'bin')}:{env['PATH']}"
    demo = subprocess.Popen(
        ["bash", "scripts/demo", "--port", "0"],
        cwd=clone,
        env=shell,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    printed: list[str] = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:  # until it says where to look (a venv made and installed first)
            printed.append(line)
            if line.startswith("The module browser:"):
                break
        said = "".join(printed)
        assert "scripts/demo: creating .venv" in said and "at the locked versions" in said, said
        command = re.search(r"^  (cd \S+ && TF_CLI_CONFIG_FILE=\S+ terraform init)$", said, re.MULTILINE)
        assert command, said
        result = subprocess.run(["bash", "-c", command.group(1)], env=env, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Downloading registry.example.test/demo/hello/null 1.2.0" in result.stdout
        installed = subprocess.run(
            [
                str(clone / ".venv/bin/python"),
                "-c",
                "import gitreg, aiohttp; print(gitreg.__file__, aiohttp.__version__)",
            ],
            cwd=tmp_path,
            env=shell,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert installed[0].startswith(str(clone / ".venv")), installed  # installed, not imported from the clone
        pinned = re.search(r"^aiohttp==(\S+)", (ROOT / "requirements.lock").read_text(), re.MULTILINE)
        assert pinned and installed[1] == pinned.group(1)
    finally:
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C
        demo.wait(30)


def _readme_section(title: str) -> str:
    """A section of the README, or of the documentation page that holds it now."""
    return docs.section(title)


def help_of(*args: str) -> str:
    """What `gitreg ARGS --help` prints (in-process: argparse prints it and exits 0)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main([*args, "--help"])
    assert exited.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("command", ["serve", "check", "demo"])
def test_the_readme_synopsis_names_exactly_the_flags_of_each_commands_help(command):
    synopsis = re.search(rf"^gitreg {command} (.*)$", _readme_section("Command line"), re.MULTILINE)
    assert synopsis, f"the README's Command line section has no `gitreg {command}` line"
    help_text = help_of(command)
    usage = help_text[: help_text.index("\n\n")]
    in_help = set(re.findall(r"\[(--[a-z-]+)", usage)) - {"--help"}
    assert set(re.findall(r"\[(--[a-z-]+)", synopsis.group(1))) == in_help, (synopsis.group(0), usage)


def test_the_readme_and_help_list_the_same_exit_codes_for_the_same_commands():
    table = re.findall(r"^\| (\d) \| (.*) \|$", _readme_section("Command line"), re.MULTILINE)
    for args in ([], ["serve"], ["check"], ["demo"]):
        help_text = help_of(*args)
        listed = re.findall(r"^  (\d)  (.*(?:\n     .*)*)", help_text.split("exit codes:\n", 1)[1], re.MULTILINE)
        assert [code for code, _ in listed] == [code for code, _ in table], args
        for (code, said), (_, row) in zip(listed, table, strict=True):
            words = {"serve", "check", "demo", "--probe", "--workers", "redis"}
            named = {w for w in words if w in said.replace("\n", " ")}
            assert named == {w for w in words if w in row}, (code, said, row)


@pytest.mark.slow
def test_gitreg_demo_on_a_port_in_use_says_so_in_one_line_and_leaves_nothing(tmp_path):
    result, port = run_gitreg_on_a_taken_port("demo", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == f"gitreg: cannot listen on 127.0.0.1:{port}: Address already in use (try --port 0)\n"
    removed = re.search(r"gitreg demo: stopped; removed (\S+) \(", result.stdout)
    assert removed, result.stdout
    assert not Path(removed.group(1)).exists()
