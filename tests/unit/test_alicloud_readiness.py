"""Deploy readiness on Alibaba Cloud (`plan --strict`): each rule catches a resource the API would refuse at `up`,
and the shipped stacks pass every rule."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import pytest

from goldenenv import stackconfig
from goldenenv.clouds.alicloud import readiness
from goldenenv.guardrails import Context, PlannedResource, Severity
from goldenenv.plan import plan, plan_config, stack_file

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
INSTANCE = "alicloud:ecs/instance:Instance"
FILE_SYSTEM = "alicloud:nas/fileSystem:FileSystem"
DATA_FLOW = "alicloud:nas/dataFlow:DataFlow"


def resource(type_token: str, name: str = "r", id: str | None = None, **props) -> PlannedResource:
    return PlannedResource(urn=f"urn:pulumi:s::goldenenv::{type_token}::{name}", type=type_token, name=name,
                           props=props, id=id)


def findings(*resources: PlannedResource, rule: str) -> list[str]:
    return [f.message for f in readiness.findings(list(resources), {}) if f.rule == rule]


def nested(path: str, value) -> dict:
    head, _, rest = path.partition(".")
    return {head: nested(rest, value) if rest else value}


@pytest.mark.parametrize("stack", ["alicloud-ebmgn8v-2node", "alicloud-gn7i-dev"])
def test_the_shipped_stacks_pass_every_readiness_rule(stack):
    result = plan(stack, strict=True)
    strict = [f for f in result.findings if f.rule.startswith("strict:")]
    assert strict == [], [f.message for f in strict]
    assert not result.failed


# ---------------------------------------------------------------- strict:alicloud-enum

@pytest.mark.parametrize("type_token,path", sorted(readiness.ENUMS), ids=lambda v: v.rsplit(":", 1)[-1])
def test_a_value_the_provider_does_not_document_is_caught(type_token, path):
    bad = resource(type_token, **nested(path, "Bogus-Value"))
    (message,) = findings(bad, rule="strict:alicloud-enum")
    assert f"{path}='Bogus-Value'" in message and "not a value pulumi-alicloud takes" in message
    good = resource(type_token, **nested(path, sorted(readiness.ENUMS[(type_token, path)])[0]))
    assert findings(good, rule="strict:alicloud-enum") == []


@pytest.mark.parametrize("type_token,path,typo", [
    (INSTANCE, "networkInterfaceTrafficMode", "HighPerfomance"),
    (INSTANCE, "networkInterfaces.networkInterfaceTrafficMode", "highperformance"),
    ("alicloud:ecs/ecsDeploymentSet:EcsDeploymentSet", "strategy", "Low_Latency"),
    (INSTANCE, "spotStrategy", "SpotAsPriceGO"),
    (FILE_SYSTEM, "fileSystemType", "CPFS"),
    (DATA_FLOW, "throughput", 800),
], ids=["eri", "secondary-eri", "set", "spot", "cpfs", "flow"])
def test_the_typos_that_matter_are_caught(type_token, path, typo):
    assert findings(resource(type_token, **nested(path, typo)), rule="strict:alicloud-enum")


def test_documented_values_the_stacks_use_are_accepted():
    """Literal anchors from the provider's docs (FACTS.md), so a wrong table row is caught."""
    assert {"HighPerformance"} <= readiness.ENUMS[(INSTANCE, "networkInterfaceTrafficMode")]
    assert "LowLatency" in readiness.ENUMS[("alicloud:ecs/ecsDeploymentSet:EcsDeploymentSet", "strategy")]
    assert "SpotAsPriceGo" in readiness.ENUMS[(INSTANCE, "spotStrategy")]
    assert {"cpfs", "extreme"} <= readiness.ENUMS[(FILE_SYSTEM, "fileSystemType")]
    assert readiness.ENUMS[(DATA_FLOW, "throughput")] == {"600", "1200", "1500"}
    assert findings(resource(DATA_FLOW, throughput=1200.0), rule="strict:alicloud-enum") == []  # engine float


# ---------------------------------------------------------------- strict:nas-file-system-kind

@pytest.mark.parametrize("props", [
    {"fileSystemType": "extreme", "protocolType": "NFS", "storageType": "advance_100"},
    {"fileSystemType": "cpfs", "protocolType": "NFS", "storageType": "advance_100"},
    {"fileSystemType": "cpfs", "protocolType": "cpfs", "storageType": "advance"},
], ids=["extreme-with-a-cpfs-tier", "cpfs-over-nfs", "cpfs-with-an-extreme-tier"])
def test_a_protocol_or_tier_of_another_file_system_kind_is_caught(props):
    (message,) = findings(resource(FILE_SYSTEM, **props), rule="strict:nas-file-system-kind")
    assert f"a {props['fileSystemType']} file system" in message
    assert readiness.FILE_SYSTEM_KINDS["cpfs"]["storageType"] == {"advance_100", "advance_200"}


def test_matching_protocols_and_tiers_pass():
    for props in ({"fileSystemType": "cpfs", "protocolType": "cpfs", "storageType": "advance_200"},
                  {"fileSystemType": "extreme", "protocolType": "NFS", "storageType": "standard"}):
        assert findings(resource(FILE_SYSTEM, **props), rule="strict:nas-file-system-kind") == []


# ---------------------------------------------------------------- strict:cpfs-data-flow-throughput

def cpfs(storage_type: str, capacity: int) -> PlannedResource:
    return resource(FILE_SYSTEM, "d-cpfs", id="cpfs-1", fileSystemType="cpfs", protocolType="cpfs",
                    storageType=storage_type, capacity=capacity)


def test_a_data_flow_faster_than_its_file_system_is_caught_naming_what_to_change():
    flow = resource(DATA_FLOW, "d-dataflow", fileSystemId="cpfs-1", throughput=600)
    (message,) = findings(cpfs("advance_100", 4800), flow, rule="strict:cpfs-data-flow-throughput")
    assert "469 MB/s" in message  # 100 MB/s per TiB x 4800 GiB / 1024
    assert "goldenenv:storage.parallelFs.sizeGib above 6144 GiB" in message
    assert "goldenenv:storage.parallelFs.throughputPerTib: 200" in message and "above 3072 GiB" in message
    assert findings(cpfs("advance_200", 4800), flow, rule="strict:cpfs-data-flow-throughput") == []  # 937 MB/s
    assert findings(cpfs("advance_100", 6144), flow, rule="strict:cpfs-data-flow-throughput")  # equal: not below
    assert readiness.baseline_mb_s("advance_200", 4800) == pytest.approx(937.5)


def test_the_old_training_stack_fails_strict_and_its_fix_passes():
    config = stackconfig.read_stack_file(stack_file("alicloud-ebmgn8v-2node"))
    assert config["goldenenv:storage"]["parallelFs"] == {"sizeGib": 4800, "throughputPerTib": 200}
    old = copy.deepcopy(config)
    del old["goldenenv:storage"]["parallelFs"]["throughputPerTib"]  # advance_100, as first shipped
    result = plan_config("old", old, strict=True)
    (finding,) = [f for f in result.findings if f.rule == "strict:cpfs-data-flow-throughput"]
    assert finding.severity is Severity.ERROR and result.failed


# ---------------------------------------------------------------- strict:auto-release-time

def released(at: str, charge: str = "PostPaid") -> PlannedResource:
    return resource(INSTANCE, "gpu-0", instanceChargeType=charge, autoReleaseTime=at)


def auto_release(node: PlannedResource) -> list[str]:
    return list(readiness._check_auto_release(node, Context((node,), {}), now=NOW))


@pytest.mark.parametrize("at,charge,words", [
    ("2026-12-01 18:00:00", "PostPaid", "is not yyyy-MM-ddTHH:mm:ssZ"),
    ("2026-12-01T18:00:00+08:00", "PostPaid", "is not yyyy-MM-ddTHH:mm:ssZ"),
    ("2026-12-01T18:00:00Z", "PrePaid", "only pay-as-you-go"),
    ("2026-12-01T10:20:00Z", "PostPaid", "at least 30 min ahead"),
    ("2030-12-01T10:00:00Z", "PostPaid", "more than 1095 days"),
], ids=["no-t-or-z", "offset", "prepaid", "too-soon", "too-late"])
def test_an_auto_release_time_alibaba_refuses_is_caught(at, charge, words):
    (message,) = auto_release(released(at, charge))
    assert words in message


def test_an_auto_release_time_alibaba_takes_passes():
    assert auto_release(released("2026-12-01T18:00:00Z")) == []
    assert auto_release(resource(INSTANCE, instanceChargeType="PostPaid")) == []
