"""`goldenenv up` when the cloud has no capacity: the Automation API's up fails the way each cloud's recorded errors
say (tests/unit/captures/failover), `up` moves through the placements the stack allows, builds each attempt in its
placement (GOLDENENV_PLACEMENT, read by the program) and writes the one that worked into the user's stack file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from goldenenv import automation, catalog, project, stackconfig
from goldenenv.lifecycle import load_spec
from goldenenv.plan import plan

REPO = Path(__file__).resolve().parents[2]
CAPTURES = Path(__file__).parent / "captures" / "failover"


class UpFailed(Exception):
    """auto.CommandError: its str() is the failed up's text."""


class Workspace:
    def __init__(self):
        self.env_vars: dict[str, str] = {}


class CloudWithoutRoom:
    """An Automation API stack whose up fails at some placements: the program's placement is the stack file's,
    or GOLDENENV_PLACEMENT while `up` fails over (read from the workspace env, as the Pulumi CLI passes it on)."""

    def __init__(self, spec, failures: dict[tuple[str, str], str], outputs: dict | None = None):
        self.spec, self.failures, self._outputs = spec, failures, outputs or {}
        self.workspace = Workspace()
        self.tried: list[tuple[str, str]] = []

    def outputs(self):
        return {k: type("Out", (), {"value": v})() for k, v in self._outputs.items()}

    def up(self, on_output=None, refresh=None):
        placed = stackconfig.with_placement(
            {"zone": self.spec.placed_zone, "nodes": {"capacity": self.spec.nodes[0].capacity.value}},
            json.loads(self.workspace.env_vars.get(stackconfig.PLACEMENT_ENV, "null")))
        where = (placed["zone"], placed["nodes"]["capacity"])
        self.tried.append(where)
        if where in self.failures:
            raise UpFailed((CAPTURES / self.failures[where]).read_text())
        return type("Result", (), {"outputs": {}})()


@pytest.fixture
def infra(tmp_path, monkeypatch):
    """A project of the user's own: the stack file `up` writes back into is theirs, not the repository's."""
    root = tmp_path / "infra"
    (root / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    monkeypatch.setattr(automation, "guard", lambda spec, creating, **_: None)
    monkeypatch.setattr(automation, "_before_up", lambda spec, log: None)
    project.use(project.find(root))
    yield root
    project.use(None)


def user_stack(root: Path, stack: str, **changes) -> Path:
    text = (REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    path = root / "stacks" / f"Pulumi.{stack}.yaml"
    path.write_text(text)
    if changes:
        from ruamel.yaml import YAML

        yaml = YAML()
        doc = yaml.load(path.read_text())
        for key, value in changes.items():
            target, _, field = key.partition(".")
            if field:
                doc["config"][target][field] = value
            else:
                doc["config"][key] = value
        with path.open("w") as f:
            yaml.dump(doc, f)
    return path


def test_spot_everywhere_then_on_demand_and_the_stack_file_remembers(infra):
    path = user_stack(infra, "aws-p4d-4node-spot", **{"goldenenv:zones": ["us-west-2a", "us-west-2b"],
                                                      "goldenenv:nodes.capacityFallback": ["spot", "on-demand"]})
    spec = load_spec("aws-p4d-4node-spot")
    cloud = CloudWithoutRoom(spec, {("us-west-2a", "spot"): "aws_InsufficientInstanceCapacity_spot.txt",
                                    ("us-west-2b", "spot"): "aws_InsufficientInstanceCapacity_spot.txt"})
    lines: list[str] = []
    automation.up(spec, log=lines.append, target=cloud, sleep=lambda s: None)

    assert cloud.tried == [("us-west-2a", "spot"), ("us-west-2b", "spot"), ("us-west-2a", "on-demand")]
    assert sum("InsufficientInstanceCapacity (capacity)" in line for line in lines) == 2
    assert cloud.workspace.env_vars == {}  # the placement of an attempt does not outlive it
    recorded = stackconfig.read_stack_file(path)
    assert recorded["goldenenv:zone"] == "us-west-2a" and recorded["goldenenv:nodes"]["capacity"] == "on-demand"
    assert "found capacity here" in path.read_text() and path.read_text().startswith("# Four p4d.24xlarge")

    # the next up, and a plain `pulumi up`, read the stack file: they build where capacity was found
    again = CloudWithoutRoom(load_spec("aws-p4d-4node-spot"), {}, outputs={"bucket": "b"})
    automation.up(load_spec("aws-p4d-4node-spot"), log=lambda m: None, target=again)
    assert again.tried == [("us-west-2a", "on-demand")] and again.workspace.env_vars == {}


def test_a_vcpu_quota_stops_with_the_quota_code_and_the_vcpus_needed(infra):
    user_stack(infra, "aws-p4d-4node-spot", **{"goldenenv:zones": ["us-west-2a", "us-west-2b"],
                                               "goldenenv:nodes.capacity": "on-demand"})
    spec = load_spec("aws-p4d-4node-spot")
    cloud = CloudWithoutRoom(spec, {("us-west-2a", "on-demand"): "aws_VcpuLimitExceeded.txt"})
    with pytest.raises(automation.LifecycleError) as stopped:
        automation.up(spec, log=lambda m: None, target=cloud, sleep=lambda s: None)
    quota = catalog.vcpu_quota("p4d.24xlarge", "on-demand")
    vcpus = 4 * catalog.instance_type("aws", "p4d.24xlarge").vcpus
    message = str(stopped.value)
    assert cloud.tried == [("us-west-2a", "on-demand")]  # a regional quota: no other zone helps
    assert quota.code in message and str(vcpus) in message and "L-417A185B" in message


def test_a_fatal_error_stops_at_once_and_the_stack_file_is_left_alone(infra):
    path = user_stack(infra, "aws-p4d-4node-spot", **{"goldenenv:zones": ["us-west-2a", "us-west-2b"]})
    before = path.read_text()
    spec = load_spec("aws-p4d-4node-spot")
    cloud = CloudWithoutRoom(spec, {("us-west-2a", "spot"): "aws_InvalidParameterValue.txt"})
    with pytest.raises(automation.LifecycleError, match="InvalidParameterValue"):
        automation.up(spec, log=lambda m: None, target=cloud, sleep=lambda s: None)
    assert cloud.tried == [("us-west-2a", "spot")] and path.read_text() == before


def test_a_cluster_that_exists_keeps_its_zone_and_only_changes_capacity(infra):
    user_stack(infra, "aws-p4d-4node-spot", **{"goldenenv:zones": ["us-west-2a", "us-west-2b"],
                                               "goldenenv:zone": "us-west-2a",
                                               "goldenenv:nodes.capacityFallback": ["spot", "on-demand"]})
    spec = load_spec("aws-p4d-4node-spot")
    cloud = CloudWithoutRoom(spec, {("us-west-2a", "spot"): "aws_InsufficientInstanceCapacity_spot.txt"},
                             outputs={"bucket": "b", "fileSystemId": "fs-0123"})
    lines: list[str] = []
    automation.up(spec, log=lines.append, target=cloud, sleep=lambda s: None)
    assert cloud.tried == [("us-west-2a", "spot"), ("us-west-2a", "on-demand")]
    assert any("tries only that zone" in line for line in lines)


def test_alibaba_moves_to_the_next_zone_when_one_is_sold_out(infra):
    path = user_stack(infra, "alicloud-ebmgn8v-2node",
                      **{"goldenenv:zones": ["cn-wulanchabu-c", "cn-wulanchabu-b"]})
    spec = load_spec("alicloud-ebmgn8v-2node")
    cloud = CloudWithoutRoom(spec, {("cn-wulanchabu-c", "on-demand"): "alicloud_OperationDenied.NoStock.txt"})
    automation.up(spec, log=lambda m: None, target=cloud, sleep=lambda s: None)
    assert cloud.tried == [("cn-wulanchabu-c", "on-demand"), ("cn-wulanchabu-b", "on-demand")]
    assert stackconfig.read_stack_file(path)["goldenenv:zone"] == "cn-wulanchabu-b"


def test_plan_prints_the_order_up_would_try(infra):
    user_stack(infra, "aws-p4d-4node-spot", **{"goldenenv:zones": ["us-west-2a", "us-west-2b"],
                                               "goldenenv:nodes.capacityFallback": ["spot", "on-demand"]})
    notes = [f.message for f in plan("aws-p4d-4node-spot").findings if f.rule == "plan-note"]
    (order,) = [n for n in notes if n.startswith("capacity: up tries")]
    assert order.index("1. us-west-2a: gpu spot") < order.index("2. us-west-2b: gpu spot") \
        < order.index("3. us-west-2a: gpu on-demand") < order.index("4. us-west-2b: gpu on-demand")
    (prices,) = [n for n in notes if n.startswith("gpu: 4 × p4d.24xlarge cost")]
    on_demand = catalog.price("aws", "p4d.24xlarge", "us-west-2").usd_per_hour * 4
    assert f"on-demand ${on_demand:,.2f}/h" in prices and "the budget gate judges the dearest" in prices
