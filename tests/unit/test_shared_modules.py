"""Nothing cloud-specific in shared code: a cloud's SDK, its API's names and its name as a default live in its folder.

Shared modules are goldenenv's modules outside a cloud's folder (goldenenv/clouds/<cloud>/) and the fabric folders
(goldenenv/fabrics/<fabric>/, each bound to the clouds that carry it): plan, lifecycle, the CLI, images, checks,
spotwatch, the protocol, the recipe and the stop core. Read from the source (ast), never by importing them, they
  - import no module that only a cloud's extra installs (pulumi_aws, boto3 and botocore: the distributions of
    `goldenenv[aws]` and what they need beyond the main install), in functions neither: AWS's stop function, which
    imports boto3, is goldenenv/clouds/aws/reaper.py;
  - name no cloud's API: no resource type token of its Pulumi provider (`aws:ec2/instance:Instance`, `aws:sns`) and
    no action or role of its least-privilege table (`ec2:StopInstances`), docstrings aside;
  - hold no cloud's name as a default (a function's default, an option's `default=`, a `get(key, "aws")`, or
    `x = "aws"`): what a command does not know it asks for, naming the flag and the clouds of the registry.
Each rule is parametrized over the cloud registry, so a cloud is held to it the day its folder is added; each has a
test that it catches the defect it is for.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from goldenenv import clouds, spotwatch

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "goldenenv"
CLOUD_FOLDERS = PACKAGE / "clouds"
FABRIC_FOLDERS = PACKAGE / "fabrics"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]

NAME_DEFAULTS_ALLOWED: dict[str, str] = {
    "goldenenv/cli/common.py DEFAULT_STACK = 'local'":
        "the stack `-s` names when none is given is the one shipped as stacks/Pulumi.local.yaml, the flow that needs no "
        "cloud account (DESIGN.md: `-s local` is the embedded default); it names a stack, which happens to share its "
        "name with the local cloud",
}
"""Cloud names held as a default that cannot be otherwise, each with why; shrink it, never add without a reason."""


def shared_modules() -> list[Path]:
    """goldenenv's modules outside every cloud's and fabric's folder."""
    own = [p for folder in (CLOUD_FOLDERS, FABRIC_FOLDERS) for p in folder.iterdir()
           if p.is_dir() and (p / "__init__.py").exists()]
    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if "__pycache__" not in path.parts and not any(path.is_relative_to(folder) for folder in own)]


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, read once for every rule and cloud."""
    return ast.parse(path.read_text(), str(path))


def shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def where(path: Path, node: ast.AST) -> str:
    return f"{shown(path)}:{node.lineno}"


# ------------------------------------------------------------------------------------------------- the clouds' SDKs
def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements install, with what they need in turn (as installed here)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements if not r.replace(" ", "").startswith("goldenenv[")]
    while todo:
        requirement = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = _dist(requirement.name)
        if name not in seen:
            seen.add(name)
            try:
                todo += [Requirement(r) for r in importlib.metadata.requires(name) or []]
            except importlib.metadata.PackageNotFoundError:
                pass
    return seen


@functools.cache
def sdk_modules(cloud: str) -> frozenset[str]:
    """The top-level modules only the cloud's extra installs: its distributions and what they need that the main
    install does not have (aws: pulumi_aws, boto3, botocore, s3transfer, jmespath)."""
    own = _installed_closure(EXTRAS.get(cloud, [])) - _installed_closure(PROJECT["dependencies"])
    modules = {module for module, dists in importlib.metadata.packages_distributions().items()
               if any(_dist(d) in own for d in dists)}
    return frozenset(m for m in modules if not m.startswith("_"))


def imports(path: Path) -> Iterator[tuple[ast.AST, str]]:
    """Every module a file imports, at module level or in a function (an absolute import's top-level name)."""
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            yield from ((node, alias.name.split(".")[0]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, node.module.split(".")[0]


def sdk_imports(paths: list[Path], modules: frozenset[str] | set[str]) -> list[str]:
    return [f"{where(path, node)} imports {name}" for path in paths for node, name in imports(path)
            if name in modules]


CLOUDS_WITH_AN_EXTRA = [c for c in clouds.names() if c in EXTRAS]


def test_every_cloud_is_an_extra_or_needs_no_sdk():
    """The SDK rule reads each cloud's modules from its extra: a cloud without one (local) has no SDK to judge."""
    for cloud in clouds.names():
        if cloud not in EXTRAS:
            assert clouds.installed(cloud) and not clouds.get(cloud).uses_pulumi, \
                f"{cloud} has no extra in pyproject.toml, yet needs a provider"


@pytest.mark.parametrize("cloud", CLOUDS_WITH_AN_EXTRA)
def test_no_shared_module_imports_a_clouds_sdk(cloud):
    modules = sdk_modules(cloud)
    assert any(plugin_file(m) for m in modules), f"{cloud}'s extra installs no Pulumi provider: {modules}"
    found = sdk_imports(shared_modules(), modules)
    assert found == [], f"move it into goldenenv/clouds/{cloud}/ (its extra's modules: {sorted(modules)}): {found}"


def test_the_aws_sdk_is_the_aws_extras_and_the_reaper_is_in_its_folder():
    """boto3 is in `goldenenv[aws]`, not the main install, and the AWS code that imports it is in AWS's folder."""
    assert {"boto3", "botocore", "pulumi_aws"} <= sdk_modules("aws")
    assert not any(Requirement(r).name == "boto3" for r in PROJECT["dependencies"])
    assert not (PACKAGE / "reaper.py").exists() and (CLOUD_FOLDERS / "aws" / "reaper.py").exists()
    assert sdk_imports([CLOUD_FOLDERS / "aws" / "reaper.py"], {"boto3"}), "the reaper's handler imports boto3"


def test_the_sdk_rule_sees_an_import_in_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import json\n\ndef stop():\n    import boto3\n    from botocore.exceptions import ClientError\n")
    assert [hit.split(" ", 1)[1] for hit in sdk_imports([module], {"boto3", "botocore"})] == [
        "imports boto3", "imports botocore"]


# ------------------------------------------------------------------------------------------------- the clouds' APIs
def documentation(tree: ast.AST) -> set[int]:
    """The ids of string constants that document (a module's, class's or function's docstring, an attribute's)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


@functools.cache
def strings(path: Path) -> tuple[ast.Constant, ...]:
    """A module's string constants, its documentation aside."""
    tree = parsed(path)
    documents = documentation(tree)
    return tuple(node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
                 and id(node) not in documents)


def plugin_file(module: str) -> Path | None:
    """A Pulumi provider SDK's pulumi-plugin.json: what makes a module a provider, whatever its name (pulumi_aws;
    Tencent's tencentcloud_iac_pulumi)."""
    spec = importlib.util.find_spec(module)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        plugin = Path(folder) / "pulumi-plugin.json"
        if plugin.exists():
            return plugin
    return None


def provider_package(cloud: str) -> str | None:
    """The Pulumi package name of the cloud's provider (`aws`, `azure-native`, `tencentcloud`), from its
    pulumi-plugin.json: the prefix of every resource type token of the provider. None for a cloud without one."""
    for module in sorted(sdk_modules(cloud)):
        plugin = plugin_file(module)
        if plugin is not None:
            return json.loads(plugin.read_text())["name"]
    return None


def privilege_names(cloud: str) -> set[str]:
    """The actions and roles of the cloud's least-privilege table (goldenenv/clouds/<cloud>/privilege.py)."""
    if not (CLOUD_FOLDERS / cloud / "privilege.py").exists():
        return set()
    needs = importlib.import_module(f"goldenenv.clouds.{cloud}.privilege").NEEDS
    return {name for need in needs.values() for name in (*need.actions, *need.roles, *need.unscoped)}


def api_names(paths: list[Path], token_prefix: str | None, names: set[str]) -> list[str]:
    return [f"{where(path, node)} {node.value!r}" for path in paths for node in strings(path)
            if (token_prefix and node.value.startswith(f"{token_prefix}:")) or node.value in names]


@pytest.mark.parametrize("cloud", CLOUDS_WITH_AN_EXTRA)
def test_no_shared_module_names_a_clouds_api(cloud):
    prefix, names = provider_package(cloud), privilege_names(cloud)
    assert prefix, f"{cloud}'s provider has no pulumi-plugin.json naming its package"
    found = api_names(shared_modules(), prefix, names)
    assert found == [], (f"a type token of {prefix} or an action of {cloud}'s least-privilege table: ask the cloud "
                         f"(goldenenv/clouds/{cloud}/) through the protocol: {found}")


def test_the_api_rule_sees_a_type_token_and_an_action_but_not_a_docstring(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Calls aws:ec2/instance:Instance."""\n\nSOURCE = "aws:sns"\n\n'
                      'def grant():\n    return ["ec2:StopInstances", "goldenenv:stack"]\n')
    assert [hit.split(" ", 1)[1] for hit in api_names([module], "aws", {"ec2:StopInstances"})] == [
        "'aws:sns'", "'ec2:StopInstances'"]
    assert provider_package("aws") == "aws" and "ec2:StopInstances" in privilege_names("aws")


# ---------------------------------------------------------------------------------------- a cloud's name as default
def name_defaults(path: Path, cloud_names: set[str]) -> list[str]:
    """Each place a module holds a cloud's name as a default: a function's default, a `default=` (argparse, pytest's
    addoption, click), typer's Option/Argument default, the default of `get`/`getenv`/`setdefault`, or `x = "aws"`."""
    def named(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in cloud_names

    found = []
    relative = shown(path)
    for node in ast.walk(parsed(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            defaults = [*node.args.defaults, *node.args.kw_defaults]
            found += [f"{relative} {getattr(node, 'name', 'lambda')}(... = {d.value!r})" for d in defaults if named(d)]
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            found += [f"{relative} {callee}(default={k.value.value!r})" for k in node.keywords
                      if k.arg == "default" and named(k.value)]
            if callee in ("Option", "Argument") and node.args and named(node.args[0]):
                found.append(f"{relative} {callee}({node.args[0].value!r}, ...)")
            if callee in ("get", "getenv", "setdefault") and len(node.args) >= 2 and named(node.args[1]):
                found.append(f"{relative} {callee}(..., {node.args[1].value!r})")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and named(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [f"{relative} {ast.unparse(t)} = {node.value.value!r}" for t in targets]
    return found


@pytest.mark.parametrize("cloud", clouds.names())
def test_no_shared_module_holds_a_clouds_name_as_a_default(cloud):
    found = [hit for path in shared_modules() for hit in name_defaults(path, {cloud})]
    assert [hit for hit in found if hit not in NAME_DEFAULTS_ALLOWED] == [], (
        f"a default that names {cloud}: take the cloud from what is known (the stack, the lock, the node) or ask for "
        "it, naming the flag and the clouds of the registry")


def test_every_allowed_name_default_is_still_there():
    found = {hit for path in shared_modules() for hit in name_defaults(path, set(clouds.names()))}
    assert set(NAME_DEFAULTS_ALLOWED) <= found, "drop what no longer holds a cloud's name from NAME_DEFAULTS_ALLOWED"


def test_the_default_rule_sees_every_kind_of_default(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        'import os\nCLOUD = "aws"\nkind: str = "gcp"\n\n'
        'def addopts(group, cloud="azure", *, other="alicloud"):\n'
        '    group.addoption("--cloud", default="aws")\n    return os.environ.get("GOLDENENV_CLOUD", "gcp")\n\n'
        'OPTION = typer.Option("aws", "--cloud")\nFINE = "goldenenv"\n')
    assert name_defaults(module, {"aws", "gcp", "azure", "alicloud"}) == [
        "m.py CLOUD = 'aws'", "m.py kind = 'gcp'", "m.py addopts(... = 'azure')", "m.py addopts(... = 'alicloud')",
        "m.py Option('aws', ...)", "m.py addoption(default='aws')", "m.py get(..., 'gcp')"]


# ------------------------------------------------------------------------ what the two former defaults do instead
def test_the_spot_watcher_on_an_unknown_machine_asks_for_the_cloud(monkeypatch, tmp_path, capsys):
    """No DMI vendor it knows and no --cloud: it exits 2 naming --cloud and every cloud it has a notice for, and
    starts nothing (it polled AWS's endpoint before, where no other cloud's notice ever appears)."""
    monkeypatch.delenv("GOLDENENV_CLOUD", raising=False)
    monkeypatch.setattr(spotwatch, "DMI_FOLDER", tmp_path / "no-dmi")
    started = tmp_path / "started"
    assert spotwatch.main(["--", sys.executable, "-c", f"open({str(started)!r}, 'w')"]) == 2
    said = capsys.readouterr().err
    assert "give --cloud (one of " in said and "GOLDENENV_CLOUD" in said and "polling" not in said
    assert sorted(said.split("(one of ")[1].split(")")[0].split(", ")) == sorted(spotwatch.CLOUDS)
    assert {"aws", "gcp", "azure", "alicloud"} <= set(spotwatch.CLOUDS)
    assert not started.exists()


def test_image_checks_of_an_instance_type_without_its_cloud_are_a_usage_error():
    """`goldenenv image check --hosts ... --instance-type T` with no cloud: pytest's usage error (exit 4) naming
    --cloud and the registry's clouds, never AWS's catalog row by default."""
    from goldenenv.checks import run

    command = run.pytest_command(REPO / "images" / "cpu-dev" / "lock.yaml", "local://",
                                 ["--gpu", "--instance-type", "g5.xlarge"])
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert (f"--instance-type g5.xlarge needs --cloud, the cloud whose catalog lists it (one of "
            f"{', '.join(clouds.names())})") in done.stderr
    wrong = subprocess.run(run.pytest_command(REPO / "images" / "cpu-dev" / "lock.yaml", "local://",
                                              ["--cloud", "nowhere", "--instance-type", "g5.xlarge"]),
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 4 and "invalid choice: 'nowhere'" in wrong.stderr
