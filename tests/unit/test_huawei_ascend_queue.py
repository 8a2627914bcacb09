"""The Slurm queue of Huawei's Ascend stack: huawei-snt9b-2node ships scheduler slurm on the community Ascend lock
(Ubuntu 24.04's Slurm 23.11, past the 22.05 self-registering nodes need), with its head on an arm64 Kunpeng ECS that
can run the arm64 golden image; a head of the other architecture is refused at goldenenv:head.instanceType; the GPU
stack keeps its x86 head; plan says which NPU driver it cannot prove. Expectations are written out from the stack
file and the catalog rows' sources."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from goldenenv import catalog, clouds, plan, stackconfig
from goldenenv.images.lock import load
from goldenenv.spec import ConfigError

STACKS = Path(__file__).resolve().parents[2] / "stacks"
NPU_STACK = "huawei-snt9b-2node"
GPU_STACK = "huawei-gpu-dev"
INSTANCE = "huaweicloud:Ecs/instance:Instance"


def _values(stack: str, **top) -> dict:
    values, _ = stackconfig.namespaced(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
    return {**copy.deepcopy(values), **top}


def _head(stack: str):
    config = stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml")
    spec = stackconfig.load(stack, _values(stack))
    resources, _ = plan.run_program(stack, config, plan.offline_context(spec))
    return next(r for r in resources if r.type == INSTANCE and r.name == f"{stack}-head")


def _refusals(stack: str, **top) -> list[str]:
    try:
        clouds.validate(stackconfig.load(stack, _values(stack, **top)))
    except ConfigError as e:
        return [str(p) for p in e.problems]
    return []


def test_the_npu_stack_ships_a_slurm_queue_on_a_lock_whose_slurm_registers_nodes():
    spec = stackconfig.load(NPU_STACK, _values(NPU_STACK))
    assert (spec.scheduler, spec.image.lock) == ("slurm", "ascend-910b")
    lock = load("ascend-910b")
    assert lock.slurm.version == "23.11.4-1.2ubuntu5" and lock.ascend.platform == "linux/arm64"
    assert _refusals(NPU_STACK) == []


def test_its_head_is_a_kunpeng_ecs_booting_huaweis_arm64_ubuntu():
    head = _head(NPU_STACK)
    assert head.props["flavorId"] == "kc1.large.2"
    assert head.props["imageName"] == "Ubuntu 22.04 server 64bit with ARM"


def test_the_gpu_stack_keeps_its_x86_head_on_its_pools_image():
    head = _head(GPU_STACK)
    assert head.props["flavorId"] == "c6.large.2"
    assert head.props["imageName"] == "Ubuntu 22.04 server 64bit"


@pytest.mark.parametrize(("stack", "head", "words"), [
    (NPU_STACK, "c6.large.2", "c6.large.2 is an x86_64 flavor and lock ascend-910b is built for aarch64"),
    (GPU_STACK, "kc1.large.2", "kc1.large.2 is an aarch64 flavor and lock huawei-t4 is built for x86_64"),
])
def test_a_head_that_cannot_run_the_golden_image_is_refused_at_its_key(stack, head, words):
    found = _refusals(stack, head={"instanceType": head})
    valid = "valid: kc1.large.2" if head == "c6.large.2" else "valid: c6.large.2"
    assert any(p.startswith("goldenenv:head.instanceType") and words in p and valid in p for p in found), found


def test_the_head_architecture_rule_waits_for_a_queue():
    assert _refusals(NPU_STACK, scheduler="none", head={"instanceType": "c6.large.2"}) == []


def test_plan_says_the_npu_driver_it_cannot_prove():
    spec = stackconfig.load(NPU_STACK, _values(NPU_STACK))
    notes = " ".join(clouds.get("huawei").plan_notes(spec, []))
    assert "NPU driver: lock ascend-910b (CANN 9.1.0) needs an NPU driver that no table" in notes
    booted = catalog.host_images("huawei")["hce2-snt9b-24.1.0.3"]  # the newest image with an NPU driver
    assert "the Lite Servers boot hce2-snt9b-24.1.0.3" in notes and booted.ami_name in notes
