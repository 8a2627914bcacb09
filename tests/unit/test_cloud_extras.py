"""Install only what you use: each cloud's Pulumi provider is an extra of goldenenv's named after the cloud's folder
(`goldenenv[aws]`), the local flow imports none of them, and a stack on a cloud whose extra is missing says the one
command that adds it (exit 2), never an ImportError.

The test extra installs every provider here, so their absence is staged: each check runs goldenenv in a subprocess
whose first meta-path finder refuses to import them, as in a virtualenv set up by ./scripts/setup.sh without --cloud.
Every rule is parametrized over the cloud registry, so a new cloud is held to it the day its folder is added.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from goldenenv import clouds, stackconfig
from tests.unit.shipped import pulumi_stacks

REPO = Path(__file__).resolve().parents[2]
EXTRAS: dict[str, list[str]] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
NOT_CLOUDS = ("test", "all")
PROVIDER_EXTRAS = {name: requirements for name, requirements in EXTRAS.items() if name not in NOT_CLOUDS}
"""The clouds pyproject.toml has an extra for, each with its requirements (pulumi-aws==7.51.1)."""


def modules_of(requirements: list[str]) -> list[str]:
    """The import names of pinned distributions: pulumi-azure-native==3.29.0 -> pulumi_azure_native."""
    return [re.split(r"[=<>!~;\s\[]", r, maxsplit=1)[0].lower().replace("-", "_") for r in requirements]


def held_by(extra: str) -> set[str]:
    """The extras an extra names of goldenenv's own, however deep (test -> all -> aws, ...), itself included."""
    found, todo = set(), [extra]
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += [e for r in EXTRAS.get(name, []) if (m := re.fullmatch(r"goldenenv\[(.+)\]", r.replace(" ", "")))
                     for e in m[1].split(",")]
    return found


ALL_PROVIDERS = sorted({m for requirements in PROVIDER_EXTRAS.values() for m in modules_of(requirements)})

# Runs in a subprocess: refuse the modules in argv[1] (comma-separated), then run argv[2]'s JSON list of steps,
# ["cli", args] (the goldenenv command line, exit status and output kept), ["installed", cloud] (the registry's
# answer) or ["python", code] (what it prints), and print their results as JSON, with the refused modules each step tried to import.
WITHOUT_PROVIDERS = r"""
import contextlib, io, json, sys, traceback
REFUSED = set(filter(None, sys.argv[1].split(",")))
tried = []
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            tried.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
results = []
for kind, arg in json.loads(sys.argv[2]):
    tried.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            if kind == "installed":
                from goldenenv import clouds
                code = clouds.installed(arg)
            elif kind == "python":
                exec(arg, {})
                code = 0
            else:
                from goldenenv.cli import app
                app(arg, prog_name="goldenenv")
                code = 0
        except SystemExit as e:
            code = e.code or 0
        except BaseException:
            code = "raised"
            traceback.print_exc()
    results.append({"step": [kind, arg], "code": code, "output": out.getvalue(), "tried": sorted(set(tried))})
print(json.dumps(results))
"""


def without(refused: list[str], *steps: tuple[str, object]) -> list[dict]:
    """Each step's result (code, output, tried) in one goldenenv process where the `refused` modules are missing."""
    env = {**os.environ, "COLUMNS": "300", "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", WITHOUT_PROVIDERS, ",".join(refused), json.dumps(steps)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def first_stack_by_cloud() -> dict[str, str]:
    found: dict[str, str] = {}
    for cloud, stack in pulumi_stacks():
        found.setdefault(cloud, stack)
    return found


def test_the_local_flow_runs_with_no_cloud_provider_installed():
    results = without(ALL_PROVIDERS, ("cli", ["--help"]), ("cli", ["plan", "-s", "local"]),
                      ("cli", ["estimate", "--model", "llama-2-7b", "--tokens", "1e8"]),
                      ("cli", ["image", "check-lock", "cpu-dev", "--instance-type", "g5.xlarge", "--cloud", "aws"]))
    for result in results:
        assert result["code"] == 0, (result["step"], result["output"][-3000:])
        assert "Traceback" not in result["output"] and "needs its provider" not in result["output"]
    help_, plan, estimate, check_lock = (r["output"] for r in results)
    assert "flow" in help_ and "estimate" in help_
    assert "no guardrail failed" in plan
    assert "memory per GPU" in estimate and "g5.xlarge" in estimate  # every catalog type, aws's included
    assert "cpu-dev passes" in check_lock


def test_no_module_outside_a_provider_clouds_folder_imports_a_provider():
    """What the local flow may import (the CLI, plan, lifecycle, images, fabrics, health, the local cloud ...) imports
    at module level no cloud provider: each module of the package, walked, imports with every provider missing. A
    module that needs another missing package (torch, on a node) is not goldenenv's import path here and is left."""
    walk = r"""
import importlib, pkgutil, sys
import goldenenv
own = tuple(f"goldenenv.clouds.{c}" for c in sys.argv[3].split(","))
failed = []
for info in pkgutil.walk_packages(goldenenv.__path__, "goldenenv.", onerror=lambda name: None):
    if info.name.startswith(own) or info.name.endswith(".__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in REFUSED:
            failed.append(f"{info.name}: {e.name}")
print("\n".join(failed))
"""
    script = WITHOUT_PROVIDERS.split("results = []")[0] + walk
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script, ",".join(ALL_PROVIDERS), "[]", ",".join(PROVIDER_EXTRAS)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "", f"modules that import a cloud provider at import time:\n{done.stdout}"


def pool_types(stack: str) -> list[str]:
    """The instance types of a shipped stack's node pools, as its file writes them."""
    nodes = stackconfig.read_stack_file(REPO / "stacks" / f"Pulumi.{stack}.yaml")["goldenenv:nodes"]
    return [pool["instanceType"] for pool in (nodes if isinstance(nodes, list) else [nodes])]


@pytest.mark.parametrize("cloud", clouds.names())
def test_a_cloud_without_its_provider_says_the_command_that_adds_it(cloud):
    """With every provider missing, a cloud either loads (it needs none: local) or is one of pyproject.toml's extras,
    which `all` and `test` hold, and then plan, up and image push on its stack say so: a heading, then the command
    that adds the provider, exit 2, and no ImportError; estimate, which reads only the catalog, still estimates the
    stack's pool."""
    own = modules_of(PROVIDER_EXTRAS.get(cloud, []))
    stack = first_stack_by_cloud().get(cloud)
    commands = [["plan", "-s", stack], ["up", "-s", stack], ["image", "push", "cpu-dev", "-s", stack],
                ["estimate", "-s", stack, "--lock", "aws-ampere", "--model", "llama-2-7b", "--tokens", "1e8"]]
    bare, *results = without(ALL_PROVIDERS, ("installed", cloud), *(("cli", c) for c in commands if stack))
    if bare["code"] is True:
        assert not own, f"{cloud} loads without its extra's {own}: drop the extra"
        return
    assert bare["code"] is False, bare["output"][-3000:]
    assert cloud in PROVIDER_EXTRAS, f"{cloud} needs {bare['tried']} but pyproject.toml has no extra named {cloud}"
    assert set(bare["tried"]) & set(own), f"{cloud} tried {bare['tried']}, not its extra's {own}"
    assert cloud in held_by("all") and cloud in held_by("test"), "goldenenv[all] and [test] hold every cloud"
    said = (f"goldenenv:cloud: {cloud} needs its provider: ./scripts/setup.sh --cloud {cloud} "
            f"(or pip install 'goldenenv[{cloud}]')")
    *needing, estimate = results
    for result in needing:
        assert result["code"] == 2, (result["step"], result["output"][-3000:])
        lines = result["output"].splitlines()
        assert lines[:2] == ["a cloud's provider is not installed", f"  {said}"], result["output"][-3000:]
        assert "Error" not in result["output"] and "Traceback" not in result["output"]
    heading = estimate["output"].splitlines()[0]
    assert heading.startswith("goldenenv estimate"), estimate["output"][-3000:]
    assert any(f" · {t} × " in heading for t in pool_types(stack)), heading


def test_a_capability_the_stacks_cloud_lacks_is_said_without_asking_clouds_that_are_not_installed():
    """A local stack asking for a budget is told which clouds can give one; with no provider installed, the clouds
    that would need one to say are named as not installed, not raised as a missing provider."""
    ask = """
from pathlib import Path
from goldenenv import clouds, stackconfig
from goldenenv.spec import ConfigError
values, unknown = stackconfig.namespaced(stackconfig.read_stack_file(Path("stacks/Pulumi.local.yaml")))
values["budget"] = {"monthlyLimit": 100, "emails": ["team@example.com"]}
try:
    clouds.validate(stackconfig.load("local", values, unknown))
except ConfigError as e:
    print(type(e).__name__, e)
"""
    [refused], [installed] = without(ALL_PROVIDERS, ("python", ask)), without([], ("python", ask))
    needing = sorted(c for c in clouds.names() if c in PROVIDER_EXTRAS)
    assert refused["output"].strip() == (
        "ConfigError goldenenv:budget: local cannot provide budget; clouds that can: none of those installed; not "
        f"installed, so not asked: {', '.join(needing)} (./scripts/setup.sh --cloud NAME adds one)")
    assert installed["output"].startswith("ConfigError goldenenv:budget: local cannot provide budget; clouds that can: ")
    assert "not installed" not in installed["output"]
