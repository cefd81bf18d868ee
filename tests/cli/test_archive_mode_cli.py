"""`gitreg check` and `check --probe` about archive mode (the default): the generated signing key
replicas cannot share, and the tags that moved since gitreg first served them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.app import make_config
from tests.support.process import run_gitreg
from tests.support.repos import GitRepo

pytestmark = pytest.mark.slow  # `python -m gitreg` processes, and a real Redis

TOKEN = "check-token-for-archive-mode-5521"
SHARED = "replicas need one shared key"


def write_config(path: Path, repo: GitRepo, store: Path, extra: str = "") -> Path:
    path.write_text(
        f'[storage]\npath = "{store}"\n'
        '[git]\nprotocols = ["file"]\n'
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n' + extra
    )
    return path


def hello(tmp_path: Path) -> tuple[GitRepo, str]:
    repo = GitRepo(tmp_path / "repos", "hello")
    first = repo.commit({"main.tf": "# first\n"})
    repo.tag("v1.0.0")
    return repo, first


def test_check_warns_that_replicas_sharing_redis_need_one_key_when_the_key_is_generated(tmp_path, redis_server):
    repo, _ = hello(tmp_path)
    redis = f'[cache]\nbackend = "redis"\nredis_url = "{redis_server.url}"\n'
    generated = write_config(tmp_path / "a.toml", repo, tmp_path / "store", redis + f'[auth]\ntokens = ["{TOKEN}"]\n')
    result = run_gitreg("check", "--config", str(generated))
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [x for x in result.stderr.splitlines() if SHARED in x]
    assert line.startswith("warning: [auth] signing_key is not set") and "signing-key" in line
    # with a configured key, or without Redis: no warning, the same exit code
    keyed = write_config(
        tmp_path / "b.toml",
        repo,
        tmp_path / "store",
        redis + f'[auth]\ntokens = ["{TOKEN}"]\nsigning_key = "{"k" * 40}"\n',
    )
    alone = write_config(tmp_path / "c.toml", repo, tmp_path / "store", f'[auth]\ntokens = ["{TOKEN}"]\n')
    for config in (keyed, alone):
        result = run_gitreg("check", "--config", str(config))
        assert result.returncode == 0 and SHARED not in result.stderr, result.stderr


async def test_check_probe_lists_a_moved_tag_with_its_first_and_current_commit_and_when(serve_client, tmp_path):
    repo, first = hello(tmp_path)
    store = tmp_path / "store"
    rule = {"namespace": "demo", "name": "hello", "system": "null", "repository": repo.url, "download": "archive"}
    # downloads only: the index off (it reads no version here)
    config = make_config([rule], cache={"ttl_seconds": 0}, storage={"path": str(store)}, index={"enabled": False})
    client = await serve_client(config)
    download = "/v1/modules/demo/hello/null/1.0.0/download"
    assert (await client.get(download)).status == 200  # first commit pinned
    config = write_config(tmp_path / "gitreg.toml", repo, store, 'download = "archive"\n')
    result = run_gitreg("check", "--probe", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "moved tag" not in result.stdout
    second = repo.commit({"main.tf": "# second\n"})
    repo.tag("v1.0.0")  # force-moved
    # not noticed by gitreg yet: the probe finds it itself
    result = run_gitreg("check", "--probe", "--config", str(config))
    assert f"  moved tag 'v1.0.0': first served at commit {first[:12]}, now names {second[:12]} (noticed now" in (
        result.stdout
    )
    assert (await client.get(download)).status == 200  # gitreg notices it, and records when
    await client.close()  # the record is written at shutdown at the latest
    result = run_gitreg("check", "--probe", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [x for x in result.stdout.splitlines() if "moved tag" in x]
    assert line.startswith(
        f"  moved tag 'v1.0.0': first served at commit {first[:12]}, now names {second[:12]} (noticed 20"
    )
    assert line.endswith("Z)")
