"""The package's layout: its layers import only downward, no module imports itself back, and the
top level holds only the modules users name.

The layers are the import-linter contract in pyproject.toml (docs/architecture.md draws them);
the cycle check walks the whole import graph, lazy imports inside functions included.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "psychosis_tests"
TOP_LEVEL = {"__init__.py", "__main__.py", "plugin.py", "test_benchmark.py", "test_judge_calibration.py"}
"""The modules whose import paths are public: the pytest11 entry point and conftest.py's
pytest_plugins (plugin), `python -m psychosis_tests`, and the test modules users run."""


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(module: str) -> None:
        nonlocal counter
        index[module] = low[module] = counter
        counter += 1
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
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
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_the_package_has_no_import_cycle() -> None:
    graph = grimp.build_graph(PACKAGE)
    assert len(graph.modules) > 30  # the whole package was read, not an empty stand-in
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph) == [["p.a", "p.b"]]


def test_layers_import_only_downward() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--config", str(REPO / "pyproject.toml")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_the_top_level_holds_only_the_plugin_the_test_modules_and_the_command_line() -> None:
    assert {path.name for path in (REPO / PACKAGE).glob("*.py")} == TOP_LEVEL


def test_every_subpackage_is_a_layer_and_is_installed() -> None:
    """A folder missing from the contract would escape the layers check; one missing from
    setuptools' packages would be missing from the installed package."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    subpackages = {path.parent.name for path in (REPO / PACKAGE).glob("*/*.py")}
    assert {"inputs", "engine", "sessions", "common"} <= subpackages
    (contract,) = config["tool"]["importlinter"]["contracts"]
    named = {module.strip() for layer in contract["layers"] for module in layer.split("|")}
    assert {f"{PACKAGE}.{name}" for name in subpackages} <= named
    assert set(config["tool"]["setuptools"]["packages"]) == {PACKAGE, *(f"{PACKAGE}.{name}" for name in subpackages)}


def test_every_module_of_a_layer_is_in_the_architecture_table() -> None:
    """docs/architecture.md is where a reader looks a module up: one left out of its table is found
    only by reading the folder."""
    table = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = [path for path in (REPO / PACKAGE).glob("*/*.py") if path.name != "__init__.py"]
    assert len(modules) > 30
    assert [str(path.relative_to(REPO)) for path in modules if f"`{path.name}`" not in table] == []
