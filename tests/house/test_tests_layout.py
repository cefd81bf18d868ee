"""The tests mirror the packages (issue #32): a folder per package of gitreg, end-to-end tests
apart, what they share in tests/support/, and no test module importing another.

CONTRIBUTING.md ("Running the tests") describes the layout these hold to.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Besides one folder per package of gitreg: real clients against a real `gitreg serve`, and the
# tree's own rules (sizes, docs, packaging, deployment).
OTHER_FOLDERS = {"e2e", "house"}


def packages() -> set[str]:
    return {p.parent.name for p in (ROOT / "gitreg").glob("*/__init__.py")}


def all_test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def imports_from_tests(path: Path) -> list[str]:
    """The modules under tests/ that `path` imports, at any depth (function-level imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name.startswith((".", "tests.")) or name == "tests"]


def test_every_test_file_sits_in_a_folder_named_after_a_package_e2e_or_house():
    allowed = packages() | OTHER_FOLDERS
    misplaced = [
        str(path.relative_to(ROOT)) for path in all_test_files() if path.relative_to(TESTS).parts[0] not in allowed
    ]
    where = f"tests/<a package of gitreg, {' or '.join(sorted(OTHER_FOLDERS))}>/"
    assert not misplaced, f"test files outside {where}: {misplaced}"


def test_every_test_folder_is_a_package_so_same_named_files_collect():
    folders = {path.parent for path in all_test_files()} | {TESTS / "support"}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert (TESTS / "__init__.py").is_file()
    assert not missing, f"test folders without an __init__.py: {missing}"


def test_no_test_module_imports_another_only_tests_support():
    importers = [*all_test_files(), *TESTS.rglob("conftest.py")]
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in importers
        for name in imports_from_tests(path)
        if name != "tests.support" and not name.startswith("tests.support.")
    ]
    assert not found, f"test modules importing from tests/ other than tests/support/: {found}"


def test_tests_support_imports_no_test_module():
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((TESTS / "support").rglob("*.py"))
        for name in imports_from_tests(path)
        if name != "tests.support" and not name.startswith("tests.support.")
    ]
    assert not found, f"tests/support/ importing test modules: {found}"


def test_the_layout_checks_see_what_they_check(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "from tests.support.app import make_config\n"
        "import tests.orgs.test_orgs\n"
        "def f():\n    from tests.web.test_ui import login\n"
        "from .test_other import x\n"
    )
    found = imports_from_tests(sample)
    assert found == ["tests.support.app", "tests.orgs.test_orgs", ".test_other", "tests.web.test_ui"]
