"""No import circles in goldenenv: a walk of its modules' imports, read from the source (ast), never by importing.

What it holds: the imports a module makes when it is imported, i.e. at module level (class bodies and `try:`/`if`
blocks at module level included): `import x`, `from x import y` (an edge to the module x.y when y is one, else to
x), relative imports and importlib.import_module("x") of a name written out. Imports inside `if TYPE_CHECKING:` are
read by type checkers only and count as none; an import's parent packages, which Python runs first, are not counted
(a package's __init__ importing its own submodule is the package's layout, not a circle). A circle among these
imports makes a module's names depend on which module happens to be imported first; the data flows one way
(DESIGN.md), and so do the imports.

Imports made inside a function run on the first call, and imports under `if TYPE_CHECKING:` only for a type
checker, so a circle through one of them is no import-time error; but it is the same reversal of layers (a lower
module reaching up), and it is how the circles of issue 38 had been hidden (automation -> plan -> updates, AWS
budget -> teardown -> limits, images/lock <-> stackconfig, spec <-> userfile, the guardrails' model and facts naming
the context's type, spec and the cloud protocol asking the registry for a zone's form, the host layer reading the
bake's record). The second test counts every import, wherever it is written, and finds no circle either. Breaking a
circle means moving the shared piece down to a lower module, never hiding the import in a function.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "goldenenv"

def module_names(package: Path) -> dict[str, Path]:
    """Dotted module name -> its file, for every .py under `package` (a package by its __init__.py)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(body: list[ast.stmt], in_function: bool, type_checking: bool = False
                ) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement under `body`, with whether it runs inside a function; `if TYPE_CHECKING:` bodies skipped
    unless type_checking (then counted as inside a function: they never run at import)."""
    for node in body:
        yield node, in_function
        if isinstance(node, ast.If) and _type_checking(node):
            if type_checking:
                for child in node.body:
                    yield from _statements([child], True, type_checking)
            yield from _statements(node.orelse, in_function, type_checking)
            continue
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, name, None) or []:
                yield from _statements([child] if isinstance(child, ast.stmt) else child.body, inner, type_checking)


def _imported_by_name(statement: ast.stmt) -> Iterator[str]:
    """The modules a statement imports with importlib.import_module("a.b") (a name written out, not computed)."""
    for node in ast.walk(statement):
        if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str) and not node.args[0].value.startswith(".")
                and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                     or (isinstance(node.func, ast.Name) and node.func.id == "import_module"))):
            yield node.args[0].value


def imports(name: str, path: Path, modules: Mapping[str, Path], *, in_functions: bool,
            type_checking: bool = False) -> set[str]:
    """The modules of `modules` that module `name` imports at module level (with in_functions: only inside
    functions, and with type_checking under `if TYPE_CHECKING:` too)."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node, in_function in _statements(ast.parse(path.read_text(), str(path)).body, False, type_checking):
        if in_function != in_functions:
            continue
        if isinstance(node, ast.Import):
            found.update(filter(None, (known(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{node.module}" if node.module else anchor
            for alias in node.names:
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else known(base)
                if target:
                    found.add(target)
        elif not hasattr(node, "body"):
            found.update(filter(None, (known(named) for named in _imported_by_name(node))))
    found.discard(name)
    return found


def graph(package: Path, *, in_functions: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level (in_functions: also those imported inside
    functions and under `if TYPE_CHECKING:`, i.e. every import written)."""
    modules = module_names(package)
    edges = {name: imports(name, path, modules, in_functions=False) for name, path in modules.items()}
    if in_functions:
        for name, path in modules.items():
            edges[name] |= imports(name, path, modules, in_functions=True, type_checking=True)
    return edges


def find_circle(edges: Mapping[str, set[str]]) -> list[str] | None:
    """One circle of imports, its modules in import order with the first repeated at the end; None when there is
    none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(edges.get(module, ())):
            if state.get(imported) == 1:
                return path[path.index(imported):] + [imported]
            if imported not in state:
                circle = visit(imported)
                if circle:
                    return circle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(edges):
        if module not in state:
            circle = visit(module)
            if circle:
                return circle
    return None


def _said(circle: list[str], module_level: Mapping[str, set[str]] | None = None) -> str:
    """The circle in import order; with `module_level`, each import made inside a function is marked so."""
    said = circle[0]
    for importer, imported in zip(circle, circle[1:]):
        inside = module_level is not None and imported not in module_level.get(importer, set())
        said += f" -> {imported}" + (" (imported inside a function)" if inside else "")
    return said


def test_goldenenv_imports_no_circle_at_module_level():
    edges = graph(PACKAGE)
    assert len(edges) > 100, "the walk found too few modules: is PACKAGE goldenenv's folder?"
    circle = find_circle(edges)
    assert circle is None, (f"import circle: {_said(circle)}; move what the lower module needs of the higher one "
                            "down to a module both import")


def test_goldenenv_imports_no_circle_counting_every_import():
    """Imports inside functions and under `if TYPE_CHECKING:` counted too: every import written, no circle."""
    module_level = graph(PACKAGE)
    circle = find_circle(graph(PACKAGE, in_functions=True))
    assert circle is None, (
        f"import circle: {_said(circle, module_level)}; move what the lower module needs of the higher one down to a "
        "module both import")


# ---------------------------------------------------------------- the walk itself, on a package written here

def _package(root: Path, files: Mapping[str, str]) -> Path:
    for relative, text in files.items():
        path = root / "pkg" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "pkg"


def test_the_walk_names_a_circle_in_import_order(tmp_path):
    package = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "import pkg.sub.c\n",
        "sub/__init__.py": "",
        "sub/c.py": "from .. import a\n",
        "d.py": "from pkg.a import name\n",
    })
    assert find_circle(graph(package)) == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]


@pytest.mark.parametrize("second", [
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
    "import typing\nif typing.TYPE_CHECKING:\n    from pkg import a\n",
    "def later():\n    from pkg import a\n",
    "class Later:\n    def method(self):\n        import pkg.a\n",
    "from pkg.sub import c\n",
    "import importlib\nNAME = 'pkg.a'\nmodule = importlib.import_module(NAME)\n",
])
def test_type_checking_and_function_imports_close_no_module_level_circle(tmp_path, second):
    package = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": second,
                                  "sub/__init__.py": "", "sub/c.py": ""})
    assert find_circle(graph(package)) is None


def test_a_circle_through_a_class_body_or_try_block_counts(tmp_path):
    package = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "try:\n    from pkg import b\nexcept ImportError:\n    b = None\n",
        "b.py": "class Uses:\n    from pkg.a import thing\n",
    })
    assert find_circle(graph(package)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_a_module_imported_by_its_written_name_counts(tmp_path):
    package = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n",
                                  "b.py": "import importlib\n\ndef later():\n    importlib.import_module('pkg.a')\n"})
    assert find_circle(graph(package, in_functions=True)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_function_level_imports_are_walked_apart(tmp_path):
    package = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n",
                                  "b.py": "def later():\n    from pkg import a\n"})
    assert find_circle(graph(package)) is None
    assert find_circle(graph(package, in_functions=True)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_type_checking_imports_count_in_the_walk_of_every_import(tmp_path):
    package = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n",
                                  "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"})
    assert find_circle(graph(package)) is None
    assert find_circle(graph(package, in_functions=True)) == ["pkg.a", "pkg.b", "pkg.a"]
