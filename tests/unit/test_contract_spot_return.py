"""RULE: an evicted or reclaimed spot node comes back, on every cloud that rents spot capacity.

The README's "what survives what" promises that a lost node comes back and the queue resumes the job. On Azure a
spot VM was evicted to Deallocate with no restore, and `up` did not start it: the pool stayed short for good. Each
cloud declares how its spot nodes return (Cloud.spot_return); this holds every registered cloud with
Capability.SPOT, on every shipped stack made spot, to one of:
- the cloud restores the node itself, by a setting the planned resources of the pool carry (a literal anchor per
  known cloud: Azure's scale set spotRestorePolicy enabled, AWS's persistent request with interruption behaviour
  stop);
- `up` starts it: the cloud's before_up, told by faked cloud answers that a node of the stack is stopped, starts it;
- `up` recreates it: the node is one resource of its own (a node type), so the refresh `up` runs first drops a node
  the cloud deleted and the program declares it again.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

import goldenenv.clouds  # noqa: F401  (registers the clouds)
from goldenenv import stackconfig
from goldenenv.clouds import base
from goldenenv.plan import plan_config

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
RESTORE_ANCHORS = {
    "azure": ("azure-native:compute:VirtualMachineScaleSet", "spotRestorePolicy.enabled", True),
    "aws": ("aws:ec2/launchTemplate:LaunchTemplate", "instanceMarketOptions.spotOptions.instanceInterruptionBehavior",
            "stop"),
}
"""The settings with which the cloud restores a node itself (learn.microsoft.com use-spot "Try & restore";
EC2 User Guide "Stop interrupted Spot Instances")."""
UP_STARTS_EXPECTED = {"gcp", "azure"}
"""Clouds that leave an evicted node stopped in place (GCP: instanceTerminationAction STOP; Azure: Deallocate)."""


def cloud_of(path: Path) -> str:
    return stackconfig.read_stack_file(path)["goldenenv:cloud"]


SPOT_CLOUDS = [n for n in base.names() if base.get(n).uses_pulumi and base.Capability.SPOT in base.get(n).capabilities]
SHIPPED = sorted((cloud_of(p), p.name.removeprefix("Pulumi.").removesuffix(".yaml"))
                 for p in STACKS.glob("Pulumi.*.yaml") if cloud_of(p) in SPOT_CLOUDS)


def spot_config(stack: str) -> dict:
    """The shipped stack with every pool on spot capacity, as a user would write it."""
    config = copy.deepcopy(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
    nodes = config["goldenenv:nodes"]
    for pool in nodes if isinstance(nodes, list) else [nodes]:
        pool["capacity"] = "spot"
        for key in ("capacityFallback", "capacityReservationId"):
            pool.pop(key, None)
    return config


def value_at(props: dict, path: str):
    for step in path.split("."):
        props = props.get(step) if isinstance(props, dict) else None
    return props


class FakeStopped:
    """The cloud's answers: these nodes of the stack are stopped; `start` records what `up` asks to start."""

    def __init__(self, names: list[str]):
        self.names, self.started = names, []

    def stopped(self) -> list[str]:
        return [n for n in self.names if n not in self.started]

    def start(self, names: list[str]) -> None:
        self.started += names


@pytest.mark.parametrize("cloud", SPOT_CLOUDS)
def test_every_spot_cloud_ships_a_stack_to_hold_to_the_rule(cloud):
    assert any(c == cloud for c, _ in SHIPPED), f"{cloud} ships no stack"


@pytest.mark.parametrize(("cloud", "stack"), SHIPPED)
def test_an_evicted_spot_node_comes_back(cloud, stack):
    result = plan_config(stack, spot_config(stack))
    spec, provider = result.spec, base.get(cloud)
    for pool in spec.nodes:
        back = provider.spot_return(spec, pool)
        assert back.ways, f"{cloud} {stack} {pool.name}: an evicted spot node never comes back"
        if base.SpotBack.CLOUD in back.ways:
            kind, path, value = back.setting
            if cloud in RESTORE_ANCHORS:
                assert back.setting == RESTORE_ANCHORS[cloud]
            carrying = [r for r in result.resources if r.type == kind and value_at(r.props, path) == value]
            assert carrying, f"{stack} {pool.name}: no {kind} plans {path} = {value!r}"
        if base.SpotBack.UP_STARTS in back.ways:
            stopped = FakeStopped([f"{pool.name}-evicted", f"{pool.name}-other"])
            provider.before_up(spec, lambda m: None, provider.offline_lookup(spec), nodes=stopped)
            assert stopped.started == stopped.names, f"{stack}: up started {stopped.started}"
        if back.ways == (base.SpotBack.UP_RECREATES,):
            node_types = provider.node_updates.node_types
            nodes = [r for r in result.resources if r.type in node_types]
            assert len(nodes) >= pool.count, f"{stack}: {pool.name}'s nodes are not resources of their own"
    if cloud in UP_STARTS_EXPECTED:
        assert any(base.SpotBack.UP_STARTS in provider.spot_return(spec, p).ways for p in spec.nodes)


@pytest.mark.parametrize("cloud", sorted(UP_STARTS_EXPECTED & set(SPOT_CLOUDS)))
def test_up_starts_nothing_when_nothing_is_stopped_and_says_what_it_starts(cloud):
    stack = next(s for c, s in SHIPPED if c == cloud)
    spec = plan_config(stack, spot_config(stack)).spec
    provider, said = base.get(cloud), []
    idle = FakeStopped([])
    provider.before_up(spec, said.append, provider.offline_lookup(spec), nodes=idle)
    assert idle.started == [] and not [m for m in said if "starting" in m]
    evicted = FakeStopped(["gpu-1"])
    provider.before_up(spec, said.append, provider.offline_lookup(spec), nodes=evicted)
    assert evicted.started == ["gpu-1"] and any("gpu-1" in m for m in said)


def test_azure_up_finds_deallocated_vms_by_their_power_state_and_starts_them_by_instance_id():
    """ARM's answers as Microsoft documents them (VMSS VMs - List with $expand=instanceView; VirtualMachines - List
    with statusOnly): one evicted node and the head deallocated, one node running."""
    from goldenenv.clouds.azure.stopped import LiveStoppedNodes

    def vm(instance: str, state: str) -> dict:
        return {"instanceId": instance, "properties": {"instanceView": {"statuses": [
            {"code": "ProvisioningState/succeeded"}, {"code": f"PowerState/{state}"}]}}}

    calls = []

    def rest(method, url, token, body=None):
        calls.append((method, url.split("?")[0].rsplit("/providers/Microsoft.Compute/", 1)[-1], body))
        if method == "POST":
            return {}
        if url.split("?")[0].endswith("/virtualMachineScaleSets"):
            return {"value": [{"name": "gpu"}]}
        if "/virtualMachineScaleSets/gpu/virtualMachines" in url:
            assert "%24expand=instanceView" in url
            return {"value": [vm("0", "running"), vm("1", "deallocated")]}
        return {"value": [{"name": "head", "properties": {"instanceView": {"statuses": [
            {"code": "PowerState/deallocated"}]}}}]}

    nodes = LiveStoppedNodes("sub", "rg-demo", token_fn=lambda: "t", rest=rest)
    assert nodes.stopped() == ["gpu/1", "head"]
    nodes.start(["gpu/1", "head"])
    assert ("POST", "virtualMachineScaleSets/gpu/start", {"instanceIds": ["1"]}) in calls
    assert ("POST", "virtualMachines/head/start", None) in calls


def test_gcp_up_finds_the_stacks_terminated_instances_in_every_zone_and_starts_them():
    from goldenenv.clouds.gcp.stopped import LiveStoppedNodes

    calls = []

    def rest(method, url, token, body=None):
        calls.append((method, url))
        if method == "POST":
            return {}
        assert "labels.goldenenv_stack" in url.replace("%", "").replace("2E", ".") or "goldenenv_stack" in url
        return {"items": {"zones/us-central1-a": {"instances": [
            {"name": "demo-gpu-0", "status": "RUNNING", "zone": ".../zones/us-central1-a"},
            {"name": "demo-gpu-1", "status": "TERMINATED", "zone": ".../zones/us-central1-a"}]},
            "zones/us-east1-b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}}}}

    nodes = LiveStoppedNodes("my-project", "team", "demo", token_fn=lambda: "t", rest=rest)
    assert nodes.stopped() == ["demo-gpu-1"]
    nodes.start(["demo-gpu-1"])
    assert calls[-1] == ("POST", "https://compute.googleapis.com/compute/v1/projects/my-project/zones/us-central1-a/"
                                 "instances/demo-gpu-1/start")


def test_a_cloud_that_will_not_start_a_node_now_does_not_stop_up():
    """No capacity yet for an evicted spot node: `up` says so and goes on (the next up tries again)."""

    class NoCapacity(FakeStopped):
        def start(self, names):
            raise base.CloudApiError(409, "Allocation failed. We do not have sufficient capacity", "AllocationFailed")

    said = []
    assert base.start_stopped(NoCapacity(["gpu/1"]), said.append) == []
    assert any("AllocationFailed" in m and "tries again" in m for m in said)
