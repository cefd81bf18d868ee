"""A state file gitreg cannot parse, for whatever reason, never stops `gitreg serve` (#22).

Each of index.json, catalog.json, orgs.json and tagpins.jsonl is replaced by 200,000 nested
`[` (which Python's json parser refuses with RecursionError, not ValueError): the real
`gitreg serve` starts, says so once per file, sets the file aside and builds its state again.
"""

from __future__ import annotations

import pytest

from tests.support.app import GIT_PASSWORD
from tests.support.forges import FakeForge
from tests.support.indexer import ENV, config_for, eventually, names
from tests.support.orgs import API_TOKEN, module_repo
from tests.support.process import GitregProcess

pytestmark = pytest.mark.slow

STATE_FILES = ("index.json", "catalog.json", "orgs.json", "tagpins.jsonl")
DEEP = "[" * 200_000


@pytest.fixture
def github(git_http):
    fake = FakeForge("github", git_http, "acme-infra", token=API_TOKEN, max_per_page=2)
    with fake.in_thread():
        yield fake


@pytest.mark.parametrize("trailing_newline", [False, True])
def test_deeply_nested_state_files_are_set_aside_with_one_line_each_and_rebuilt(
    github, git_http, tmp_path, trailing_newline
):
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0",))
    github.add("terraform-aws-vpc")
    state = tmp_path / "state"
    state.mkdir()
    for name in STATE_FILES:
        (state / name).write_text(DEEP + ("\n" if trailing_newline else ""))
    with GitregProcess("--config", str(config_for(tmp_path, github, git_http)), env=ENV) as server:
        server.wait_indexed()
        assert names(server) == ["acme/vpc/aws"]
        eventually(lambda: (state / "index.json").exists(), what="index.json written again")
        assert server.stop() == 0
    log = "".join(server.log)
    assert "Traceback" not in log and "RecursionError" not in log.replace("(RecursionError)", ""), log
    for name in STATE_FILES:
        said = [line for line in log.splitlines() if f"{name} could not be read" in line]
        assert len(said) == 1, (name, log)
        assert (state / f"{name}.damaged").read_text().startswith(DEEP), name
    assert "acme/vpc/aws" in (state / "index.json").read_text()
    assert GIT_PASSWORD not in log
