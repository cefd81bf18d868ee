"""The house rules of gitreg's tree stay true: small modules, short functions, no import cycle,
and a top level of packages (issue 21; CONTRIBUTING.md has the map).

`lint-imports` (.ci/run) checks the layering; these check what it does not: sizes, and cycles
between any two modules (a package's `__init__` and its own modules included).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gitreg"

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_TOP_LEVEL_MODULES = 4
# A function may be longer when the line just above it (or above its first decorator) says why.
LONG_MARK = "# long:"


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _where(path: Path, line: int | None = None) -> str:
    where = str(path.relative_to(ROOT))
    return f"{where}:{line}" if line is not None else where


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _justified(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A `# long: reason` comment on the line before the `def` or before its first decorator."""
    starts = {node.lineno, *(d.lineno for d in node.decorator_list)}
    return any(start >= 2 and lines[start - 2].strip().startswith(LONG_MARK) for start in starts)


def long_functions(path: Path) -> list[str]:
    """`file:line name (n lines)` for each function over the limit without a `# long:` reason."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for node in _functions(ast.parse(text, str(path))):
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES and not _justified(lines, node):
            found.append(f"{_where(path, node.lineno)} {node.name} ({length} lines)")
    return found


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(components)


def test_the_house_rules_see_what_they_check():
    sample = (
        "def short():\n    pass\n\n"
        "# long: a table of cases reads best in one piece\n"
        "@decorated\n"
        "def justified():\n" + "    x = 1\n" * 70 + "\n"
        "def unjustified():\n" + "    x = 1\n" * 70
    )
    tree = ast.parse(sample)
    lines = sample.splitlines()
    over = [
        f.name
        for f in _functions(tree)
        if (f.end_lineno or f.lineno) - f.lineno + 1 > MAX_FUNCTION_LINES and not _justified(lines, f)
    ]
    assert over == ["unjustified"]
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_no_module_is_over_600_lines():
    over = [
        f"{_where(path)} ({n} lines)"
        for path in modules()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_no_function_is_over_60_lines_without_a_reason():
    over = [found for path in modules() for found in long_functions(path)]
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines without a `{LONG_MARK} reason` above them: {over}"


def test_no_import_cycle_between_modules_counting_function_level_and_type_checking_imports():
    graph = grimp.build_graph("gitreg", exclude_type_checking_imports=False, cache_dir=None)
    cycles = import_cycles(graph)
    assert not cycles, f"import cycles among gitreg's modules: {cycles}"


def test_the_top_of_the_package_holds_at_most_four_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"modules at the top of gitreg/ (at most {MAX_TOP_LEVEL_MODULES}): {top}"
