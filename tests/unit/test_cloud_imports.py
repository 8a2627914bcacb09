"""RULE: a cloud is reached through the protocol only: no module outside goldenenv/clouds/<cloud>/ imports that
folder or anything under it, at module level or inside a function, absolutely or relatively.

lifecycle.py, flow.py and jobs.py imported the local cloud's internals (its LocalCluster, data folder, `docker exec`
runner), so its folder was not one: a second cloud goldenenv provisions itself would have edited them, and the
shared steps could not be read without the local cloud's Docker calls. Shared code now finds a cloud with
`goldenenv.clouds.get(name)` and asks only the hooks the Cloud protocol declares (Cloud.own_cluster for a cloud it
provisions itself). Each cloud folder of the registry is held to it, so a new one is the day it is added.

Read from the source with ast, as test_import_graph does, never by importing. A string that names a module
(a fabric's "goldenenv.clouds.aws.efa:interface_layout", resolved when the fabric's NICs are laid out) is not an
import and is not counted.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from goldenenv import clouds

PACKAGE = Path(clouds.__file__).resolve().parents[1]
CLOUD_FOLDERS = Path(clouds.__file__).resolve().parent


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at `path` under `root`'s parent (a package by its __init__.py)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, the modules it may import) of every import in the file, wherever it is (module level, class, function,
    try/if): `import a.b`, `from a import b` (a, then a.b, since b may be a module), relative imports resolved
    against the file's package, and importlib.import_module of a name written out."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, [alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            yield node.lineno, [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.lineno, [node.args[0].value]


def reaches_into(folder: Path, root: Path = PACKAGE) -> list[str]:
    """`file:line module` for each import of the cloud folder (or a module under it) from a module outside it."""
    cloud = module_name(folder / "__init__.py", root)
    found = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts or path.is_relative_to(folder):
            continue
        for line, targets in imported(path, root):
            inside = [target for target in targets if target == cloud or target.startswith(f"{cloud}.")]
            if inside:
                found.append(f"{path.relative_to(root.parent)}:{line} {inside[0]}")
    return sorted(found)


@pytest.mark.parametrize("cloud", clouds.names())
def test_no_module_outside_a_cloud_folder_imports_it(cloud):
    folder = CLOUD_FOLDERS / cloud
    assert (folder / "__init__.py").is_file(), f"{cloud} is registered but has no folder {folder}"
    found = reaches_into(folder)
    assert found == [], (f"reach the {cloud} cloud through goldenenv.clouds.get({cloud!r}) and the hooks the Cloud "
                         "protocol declares (goldenenv/clouds/base.py), or move the shared piece below both: "
                         + "; ".join(found))


def test_the_rule_sees_every_way_of_importing_a_cloud(tmp_path):
    """The walk catches the imports that had reached the local cloud (one of them inside a function), a relative
    one and one by importlib; a module naming a cloud's module in a string, and the cloud's own modules, pass."""
    root = tmp_path / "goldenenv"
    (root / "clouds" / "toy").mkdir(parents=True)
    for package in (root, root / "clouds", root / "clouds" / "toy", root / "cli"):
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text("")
    (root / "clouds" / "toy" / "cluster.py").write_text("DATA = '/data'\n")
    (root / "clouds" / "toy" / "run.py").write_text("from goldenenv.clouds.toy.cluster import DATA\n")
    (root / "lifecycle.py").write_text("from goldenenv.clouds.toy.cluster import DATA\n")
    (root / "jobs.py").write_text("def head():\n    from goldenenv.clouds.toy.cluster import DATA\n    return DATA\n")
    (root / "cli" / "stack.py").write_text("from ..clouds import toy\nfrom ..clouds.base import get\n")
    (root / "flow.py").write_text("import importlib\nimport goldenenv.clouds.toy.run\n"
                                  "importlib.import_module('goldenenv.clouds.toy')\n")
    (root / "fabric.py").write_text("LAYOUT = 'goldenenv.clouds.toy.cluster:layout'\nimport goldenenv.clouds.toys\n")
    assert reaches_into(root / "clouds" / "toy", root) == [
        "goldenenv/cli/stack.py:1 goldenenv.clouds.toy",
        "goldenenv/flow.py:2 goldenenv.clouds.toy.run",
        "goldenenv/flow.py:3 goldenenv.clouds.toy",
        "goldenenv/jobs.py:2 goldenenv.clouds.toy.cluster",
        "goldenenv/lifecycle.py:1 goldenenv.clouds.toy.cluster",
    ]
