"""No import cycle among the package's modules, counting every import a module can run: at
the top, inside functions and methods, under ``if TYPE_CHECKING:`` and in ``try`` blocks alike.

``lint-imports`` keeps the layers pointing down; this test also catches a cycle inside one
layer (``api/app`` importing a module that imports ``api/app`` back from a function).  Every
module is parsed (never imported), each ``import`` and ``from … import`` at any depth is
resolved to the package module it names, and the strongly connected components of that graph
are the cycles.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import alexandria

PACKAGE = Path(alexandria.__file__).parent
Edges = dict[str, dict[str, list[str]]]  # module -> imported module -> where ("file:line")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.Import | ast.ImportFrom, name: str, is_package: bool,
              modules: set[str]) -> Iterator[str]:
    """The package modules ``node`` (in module ``name``) names."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = name.split(".") if is_package else name.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join([*package, base] if base else package)
        # ``from package import module`` imports that module; ``from module import name`` the
        # module alone
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                   for alias in node.names]
    for target in targets:
        while target and target not in modules:  # ``import a.b.c`` of a name inside a.b
            target = target.rpartition(".")[0]
        if target:
            yield target


def import_graph(root: Path) -> Edges:
    """Every import of every module under the package directory ``root``."""
    paths = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    modules = set(paths)
    edges: Edges = {m: {} for m in modules}
    for name, path in paths.items():
        tree = ast.parse(path.read_text("utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _imported(node, name, path.name == "__init__.py", modules):
                    if target != name:
                        where = f"{path.relative_to(root.parent)}:{node.lineno}"
                        found = edges[name].setdefault(target, [])
                        if where not in found:  # ``from m import a, b`` is one import
                            found.append(where)
    return edges


def cycles(edges: Edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(component: list[str], edges: Edges) -> str:
    members = set(component)
    lines = [" <-> ".join(component)]
    for source in component:
        for target, where in sorted(edges[source].items()):
            if target in members:
                lines.append(f"  {source} -> {target} ({', '.join(where)})")
    return "\n".join(lines)


def test_no_import_cycle_in_the_package() -> None:
    edges = import_graph(PACKAGE)
    assert len(edges) > 100  # the whole package was read
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(describe(c, edges) for c in found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), "utf-8")
    return root


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "api/__init__.py": "",
        "api/app.py": "from pkg.api import mirror\n",
        "api/mirror.py": "def run():\n    from pkg.api.app import create_app\n",
        "core.py": "import pkg.api.app\n",
    })
    edges = import_graph(root)
    assert cycles(edges) == [["pkg.api.app", "pkg.api.mirror"]]
    assert "pkg/api/mirror.py:2" in describe(["pkg.api.app", "pkg.api.mirror"], edges)


def test_relative_type_checking_and_package_imports_count(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "cli/__init__.py": "from . import parser\nCOMMANDS = {}\n",
        "cli/parser.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from .session import Session
            """,
        "cli/session.py": "from pkg.cli import COMMANDS\n",
        "cli/other.py": "from ..cli import parser\n",
    })
    assert cycles(import_graph(root)) == [["pkg.cli", "pkg.cli.parser", "pkg.cli.session"]]


def test_a_graph_without_cycles_has_none(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\nfrom pkg.b import c\n",
        "b.py": "import pkg.c\n",
        "c.py": "import os\n",
    })
    edges = import_graph(root)
    assert edges["pkg.a"].keys() == {"pkg.b"} and edges["pkg.b"].keys() == {"pkg.c"}
    assert cycles(edges) == []
