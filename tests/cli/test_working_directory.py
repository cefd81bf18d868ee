"""Every gitreg process runs the installed gitreg, whatever the working directory (#33).

`python -m` puts the working directory first on sys.path: `gitreg serve` started inside a
checkout of another gitreg imported that tree in its index process (and so in the parse workers
it starts), mixing two versions of the code in one server.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.process import GitregProcess
from tests.support.repos import GitRepo

pytestmark = pytest.mark.slow


def test_serve_started_inside_another_gitreg_tree_never_imports_it(tmp_path):
    repo = GitRepo(tmp_path / "repos", "hello")
    repo.commit({"main.tf": 'variable "who" {}\noutput "greeting" { value = "hi" }\n'})
    repo.tag("v1.0.0")
    # Another gitreg tree in the working directory, whose import leaves a mark.
    other = tmp_path / "checkout"
    marker = tmp_path / "imported-the-other-tree"
    (other / "gitreg").mkdir(parents=True)
    (other / "gitreg" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('imported\\n')\n")
    script = Path(sys.executable).with_name("gitreg")  # the installed entry point, as an operator runs it
    with GitregProcess("--module", f"demo/hello/null={repo.url}", cwd=other, launcher=(str(script),)) as server:
        server.wait_indexed(timeout=60)
        with urllib.request.urlopen(server.url + "/v1/modules/demo/hello/null/1.0.0") as resp:
            details = json.load(resp)
    assert not marker.exists(), "a gitreg process imported the tree in its working directory"
    assert [v["name"] for v in details["root"]["inputs"]] == ["who"]  # read by the index and its parse workers
    assert not (other / "gitreg" / "__pycache__").exists()
