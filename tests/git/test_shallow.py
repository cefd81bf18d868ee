"""The usage scan's reads of a default branch (gitreg/git/shallow.py): real repositories over smart HTTP."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from gitreg.config.model import GitConfig
from gitreg.git.remote import GitAdapter
from gitreg.git.runner import GitRunner
from gitreg.git.shallow import MAX_TF_FILE_BYTES, ShallowReader
from tests.support.githttp import GitHttpServer
from tests.support.repos import GitRepo

pytestmark = pytest.mark.slow  # real git over smart HTTP: several seconds


def reader(home: str) -> ShallowReader:
    return ShallowReader(GitAdapter(GitRunner(GitConfig(protocols=("http",)), (), home)))


def test_a_default_branch_gives_its_tf_files_and_never_an_oversized_one(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repos", "app")
    big = "# " + "x" * (MAX_TF_FILE_BYTES + 10) + "\n"
    head = repo.commit(
        {
            "main.tf": 'module "a" {}\n',
            "envs/prod/main.tf": 'module "b" {}\n',
            "huge.tf": big,
            ".terraform/modules/vpc/main.tf": "# a downloaded module, not the repository's own\n",
            "README.md": "# app\n",
        }
    )
    GitRepo(tmp_path / "repos", "empty").git("status")  # a repository nobody pushed to
    (tmp_path / "scratch").mkdir()
    with GitHttpServer(tmp_path / "repos") as git, tempfile.TemporaryDirectory() as home:
        found = reader(home).read(str(tmp_path / "scratch"), git.url("app.git"))
        assert found.commit == head
        assert sorted(found.files) == ["envs/prod/main.tf", "main.tf"]
        assert found.files["main.tf"] == b'module "a" {}\n'
        assert any("larger than" in note for note in found.notes)
        assert reader(home).head(git.url("app.git")) == head
        empty = reader(home).read(str(tmp_path / "scratch"), git.url("empty.git"))
        assert (empty.commit, empty.files) == ("", {})
    assert list((tmp_path / "scratch").iterdir()) == []  # each read's repository is removed after it
