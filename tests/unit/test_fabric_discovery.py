"""A fabric is one folder: a copy of the smallest fabric folder, renamed, in a copy of the package is found by the
registry (FABRICS, the lock's fabric names), by the node health judge and by the image's bundled judge, with no
other file changed. The clouds' spot notice modules are held to the same by tests/unit/test_spotwatch.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from goldenenv import fabrics, render
from goldenenv.catalog import health
from goldenenv.health import judge

PACKAGE = Path(fabrics.__file__).resolve().parents[1]
SMALLEST = "erdma"
NEW = "scratch"

PROBE = """
import json, sys
from goldenenv import fabrics
from goldenenv.images import bundle, lock
sys.stdout.write(json.dumps({"fabrics": list(fabrics.FABRICS), "names": list(lock.FABRIC_NAMES),
                             "sections": list(fabrics.sections()), "label": fabrics.label(sys.argv[1])}))
open(sys.argv[2], "wb").write(bundle.health_judge())
"""
"""What the copied package says of its fabrics, and its image's judge written to a file."""


def _renamed(text: str, old: str, new: str) -> str:
    """The smallest fabric's text under the new name: its quoted name, its evidence's names, its section model, its
    offered names, and its place last. The catalog's threshold rows it is judged by stay the ones it names."""
    text = text.replace(f'"{old}"', f'"{new}"')
    for evidence in judge.FABRIC_JUDGES[old].EVIDENCE:
        text = text.replace(f'"{evidence}"', f'"{new}{evidence.removeprefix(old)}"')
    text = re.sub(rf"\b{old.capitalize()}\b", new.capitalize(), text)
    text = re.sub(rf"\b{old.upper()}_", f"{new.upper()}_", text)
    return re.sub(r"^ORDER = \d+$", "ORDER = 99", text, flags=re.MULTILINE)


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """A copy of goldenenv with goldenenv/fabrics/scratch/, the smallest fabric's folder renamed."""
    root = tmp_path_factory.mktemp("pkg")
    shutil.copytree(PACKAGE, root / "goldenenv", ignore=shutil.ignore_patterns("__pycache__"))
    folder = root / "goldenenv" / "fabrics" / NEW
    shutil.copytree(PACKAGE / "fabrics" / SMALLEST, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for path in folder.glob("*.py"):
        path.write_text(_renamed(path.read_text(), SMALLEST, NEW))
    return root


@pytest.fixture(scope="module")
def probed(package, tmp_path_factory) -> tuple[dict, Path]:
    image_judge = tmp_path_factory.mktemp("image") / "goldenenv-health"
    done = subprocess.run([sys.executable, "-c", PROBE, NEW, str(image_judge)], capture_output=True, text=True,
                          cwd=package, env={"PYTHONPATH": str(package), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout), image_judge


def test_the_copied_folder_is_a_fabric_of_the_registry_listed_last(probed):
    said, _ = probed
    assert said["fabrics"] == [*fabrics.FABRICS, NEW]
    assert said["names"][-1] == NEW and said["sections"][-1] == NEW
    assert said["label"] == fabrics.label(SMALLEST), "the copy keeps the label it was copied with"


def _judge(script: Path, tmp_path: Path, links: int) -> subprocess.CompletedProcess:
    """The script run alone (standard library only) on a node of the new fabric whose rdma shows `links` ACTIVE
    devices, named as the renamed copy counts them."""
    evidence = tmp_path / f"evidence-{links}"
    evidence.mkdir()
    (evidence / "rdma_link.txt").write_text("".join(
        f"link {NEW}_{i}/1 state ACTIVE physical_state LINK_UP netdev eth{i}\n" for i in range(links)))
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"gpus": 0, "fabric": NEW, "fabric_devices": 2, "nvlinks_per_gpu": 0,
                                  "nvswitch": False}))
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(health.rules_document()))
    return subprocess.run([sys.executable, "-I", "-S", str(script), "--evidence", str(evidence), "--expect",
                           str(expect), "--rules", str(rules), "--node", "n1", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)


@pytest.mark.parametrize("where", ["package", "image"])
def test_the_judge_finds_the_copied_fabric_and_judges_its_nodes(where, package, probed, tmp_path):
    script = package / "goldenenv" / "health" / "judge.py" if where == "package" else probed[1]
    healthy = _judge(script, tmp_path, 2)
    assert healthy.returncode == 0 and json.loads(healthy.stdout)["findings"] == [], healthy.stderr
    short = _judge(script, tmp_path, 1)
    assert short.returncode == 1, short.stderr
    assert [f["rule"] for f in json.loads(short.stdout)["findings"]] == ["erdma_devices_below_expected"]


def test_the_shipped_judge_knows_no_such_fabric(tmp_path):
    done = _judge(Path(judge.__file__), tmp_path, 2)
    assert done.returncode == 2 and f"got {NEW!r}" in done.stderr and "Traceback" not in done.stderr


def test_every_fabric_folder_is_one_of_the_registry_and_every_judge_is_a_fabrics():
    folders = {p.name for p in (PACKAGE / "fabrics").iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(fabrics.FABRICS)
    assert set(judge.fabric_judge_files()) <= folders
    assert {f.health_fabric for f in fabrics.FABRICS.values()} - {"none"} == set(judge.FABRIC_JUDGES)


def test_two_folders_offering_one_name_are_refused(monkeypatch):
    twin = type(sys)("twin")
    twin.__all__ = ["Efa"]
    twin.Efa = object()
    with pytest.raises(RuntimeError, match="offers Efa, which goldenenv.fabrics offers too"):
        fabrics.offered({"twin": twin})


@pytest.mark.parametrize("name", list(fabrics.FABRICS))
def test_every_fabric_of_the_registry_brings_what_its_record_names(name):
    """Held to every fabric folder, the day it is added: its layer and boot check templates exist, its lock
    section's model is its own, and the health judge counts it or it says `none`."""
    fabric = fabrics.get(name)
    assert render.source(fabric.image_layer).is_file(), f"{name}: no template {fabric.image_layer}"
    if fabric.boot_check:
        unit, script = fabric.boot_check
        assert render.source(f"node/{unit}.j2").is_file() and render.source(f"node/{script}.j2").is_file()
    assert fabric.lock_section in fabrics.sections() and fabric.section.__module__.startswith("goldenenv.fabrics.")
    assert fabric.health_fabric in judge.FABRICS, f"{name}: the judge counts no {fabric.health_fabric!r}"


def test_no_fabric_folder_names_a_clouds_module():
    """A fabric's folder reaches into no cloud's internals: how its interfaces sit on a node's network cards is the
    cloud folder's business, so a cloud renamed breaks no fabric and a second cloud may carry the same fabric."""
    folder = PACKAGE / "fabrics"
    naming = [path.relative_to(PACKAGE.parent).as_posix() for path in sorted(folder.rglob("*"))
              if path.is_file() and "__pycache__" not in path.parts
              and "goldenenv.clouds." in path.read_text(encoding="utf-8", errors="replace")]
    assert naming == [], f"these files of goldenenv/fabrics/ name a cloud's module (goldenenv.clouds.): {naming}"
