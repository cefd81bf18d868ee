"""The command line as operators and scripts use it: exit codes, messages, config lookup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.process import ROOT, GitregProcess, run_gitreg, run_gitreg_on_a_taken_port
from tests.support.repos import GitRepo


def fetch_json(url: str) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def tagged_repo(tmp_path: Path) -> GitRepo:
    r = GitRepo(tmp_path, "hello")
    r.commit({"main.tf": "#\n"})
    for tag in ("v1.0.0", "1.0.0", "v1.1.0", "v1.2", "latest"):
        r.tag(tag)
    return r


@pytest.mark.slow
def test_serve_with_module_flag_needs_no_config_file(tmp_path):
    repo = tagged_repo(tmp_path)
    with GitregProcess("--module", f"demo/hello/null={repo.url}", cwd=tmp_path) as server:
        status, body = fetch_json(f"{server.url}/v1/modules/demo/hello/null/versions")
    assert status == 200
    assert sorted(v["version"] for v in body["modules"][0]["versions"]) == ["1.0.0", "1.1.0"]
    assert server.proc.returncode == 0  # SIGTERM is a clean shutdown


@pytest.mark.slow
def test_serve_reads_gitreg_config_then_local_gitreg_toml(tmp_path):
    repo = tagged_repo(tmp_path)
    config = tmp_path / "elsewhere.toml"
    config.write_text(f'[[modules]]\nnamespace = "env"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n')
    with GitregProcess(env={"GITREG_CONFIG": str(config)}, cwd=tmp_path) as server:
        assert fetch_json(f"{server.url}/v1/modules/env/hello/null/versions")[0] == 200
    (tmp_path / "gitreg.toml").write_text(config.read_text().replace('"env"', '"local"'))
    with GitregProcess(cwd=tmp_path) as server:
        assert fetch_json(f"{server.url}/v1/modules/local/hello/null/versions")[0] == 200


def test_serve_without_any_module_exits_2_and_says_what_to_do(tmp_path):
    result = run_gitreg("serve", cwd=tmp_path)
    assert result.returncode == 2
    assert "--module" in result.stderr


def test_check_accepts_the_example_config():
    result = run_gitreg("check", "--config", str(ROOT / "config.example.toml"), env={"GITLAB_TOKEN": "x"})
    assert result.returncode == 0, result.stderr
    assert "config OK: 3 module rule(s), 1 credential(s)" in result.stdout


def test_check_prints_every_problem_with_its_key_and_exits_2(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text(
        '[server]\nport = "eighty"\ntls_cert = "/nope.pem"\n'
        '[[modules]]\nnamespace = "acme"\n'
        '[[modules]]\nrepository = "https://h/{team}.git"\nref = "branch"\n'
        '[[credentials]]\nurl = "https://h/"\nusername = "u"\npassword = "${MISSING_SECRET}"\n'
    )
    result = run_gitreg(
        "check",
        "--config",
        str(config),
    )
    assert result.returncode == 2
    for expected in (
        "server.port: must be an integer",
        "server.tls_key: tls_cert and tls_key must be given together",
        "modules[0].repository: missing",
        "modules[1].repository: unknown placeholder {team}",
        'modules[1].ref: must be "tag" or "commit"',
        "credentials[0].password: environment variable MISSING_SECRET is not set",
    ):
        assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_check_with_a_missing_file_exits_2(tmp_path):
    result = run_gitreg("check", "--config", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert "file not found" in result.stderr


@pytest.mark.slow
def test_check_probe_lists_versions_and_explains_every_skipped_tag(tmp_path):
    repo = tagged_repo(tmp_path)
    result = run_gitreg("check", "--probe", "--module", f"demo/hello/null={repo.url}", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "versions (2): 1.1.0, 1.0.0" in out
    assert "skipped tag 'v1.0.0': duplicate of version 1.0.0: tag '1.0.0' is served" in out
    assert "skipped tag 'v1.2': 'v1.2' is not MAJOR.MINOR.PATCH" in out
    assert "skipped tag 'latest':" in out


def test_check_probe_exits_1_when_a_repository_cannot_be_listed(tmp_path):
    result = run_gitreg(
        "check", "--probe", "--module", f"demo/gone/null={(tmp_path / 'gone.git').as_uri()}", cwd=tmp_path
    )
    assert result.returncode == 1
    assert "ERROR: repository" in result.stdout and "does not exist upstream" in result.stdout


@pytest.mark.slow
def test_check_probe_exits_1_for_a_configured_module_without_a_semver_tag(tmp_path):
    repo = GitRepo(tmp_path, "untagged")
    repo.commit({"main.tf": "#\n"})
    repo.tag("latest")
    for probe in (["--probe"], ["--probe", "demo/untagged/null"]):
        result = run_gitreg("check", *probe, "--module", f"demo/untagged/null={repo.url}", cwd=tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "ERROR: no SemVer tag yet: nothing to serve (push a tag like v1.0.0)" in result.stdout
        assert "skipped tag 'latest':" in result.stdout


def test_bad_module_flag_is_a_config_error(tmp_path):
    result = run_gitreg("serve", "--module", "demo/hello=file:///x", cwd=tmp_path)
    assert result.returncode == 2
    assert "NAMESPACE/NAME/SYSTEM=REPOSITORY_URL" in result.stderr


def test_check_refuses_a_config_with_nothing_to_serve_as_serve_does(tmp_path):
    check = run_gitreg("check", cwd=tmp_path)
    serve = run_gitreg("serve", cwd=tmp_path)
    assert check.returncode == serve.returncode == 2
    assert check.stderr == serve.stderr
    assert "no modules to serve" in check.stderr and "--module" in check.stderr
    assert "config OK" not in check.stdout


def test_check_into_a_pipe_closed_early_exits_without_a_traceback(tmp_path):
    # `gitreg check | head -1`: the reader is gone before gitreg writes (here: before it even starts).
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitreg", "check", "--config", str(ROOT / "config.example.toml")],
        cwd=tmp_path,
        env={**os.environ, "GITLAB_TOKEN": "x", "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert err == ""


def test_check_piped_into_head_prints_the_first_line_only(tmp_path):
    result = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m gitreg check --config "{ROOT / "config.example.toml"}" | head -1'],
        cwd=tmp_path,
        env={**os.environ, "GITLAB_TOKEN": "x", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.startswith("config OK") and result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr


@pytest.mark.slow
def test_check_warns_about_rules_an_earlier_rule_always_wins_over(tmp_path):
    config = tmp_path / "gitreg.toml"
    config.write_text(
        '[[modules]]\nnamespace = "acme"\nname = "vpc"\nsystem = "aws"\nrepository = "https://h/acme/vpc.git"\n'
        '[[modules]]\nnamespace = "acme"\nrepository = "https://h/acme/{name}.git"\n'
        '[[modules]]\nnamespace = "acme"\nname = "vpc"\nsystem = "aws"\nrepository = "https://h/acme/vpc2.git"\n'
        '[[modules]]\nnamespace = "acme"\nrepository = "https://h/other/{name}.git"\n'
        '[[modules]]\nnamespace = "acme"\nsystem = "aws"\nrepository = "https://h/acme/{name}-aws.git"\n'
    )
    result = run_gitreg(
        "check", "--config", str(config), "--module", "acme/net/aws=https://h/acme/net.git", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    wins = "has the same namespace, name and system and wins"
    assert warnings == [
        f"warning: modules[2] (acme/vpc/aws) never serves anything: modules[0] {wins}",
        f"warning: modules[3] (acme/*/*) never serves anything: modules[1] {wins}",
    ]
    # A --module rule overrides a file rule of the same module: the file rule is the one named.
    result = run_gitreg("check", "--config", str(config), "--module", "acme/vpc/aws=https://h/acme/v.git", cwd=tmp_path)
    assert (
        "warning: modules[0] (acme/vpc/aws) never serves anything: --module acme/vpc/aws has the same" in result.stderr
    )


@pytest.mark.slow
def test_check_probe_of_an_address_goes_through_the_wildcard_rule_that_serves_it(tmp_path):
    repo = tagged_repo(tmp_path)
    config = tmp_path / "gitreg.toml"
    config.write_text(
        '[[modules]]\nnamespace = "other"\nrepository = "file:///nowhere/{name}.git"\n'
        f'[[modules]]\nnamespace = "demo"\nrepository = "{tmp_path.as_uri()}/{{name}}.git"\n'
    )
    result = run_gitreg("check", "--probe", "demo/hello/null", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"demo/hello/null <- {repo.url} (rule modules[1]: demo/*/*)" in result.stdout
    assert "versions (2): 1.1.0, 1.0.0" in result.stdout
    assert "skipped tag 'latest':" in result.stdout
    assert "other/" not in result.stdout  # only the one address is probed

    nobody = run_gitreg("check", "--probe", "nobody/hello/null", cwd=tmp_path)
    assert nobody.returncode == 1
    assert "nobody/hello/null: no rule serves it" in nobody.stdout

    missing = run_gitreg("check", "--probe", "demo/gone/null", cwd=tmp_path)
    assert missing.returncode == 1 and "does not exist upstream" in missing.stdout

    for bad in ("demo/hello", "demo/hello/NULL", "-x/y/z"):
        result = run_gitreg("check", "--probe", bad, cwd=tmp_path)
        assert result.returncode == 2, (bad, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr


# --- config and start-up edge cases: exit 2, one clear line, the real cause ------------------------


def assert_config_exit(result, *expected: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr


def test_check_refuses_numbers_that_would_break_git_or_the_cache(tmp_path):
    config = tmp_path / "gitreg.toml"
    config.write_text(
        "[git]\ntimeout_seconds = nan\n[cache]\nttl_seconds = inf\nstale_seconds = 1e308\n"
        "[server]\nidle_timeout_seconds = -inf\n"
    )
    result = run_gitreg("check", "--config", str(config))
    assert_config_exit(
        result,
        "git.timeout_seconds: must be a number between 0.1 and 86400, not nan",
        "cache.ttl_seconds: must be a number between 0 and 2.592e+06, not inf",
        "cache.stale_seconds: must be a number between 0 and 2.592e+06, not 1e+308",
        "server.idle_timeout_seconds: must be a number between 1 and 86400, not -inf",
    )


@pytest.mark.slow
def test_unreadable_config_files_exit_2_with_one_line_each(tmp_path):
    cases = {
        "latin1.toml": ('[server]\nhost = "caf\xe9"\n'.encode("latin-1"), "not UTF-8 text (byte 0xe9 on line 2)"),
        "deep.toml": (
            ("x = " + "[" * 3000 + "]" * 3000 + "\n").encode(),
            "not valid TOML: arrays or tables nested too deeply",
        ),
        "broken.toml": (b"[server\n", "not valid TOML"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        for command in ("check", "serve"):
            result = run_gitreg(command, "--config", str(tmp_path / name), "--module", "demo/x/null=file:///x.git")
            assert_config_exit(result, f"{tmp_path / name}: {message}")
            assert result.stderr.count("\n") == 2, result.stderr  # "invalid configuration:" and the one problem
    (tmp_path / "a-directory.toml").mkdir()
    assert_config_exit(
        run_gitreg("check", "--config", str(tmp_path / "a-directory.toml")), "cannot read: Is a directory"
    )


def test_a_storage_path_that_is_a_file_is_named_as_such_not_as_a_listen_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for path, message in (
        (blocker, "exists and is not a directory"),
        (blocker / "state", "cannot be created: a part of it is a file, not a directory"),
    ):
        config = tmp_path / "gitreg.toml"
        config.write_text(f'[storage]\npath = "{path}"\n')
        result = run_gitreg("serve", "--config", str(config), "--port", "0", "--module", "demo/x/null=file:///x.git")
        assert_config_exit(result, f"gitreg: storage.path: '{path}' {message}")
        assert "cannot listen" not in result.stderr


@pytest.mark.slow
def test_a_port_in_use_is_a_listen_error(tmp_path):
    result, port = run_gitreg_on_a_taken_port("serve", "--module", "demo/x/null=file:///x.git", cwd=tmp_path)
    assert_config_exit(result, f"gitreg: cannot listen on 127.0.0.1:{port}: Address already in use")


@pytest.mark.slow
def test_a_port_in_use_fails_at_once_with_one_line_before_touching_the_storage(tmp_path):
    repo = tagged_repo(tmp_path)
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "state"}"\n\n'
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
    )
    with GitregProcess("--config", str(config), cwd=tmp_path) as first:
        first.wait_indexed()
        port = first.url.rsplit(":", 1)[1]
        before = len(first.log)
        started = time.monotonic()
        result = run_gitreg("serve", "--config", str(config), "--port", port, cwd=tmp_path)
        elapsed = time.monotonic() - started
        assert fetch_json(f"{first.url}/readyz")[0] == 200  # the first instance carries on
    assert_config_exit(result, f"gitreg: cannot listen on 127.0.0.1:{port}: Address already in use")
    # One line: it did not load the other instance's storage (the index process it started first, to
    # import meanwhile, is killed before any seed: it never reads the storage either).
    assert result.stderr.count("\n") == 1, result.stderr
    assert elapsed < 5, elapsed  # loosely: "within a second" on a quiet machine
    assert first.proc.returncode == 0
    assert not [line for line in first.log[before:] if "index process" in line], first.log[before:]


# ---- `check` runs serve's start checks (#33) -------------------------------------------------


def _port(command: str) -> tuple[str, ...]:
    return ("--port", "0") if command == "serve" else ()


def _module_config(tmp_path: Path, storage: Path, extra: str = "") -> Path:
    config = tmp_path / "start.toml"
    config.write_text(
        f'[storage]\npath = "{storage}"\n{extra}'
        '[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "https://git.example.com/hello.git"\n'
    )
    return config


@pytest.mark.parametrize("command", ["check", "serve"])
def test_check_refuses_a_storage_path_that_is_a_file_as_serve_does(command, tmp_path):
    storage = tmp_path / "storage"
    storage.write_text("not a directory\n")
    result = run_gitreg(command, "--config", str(_module_config(tmp_path, storage)), *_port(command), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"gitreg: storage.path: {str(storage)!r} exists and is not a directory" in result.stderr
    assert "config OK" not in result.stdout


@pytest.mark.slow  # mounts a tmpfs
def test_check_refuses_a_read_only_storage_mount_as_serve_does(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    storage = tmp_path / "ro"
    storage.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(storage)], check=True)
    try:
        config = _module_config(tmp_path, storage)
        for command in ("check", "serve"):
            result = run_gitreg(command, "--config", str(config), *_port(command), cwd=tmp_path)
            assert result.returncode == 2, (command, result.stdout + result.stderr)
            assert f"storage.path: {str(storage)!r} is not writable: Read-only file system" in result.stderr
    finally:
        subprocess.run(["umount", "-l", str(storage)], check=False)


@pytest.mark.parametrize("command", ["check", "serve"])
def test_check_and_serve_refuse_to_start_without_git_on_path(command, tmp_path):
    no_git = tmp_path / "bin"
    no_git.mkdir()
    config = _module_config(tmp_path, tmp_path / "store")
    result = run_gitreg(command, "--config", str(config), *_port(command), env={"PATH": str(no_git)}, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gitreg: git: git is not installed on the registry server (no `git` on PATH)" in result.stderr


@pytest.mark.slow
def test_check_refuses_a_secret_variable_that_is_set_but_empty_naming_key_and_variable(tmp_path):
    config = _module_config(
        tmp_path,
        tmp_path / "store",
        '[[credentials]]\nurl = "https://git.example.com/"\nusername = "x-access-token"\npassword = "${GITHUB_TOKEN}"\n'
        '[auth]\ntokens = ["${REGISTRY_TOKEN}"]\n',
    )
    result = run_gitreg("check", "--config", str(config), env={"GITHUB_TOKEN": "", "REGISTRY_TOKEN": ""}, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "credentials[0].password: environment variable GITHUB_TOKEN is set but empty" in result.stderr
    assert "auth.tokens[0]: environment variable REGISTRY_TOKEN is set but empty" in result.stderr
    # Set, it passes; a value that is not a secret may still be empty.
    good = run_gitreg(
        "check", "--config", str(config), env={"GITHUB_TOKEN": "ghp_x", "REGISTRY_TOKEN": "r" * 20}, cwd=tmp_path
    )
    assert good.returncode == 0, good.stderr


async def test_readyz_is_503_with_the_reason_while_git_is_not_on_path(serve_client, tmp_path, monkeypatch):
    from tests.support.app import assert_error, make_config

    no_git = tmp_path / "bin"
    no_git.mkdir()
    config = make_config(
        [{"namespace": "demo", "name": "hello", "system": "null", "repository": "https://git.example.com/h.git"}],
        index={"enabled": False},
    )
    client = await serve_client(config)
    assert (await client.get("/readyz")).status == 200
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(no_git))
    await assert_error(await client.get("/readyz"), 503, "git is not installed on the registry server")
    monkeypatch.setenv("PATH", path)
    assert (await client.get("/readyz")).status == 200  # it recovers by itself once git is back
