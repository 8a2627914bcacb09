"""The emulated hosts' hardware is healthy by the very rules a real node is judged by: for every shipped cloud
stack, the evidence its stand-ins give the health check (stand_ins.healthy_evidence) is judged healthy, and one
change to it (a GPU or an NPU gone) is not. Fast: no host is booted."""

from __future__ import annotations

import pytest

import emulated_stack
import stand_ins
from goldenenv import catalog
from goldenenv.catalog import health
from goldenenv.health import judge
from goldenenv.lifecycle import load_spec
from goldenenv.plan import STACKS

CLOUD_STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS.glob("Pulumi.*.yaml")
                      if not p.name.endswith(".local.yaml"))


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_the_emulated_hardware_of_every_cloud_stack_is_healthy(stack):
    spec = load_spec(stack)
    it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
    expect = health.pool_expectations(spec.cloud, it.name, spec.nodes[0].rdma)
    evidence = emulated_stack.healthy_hardware(spec, it)
    assert judge.judge(evidence, expect, health.rules_document(), stack) == []
    if expect.get("npus"):  # an Ascend node: its family's judge counts the NPUs npu-smi lists
        first_gone = {**evidence, "npu_smi_info.txt": stand_ins.npu_smi_info(range(1, expect["npus"]))}
        rule = "npu_count_below_expected"
    else:
        first_gone = {**evidence, "nvidia_smi_gpus.csv": "".join(evidence["nvidia_smi_gpus.csv"].splitlines(True)[1:])}
        rule = "gpu_count_below_expected"
    assert any(f.rule == rule for f in judge.judge(first_gone, expect, health.rules_document(), stack))
    assert set(stand_ins.files(name="h", rootfs="/r", sharedfs=None, nvme=None, erdma=0, gpus=it.gpu_count,
                               nvidia_smi="", health=evidence)) >= {f"{stand_ins.HEALTH}/{f}" for f in evidence}
