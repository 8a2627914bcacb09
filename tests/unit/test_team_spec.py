"""The team in the stack file as the cluster gets it: the team file's exact lines, and applying it through the head.

The keys are literal anchors made with OpenSSH's ssh-keygen (`ssh-keygen -t ed25519`). GPU-minutes are written as
literals worked out by hand from the catalog's price rows: p5.48xlarge on demand in us-east-1 is 55.04 USD an hour
for 8 GPUs, 6.88 USD a GPU-hour, so the aws-p5-2node stack's 40,000 USD a month is 40000 / 6.88 × 60 = 348,837.2
GPU-minutes, 348,837 whole; the Ascend stack's 400,000 CNY at 278 CNY for 8 NPUs (34.75 an NPU-hour) is
690,647.5, 690,647 whole.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from goldenenv import stackconfig, team
from goldenenv.jobs import Head, HeadError
from goldenenv.plan import stack_file
from goldenenv.spec import ClusterSpec

ANA = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGEhfSCwdLS+PsA85JJ0R3K4AKe7O95iEZi6nUCSmSpo ana@laptop"
BO = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0HOmTpAwnC3YWGawvrGG9I4E6gjDExUn7CmANLRChL bo@desk"
TWO = [{"name": "ana", "uid": 2001, "sshPublicKey": ANA, "gpuHours": 100},
       {"name": "bo", "uid": 2002, "sshPublicKey": "  " + BO + "\n", "gpuHours": "none", "share": 3}]


def spec_of(stack: str, members: list[dict[str, Any]], **changes: Any) -> ClusterSpec:
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    config["goldenenv:team"] = copy.deepcopy(members)
    config.update({f"goldenenv:{k}": v for k, v in changes.items()})
    values, unknown = stackconfig.namespaced({k: v for k, v in config.items() if v is not None})
    return stackconfig.load(stack, values, unknown)


def test_a_two_member_team_file_with_the_budget_as_a_cluster_wide_gpu_minute_limit():
    spec = spec_of("aws-p5-2node", TWO)
    assert team.team_file(spec) == (
        f"member\tana\t2001\t1\t6000\t{ANA}\n"
        f"member\tbo\t2002\t3\t-\t{BO}\n"
        "cluster\t348837\tgres/gpu\n")
    assert team.team_path(spec) == "/fsx/jobs/.goldenenv/team.tsv"
    assert team.applied_path(spec) == "/fsx/jobs/.goldenenv/team.applied"


def test_without_a_budget_the_cluster_line_has_no_limit():
    spec = spec_of("aws-p5-2node", TWO, budget="none")
    assert team.team_file(spec).splitlines()[-1] == "cluster\t-\tgres/gpu"


def test_an_ascend_stack_limits_npu_minutes():
    spec = spec_of("huawei-snt9b-2node", TWO[:1])
    assert team.team_file(spec) == f"member\tana\t2001\t1\t6000\t{ANA}\ncluster\t690647\tgres/npu\n"


def test_the_local_stack_keeps_the_file_on_its_data_volume_and_an_empty_team_still_sets_the_cluster_line():
    spec = spec_of("local", [])
    assert spec.team == []
    assert team.team_file(spec) == "cluster\t-\tgres/gpu\n"
    assert team.team_path(spec) == "/data/jobs/.goldenenv/team.tsv"


@pytest.mark.parametrize("hours, minutes", [(2.5, "150"), (0.1, "6"), (0.001, "1"), (1000000, "60000000")])
def test_gpu_hours_become_whole_minutes_and_never_zero(hours, minutes):
    spec = spec_of("local", [{**TWO[0], "gpuHours": hours}])
    assert team.team_file(spec).splitlines()[0].split("\t")[4] == minutes


class FakeHead(Head):
    """A head whose goldenenv-team loop answers with `marker(text)` once the team file is written."""

    def __init__(self, marker=None):
        self.files: dict[str, bytes] = {}
        self.calls: list[list[str]] = []
        self.marker = marker

    def run(self, argv: list[str]) -> tuple[int, str]:
        self.calls.append(argv)
        if argv[0] == "mkdir":
            return 0, ""
        if argv[0] == "cat" and argv[1] in self.files:
            return 0, self.files[argv[1]].decode()
        return 1, f"cat: {argv[-1]}: No such file or directory"

    def write(self, path: str, data: bytes) -> None:
        assert ["mkdir", "-p", path.rsplit("/", 1)[0]] in self.calls, "the folder is made before the file"
        self.files[path] = data
        if self.marker is not None:
            self.files[path.replace("team.tsv", "team.applied")] = self.marker(data).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_apply_writes_the_file_and_returns_the_heads_message_once_it_names_this_file():
    spec = spec_of("local", TWO)
    head = FakeHead(lambda data: f"{_sha(data)}\tok\t2 members, limits set\n")
    assert team.apply(head, spec, timeout=5, poll=0.01) == "2 members, limits set"
    assert head.files["/data/jobs/.goldenenv/team.tsv"] == team.team_file(spec).encode()


def test_apply_raises_the_heads_error():
    head = FakeHead(lambda data: f"{_sha(data)}\terror\tsacctmgr: slurmdbd is not answering\n")
    with pytest.raises(HeadError, match="could not apply the team: sacctmgr: slurmdbd is not answering"):
        team.apply(head, spec_of("local", TWO), timeout=5, poll=0.01)


@pytest.mark.parametrize("marker", [None, lambda data: f"{'0' * 64}\tok\tan earlier file\n"],
                         ids=["no marker", "an earlier file's marker"])
def test_a_head_that_has_not_applied_this_file_times_out_saying_where_to_look(marker):
    with pytest.raises(HeadError) as caught:
        team.apply(FakeHead(marker), spec_of("local", TWO), timeout=0.05, poll=0.01)
    said = str(caught.value)
    assert "did not apply the team file within 0.05 s" in said
    assert "docker logs goldenenv-local-head" in said


def test_a_cloud_head_says_to_read_the_golden_containers_log():
    with pytest.raises(HeadError, match="`docker logs goldenenv` on the head node"):
        team.apply(FakeHead(), spec_of("aws-p5-2node", TWO), timeout=0.01, poll=0.01)
