"""Project discovery like Pulumi's: the nearest Pulumi.yaml upward, the user's folders first, packaged defaults after;
`goldenenv init` scaffolds a project that plans; `python -m goldenenv` is the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import project, render
from goldenenv.cli import app
from goldenenv.images import lock as image_lock
from goldenenv.images import publish

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
HINT = "run `goldenenv init DIR` to start a project, or pass --cwd"


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """Each test finds its own project; the working directory (which --cwd changes) comes back after it."""
    monkeypatch.chdir(os.getcwd())
    monkeypatch.setattr(project, "_current", None)


def outside(tmp_path: Path) -> Path:
    assert not any((p / "Pulumi.yaml").exists() for p in (tmp_path, *tmp_path.parents)), "tmp is inside a project"
    return tmp_path


def minimal(root: Path, stack_dir: str | None = "stacks") -> Path:
    """A project of one local stack and nothing else: locks and templates come from the package."""
    root.mkdir(parents=True, exist_ok=True)
    doc = {"name": "mine", "runtime": "python"} | ({"stackConfigDir": stack_dir} if stack_dir else {})
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(doc))
    stacks = root / (stack_dir or ".")
    stacks.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "stacks" / "Pulumi.local.yaml", stacks / "Pulumi.local.yaml")
    return root


def test_this_repository_is_a_project_with_its_own_folders():
    here = project.find(REPO / "goldenenv" / "program")
    assert here.root == REPO
    assert here.stacks == REPO / "stacks"
    assert here.state == REPO / ".goldenenv" / "pulumi-state"
    assert here.image_folders() == [REPO / "images"]
    assert here.template_folders() == [REPO / "templates", *sorted(REPO.glob("goldenenv/clouds/*/templates")),
                                       *sorted(REPO.glob("goldenenv/fabrics/*/templates")),
                                       *sorted(REPO.glob("goldenenv/accelerators/*/templates"))]
    assert here.examples_folder() == REPO / "examples"


def test_the_nearest_pulumi_yaml_upward_is_the_project(tmp_path):
    outer = minimal(outside(tmp_path) / "outer")
    inner = minimal(outer / "deep" / "inner")
    (inner / "a" / "b").mkdir(parents=True)
    assert project.find(inner / "a" / "b").root == inner
    assert project.find(outer / "deep").root == outer
    os.chdir(inner / "a")
    assert project.current().root == inner


def test_outside_a_project_every_command_says_how_to_start_one(tmp_path):
    here = outside(tmp_path)
    with pytest.raises(project.NoProject, match="no Pulumi.yaml here or above .*goldenenv init DIR"):
        project.find(here)
    result = runner.invoke(app, ["--cwd", str(here), "plan", "-s", "local"])
    assert result.exit_code == 2
    assert f"no Pulumi.yaml here or above {here.resolve()}" in result.output and HINT in result.output
    os.chdir(here)
    result = runner.invoke(app, ["image", "list"])
    assert result.exit_code == 2 and HINT in result.output


def test_cwd_picks_the_project_and_its_stack_config_dir(tmp_path):
    root = minimal(outside(tmp_path) / "infra", stack_dir="config/stacks")
    assert project.find(root).stacks == root / "config" / "stacks"
    result = runner.invoke(app, ["--cwd", str(root / "config"), "plan", "-s", "local"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "no guardrail failed" in result.output
    assert project.current().root == root
    from goldenenv.plan import STACKS, stack_file

    assert STACKS == root / "config" / "stacks"
    assert stack_file("local") == root / "config" / "stacks" / "Pulumi.local.yaml"
    missing = runner.invoke(app, ["--cwd", str(root), "plan", "-s", "aws-p5-2node"])
    assert missing.exit_code == 2, "the repository's stacks are not a fallback: stacks are the user's"


def test_without_stack_config_dir_stacks_sit_beside_pulumi_yaml(tmp_path):
    root = minimal(outside(tmp_path) / "flat", stack_dir=None)
    assert project.find(root).stacks == root
    assert runner.invoke(app, ["--cwd", str(root), "plan", "-s", "local"]).exit_code == 0


def test_locks_come_from_the_project_first_then_the_package(tmp_path):
    root = minimal(outside(tmp_path) / "infra")
    mine = root / "images" / "mine" / "lock.yaml"
    mine.parent.mkdir(parents=True)
    doc = yaml.safe_load((REPO / "images" / "cpu-dev" / "lock.yaml").read_text())
    doc["name"] = "mine"
    mine.write_text(yaml.safe_dump(doc))
    project.use(project.find(root))
    assert image_lock.lock_path("mine") == mine
    assert image_lock.lock_path("aws-h100") == project.packaged("images") / "aws-h100" / "lock.yaml"
    assert {"mine", "aws-h100", "cpu-dev"} <= set(image_lock.names())
    assert image_lock.load("aws-h100").name == "aws-h100"
    # a push of a packaged lock is recorded in the project, never in the package
    assert publish.published_path("aws-h100") == root / "images" / "aws-h100" / "published.yaml"


def test_a_template_the_project_lacks_comes_from_the_package(tmp_path):
    root = minimal(outside(tmp_path) / "infra")
    own = root / "templates" / "node" / "launch.env.j2"
    own.parent.mkdir(parents=True)
    own.write_text("OWN={{ value | sh }}\n")
    project.use(project.find(root))
    assert render.render("node/launch.env.j2", value="x y") == "OWN='x y'\n"
    packaged = render.render("node/enable-units.sh.j2", units=["a.service"])
    assert packaged.startswith("#!")


def test_the_local_backend_and_cluster_outputs_live_in_the_project(tmp_path, monkeypatch):
    from goldenenv import updates

    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    root = minimal(outside(tmp_path) / "infra")
    project.use(project.find(root))
    _, note = updates.last_deployment("local")
    assert str(root / ".goldenenv" / "pulumi-state") in note
    assert project.current().local_state == root / ".goldenenv" / "local"


def test_init_writes_a_project_that_plans(tmp_path):
    target = outside(tmp_path) / "infra"
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    written = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert written == [".gitignore", "Pulumi.yaml", "examples/train_ddp.py", "images/cpu-dev/lock.yaml",
                       "program/__main__.py", "stacks/Pulumi.alicloud-gn7i-dev.yaml",
                       "stacks/Pulumi.aws-g5-dev.yaml", "stacks/Pulumi.local.yaml"]
    pulumi_yaml = yaml.safe_load((target / "Pulumi.yaml").read_text())
    assert pulumi_yaml["name"] == "infra" and pulumi_yaml["runtime"]["name"] == "python"
    assert (target / pulumi_yaml["main"] / "__main__.py").read_text().count("from goldenenv.program import main")
    assert pulumi_yaml["stackConfigDir"] == "stacks"
    assert (target / "images/cpu-dev/lock.yaml").read_bytes() == (REPO / "images/cpu-dev/lock.yaml").read_bytes()
    assert ".goldenenv/" in (target / ".gitignore").read_text().splitlines()
    for stack in ("local", "aws-g5-dev", "alicloud-gn7i-dev"):
        planned = runner.invoke(app, ["--cwd", str(target), "plan", "-s", stack], env={"COLUMNS": "200"})
        assert planned.exit_code == 0, f"{stack}: {planned.output}"
    # the Alibaba example's public image lacks the driver, engine and toolkit: its nodes install them at first boot
    planned = runner.invoke(app, ["--cwd", str(target), "plan", "-s", "alicloud-gn7i-dev", "--json"])
    planned = json.loads(planned.output)
    assert planned["compat"][0]["hostLayer"]["installsAtFirstBoot"]
    assert not [f for f in planned["findings"] if f["rule"] == "compat:host-layer"]
    assert project.current().root == target.resolve()


def test_init_refuses_a_folder_that_holds_files(tmp_path):
    target = outside(tmp_path) / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 2
    assert f"{target} exists and is not an empty folder" in result.output.replace("\n", "")
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    empty = outside(tmp_path) / "empty"
    empty.mkdir()
    assert runner.invoke(app, ["init", str(empty)]).exit_code == 0


def test_python_dash_m_goldenenv_is_the_cli(tmp_path):
    done = subprocess.run([sys.executable, "-m", "goldenenv", "--help"], capture_output=True, text=True,
                          cwd=outside(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Usage: goldenenv" in done.stdout and "init" in done.stdout and "--cwd" in done.stdout


@pytest.mark.wheel
@pytest.mark.skipif(os.environ.get("GOLDENENV_TEST_WHEEL") != "1", reason="builds the wheel and installs it with its "
                    "dependencies in a fresh virtualenv (about 3 minutes): GOLDENENV_TEST_WHEEL=1 runs it")
def test_the_built_wheel_starts_a_project_in_a_fresh_virtualenv(tmp_path):
    """What a user does: pip install the wheel into a new virtualenv outside any checkout, init, plan."""
    work = outside(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def run(*command, cwd=work, timeout=600):
        done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", REPO)
    wheel = next((work / "dist").glob("goldenenv-*.whl"))
    run(sys._base_executable, "-m", "venv", work / "venv")
    bin_dir = work / "venv" / "bin"
    run(bin_dir / "python", "-m", "pip", "install", "-q", wheel)  # no extra: the local flow, no cloud's provider
    installed = run(bin_dir / "python", "-c", "import goldenenv.project as p; print(p.PACKAGE, p.packaged('templates'))"
                    ).split()
    assert all(Path(p).is_relative_to(work / "venv") for p in installed), installed
    run(bin_dir / "goldenenv", "init", "infra")
    plan = run(bin_dir / "goldenenv", "plan", "-s", "local", cwd=work / "infra")
    assert "no guardrail failed" in plan
    missing = subprocess.run([bin_dir / "goldenenv", "plan", "-s", "aws-g5-dev"], cwd=work / "infra", env=env,
                             capture_output=True, text=True, timeout=600)
    assert missing.returncode == 2 and "pip install 'goldenenv[aws]'" in missing.stderr, missing.stderr[-3000:]
    run(bin_dir / "python", "-m", "pip", "install", "-q", f"{wheel}[aws]")
    assert "aws-g5-dev" in run(bin_dir / "goldenenv", "plan", "-s", "aws-g5-dev", "--json", cwd=work / "infra")
    assert "Usage: goldenenv" in run(bin_dir / "python", "-m", "goldenenv", "--help", cwd=work / "infra")
