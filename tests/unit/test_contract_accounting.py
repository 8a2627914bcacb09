"""Every shipped Slurm stack, whatever its cloud, keeps Slurm accounting as issue 41 asks: slurm.conf sends every job
to slurmdbd, enforces associations and limits, counts its nodes' accelerators as the TRES the team's limits use, and
ranks the queue by fair share with usage reset monthly; the team file's cluster line is the budget in GPU-minutes.

Literal anchors: an Ascend stack counts `gres/npu`, a GPU stack `gres/gpu`; aws-p5-2node's 40,000 USD a month at
p5.48xlarge's catalog price (55.04 USD an hour for 8 GPUs: 6.88 a GPU-hour) is 348,837 GPU-minutes.
"""

from __future__ import annotations

import pytest

from goldenenv import lifecycle, stackconfig, team
from goldenenv.slurm import config
from shipped import STACKS

SLURM_STACKS = sorted(
    path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in STACKS.glob("Pulumi.*.yaml")
    if stackconfig.read_stack_file(path).get("goldenenv:scheduler", "slurm") == "slurm")
ANCHORS = {"huawei-snt9b-2node": "gres/npu", "aws-p5-2node": "gres/gpu", "local": "gres/gpu"}


def conf_lines(stack: str) -> dict[str, str]:
    rendered = config.render_conf(lifecycle.load_spec(stack), slurmd_timeout=30)
    return dict(line.split("=", 1) for line in rendered.splitlines() if "=" in line and not line.startswith("#"))


def test_the_anchored_stacks_are_shipped_slurm_stacks():
    assert set(ANCHORS) <= set(SLURM_STACKS)


@pytest.mark.parametrize("stack", SLURM_STACKS)
def test_every_job_is_accounted_and_held_to_the_teams_limits(stack):
    conf = conf_lines(stack)
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert set(conf["AccountingStorageEnforce"].split(",")) >= {"associations", "limits"}, \
        "a job needs an association, and GPU-minute limits hold it PENDING"
    assert "safe" not in conf["AccountingStorageEnforce"].split(","), \
        "`safe` would hold every job without --time forever under a GPU-minute limit"
    assert conf["PriorityType"] == "priority/multifactor" and int(conf["PriorityWeightFairshare"]) > 0
    assert (conf["PriorityDecayHalfLife"], conf["PriorityUsageResetPeriod"]) == ("0", "MONTHLY"), \
        "GPU-hours are per calendar month: usage not decayed, reset monthly"
    tres = team.tres(lifecycle.load_spec(stack))
    assert conf["AccountingStorageTRES"].split(",")[0] == tres
    if stack in ANCHORS:
        assert tres == ANCHORS[stack]
    cluster_line = team.team_file(lifecycle.load_spec(stack)).splitlines()[-1].split("\t")
    assert cluster_line[0] == "cluster" and cluster_line[2] == tres


def test_the_budget_is_the_clusters_gpu_minutes_at_the_catalogs_price():
    line = team.team_file(lifecycle.load_spec("aws-p5-2node")).splitlines()[-1]
    assert line == "cluster\t348837\tgres/gpu"
    assert team.team_file(lifecycle.load_spec("local")).splitlines()[-1] == "cluster\t-\tgres/gpu", \
        "the local stack has no budget, so no cluster-wide limit"
