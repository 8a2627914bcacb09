"""A stack with the scheduler needs an image whose Slurm can run it, or plan says so before anything is rented.

Every stack runs Slurm by default (goldenenv:scheduler slurm): the head's slurmctld and every node's slurmd come from
the golden image, and the nodes register as dynamic nodes (slurmd -Z), which Slurm has had since 22.05. A lock
without a `slurm:` section, or with an older Slurm (Ubuntu 22.04 ships 21.08.5), is an error that names the stack key
and the lock file and says what to write instead; `goldenenv:scheduler: none` lifts it.
"""

from __future__ import annotations

import copy
import shutil

import pytest
import yaml

from goldenenv import catalog, compat, stackconfig
from goldenenv.images.lock import IMAGES, Lock, load
from goldenenv.plan import plan, stack_file

RULE = "compat:scheduler"
LOCK_FILE = "images/mine/lock.yaml"


def lock_with(**slurm) -> Lock:
    """cpu-dev's lock with its `slurm:` section replaced (or dropped, given nothing)."""
    doc = yaml.safe_load((IMAGES / "cpu-dev" / "lock.yaml").read_text())
    doc.pop("slurm")
    if slurm:
        doc["slurm"] = {"mariadb": "1:10.11.18-0+deb12u1", **slurm}
    return Lock.model_validate(doc)


def test_the_catalog_says_dynamic_nodes_came_with_slurm_22_05():
    """Literal anchor from SchedMD's dynamic nodes page: a wrong catalog row would move every verdict below."""
    (row,) = [f for f in catalog.slurm_features() if f.feature == "dynamic nodes"]
    assert row.min_slurm == "22.05"
    assert row.doc == "https://slurm.schedmd.com/dynamic_nodes.html" and row.doc in row.source


def test_a_lock_without_slurm_is_an_error_naming_the_stack_key_the_lock_file_and_what_is_valid():
    (conflict,) = compat.check_scheduler("slurm", lock_with(), LOCK_FILE)
    assert conflict.severity == compat.ERROR and conflict.rule == "scheduler"
    message = conflict.message
    assert message.startswith("goldenenv:scheduler is slurm") and f"{LOCK_FILE} pins no Slurm" in message
    assert f"add `slurm:` (version, munge) to {LOCK_FILE}" in message
    assert "an image whose base ships Slurm >= 22.05" in message and "cuda-slim" in message
    assert message.endswith("or set goldenenv:scheduler: none (no queue: `goldenenv run` over ssh only)")


def test_slurm_21_08_has_no_dynamic_nodes():
    (conflict,) = compat.check_scheduler("slurm", lock_with(version="21.08.5-2ubuntu1", munge="0.5.14-6ubuntu0.1"),
                                         LOCK_FILE)
    assert conflict.severity == compat.ERROR and "slurm.version=21.08.5-2ubuntu1" in conflict.pins
    message = conflict.message
    assert f"{LOCK_FILE} pins Slurm 21.08.5 (slurm.version 21.08.5-2ubuntu1)" in message
    assert "dynamic nodes need Slurm >= 22.05" in message and "https://slurm.schedmd.com/dynamic_nodes.html" in message
    assert "goldenenv:scheduler: none" in message


@pytest.mark.parametrize("version", ["22.05.8-4+deb12u3", "23.11.4-1.2ubuntu5", "24.11.5-4+deb13u1"])
def test_slurm_22_05_and_later_runs_the_scheduler(version):
    assert compat.check_scheduler("slurm", lock_with(version=version, munge="0.5.15-2+deb12u1"), LOCK_FILE) == []


def test_a_stack_without_the_scheduler_needs_no_slurm():
    assert compat.check_scheduler("none", lock_with(), LOCK_FILE) == []
    assert compat.check_scheduler("none", lock_with(version="21.08.5-2ubuntu1", munge="0.5.14-6"), LOCK_FILE) == []


@pytest.fixture
def images(tmp_path, monkeypatch):
    """An image folder read first, holding `mine`: the aws-ampere lock without its `slurm:` section."""
    folder = tmp_path / "images"
    (folder / "mine").mkdir(parents=True)
    doc = yaml.safe_load((IMAGES / "aws-ampere" / "lock.yaml").read_text())
    doc.pop("slurm")
    doc["name"] = "mine"
    (folder / "mine" / "lock.yaml").write_text(yaml.safe_dump(doc))
    shutil.copytree(IMAGES / "cpu-dev", folder / "cpu-dev")
    monkeypatch.setattr("goldenenv.images.lock.IMAGES", folder)
    assert load("mine").slurm is None
    return folder


def stack_on(tmp_path, stack: str, lock: str, scheduler: str | None = None):
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    config["goldenenv:image"]["lock"] = lock
    if scheduler:
        config["goldenenv:scheduler"] = scheduler
    folder = tmp_path / "stacks"
    folder.mkdir(exist_ok=True)
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    return folder


@pytest.mark.parametrize("stack", ["aws-g5-dev", "alicloud-gn7i-dev", "local"])
def test_plan_fails_a_stack_whose_lock_has_no_slurm_once_and_scheduler_none_passes_it(stack, images, tmp_path):
    result = plan(stack, stack_on(tmp_path, stack, "mine"))
    found = [f for f in result.findings if f.rule == RULE]
    assert len(found) == 1 and found[0].severity.value == "error" and result.failed
    assert "goldenenv:scheduler is slurm" in found[0].message and "mine/lock.yaml pins no Slurm" in found[0].message
    result = plan(stack, stack_on(tmp_path, stack, "mine", scheduler="none"))
    assert not [f for f in result.findings if f.rule == RULE]


def test_pulumi_up_run_directly_refuses_a_lock_without_slurm(images, tmp_path, monkeypatch):
    import pulumi

    from goldenenv import program

    spec = plan("aws-g5-dev", stack_on(tmp_path, "aws-g5-dev", "mine")).spec
    monkeypatch.setattr(stackconfig, "from_pulumi", lambda: spec)
    with pytest.raises(pulumi.RunError, match="(?s)does not fit.*scheduler: goldenenv:scheduler is slurm"):
        program.refuse_incompatible()


@pytest.mark.parametrize("stack", ["aws-g5-dev", "aws-p4d-4node-spot", "aws-p5-2node", "alicloud-gn7i-dev",
                                   "alicloud-ebmgn8v-2node", "local"])
def test_every_shipped_stack_has_an_image_that_runs_its_scheduler(stack):
    result = plan(stack)
    assert result.spec.scheduler == "slurm"
    assert not [f for f in result.findings if f.rule == RULE]
    assert compat.check_scheduler("slurm", load(result.spec.image.lock), "lock") == []
