"""Where a stack may go and where it is: `goldenenv:zones` and a pool's `capacityFallback` (what `up` may try), the
placement one attempt builds in (GOLDENENV_PLACEMENT), and the place `up` found, written back into the stack file
with its comments kept, so later runs and a plain `pulumi up` stay there."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from goldenenv import stackconfig
from goldenenv.plan import plan_config, stack_file
from goldenenv.spec import ConfigError

LT = "aws:ec2/launchTemplate:LaunchTemplate"
SUBNET = "aws:ec2/subnet:Subnet"


def values(stack: str = "aws-p4d-4node-spot", **top) -> dict:
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    plain = {k.removeprefix("goldenenv:"): v for k, v in config.items() if k.startswith("goldenenv:")}
    return {**plain, **top}


def problems(**top) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as refused:
        stackconfig.load("s", values(**top))
    return [(p.key, p.message) for p in refused.value.problems]


def test_zones_and_fallback_read_as_the_order_up_may_try():
    spec = stackconfig.load("s", values(zones=["us-west-2b", "us-west-2a"], nodes={
        "instanceType": "p4d.24xlarge", "count": 4, "capacity": "spot", "capacityFallback": ["spot", "on-demand"]}))
    assert spec.zones == ["us-west-2b", "us-west-2a"] and spec.placed_zone == "us-west-2b"
    assert [c.value for c in spec.nodes[0].capacities] == ["spot", "on-demand"]
    plain = stackconfig.load("s", values())
    assert plain.placed_zone is None and [c.value for c in plain.nodes[0].capacities] == ["spot"]


@pytest.mark.parametrize("top, key, words", [
    ({"zones": ["us-east-1a"]}, "goldenenv:zones[0]", "not in region 'us-west-2'"),
    ({"zones": ["us-west-2a", "us-west-2a"]}, "goldenenv:zones", "listed twice"),
    ({"zone": "us-west-2c", "zones": ["us-west-2a", "us-west-2b"]}, "goldenenv:zones", "is not in the list"),
    ({"nodes": {"instanceType": "p4d.24xlarge", "count": 4, "capacity": "on-demand", "capacityFallback": ["spot"]}},
     "goldenenv:nodes.capacityFallback", "'on-demand' is not in the list"),
    ({"nodes": {"instanceType": "p4d.24xlarge", "count": 4, "capacityFallback": ["on-demand", "on-demand"]}},
     "goldenenv:nodes.capacityFallback", "listed twice"),
    ({"nodes": {"instanceType": "p4d.24xlarge", "count": 4, "capacityFallback": ["on-demand", "capacity-block"]}},
     "goldenenv:nodes.capacityReservationId", "needs a reservation id"),
])
def test_bad_places_are_refused_naming_the_key(top, key, words):
    found = problems(**top)
    assert any(k.startswith(key.split("[")[0]) and words in m for k, m in found), found


def test_a_fallback_to_a_reservation_may_carry_its_id_while_on_demand():
    spec = stackconfig.load("s", values(nodes={"instanceType": "p4d.24xlarge", "count": 4, "capacity": "on-demand",
                                               "capacityFallback": ["capacity-reservation", "on-demand"],
                                               "capacityReservationId": "cr-0123456789abcdef0"}))
    assert spec.nodes[0].capacity.value == "on-demand"


def test_the_local_cloud_cannot_fail_over_between_zones():
    with pytest.raises(ConfigError) as refused:
        plan_config("local-zones", {**stackconfig.read_stack_file(stack_file("local")), "goldenenv:zones": ["locala"]})
    assert any(p.key == "goldenenv:zones" and "cannot provide zone-failover" in p.message
               for p in refused.value.problems)


def test_one_attempt_builds_in_the_placement_up_is_trying(monkeypatch):
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file("aws-p4d-4node-spot")))
    config["goldenenv:zones"] = ["us-west-2a", "us-west-2b"]
    config["goldenenv:nodes"]["capacityFallback"] = ["spot", "on-demand"]
    first = plan_config("failover", config)
    assert {s.props["availabilityZone"] for s in first.of_type(SUBNET)} == {"us-west-2a"}
    assert first.of_type(LT)[0].props["instanceMarketOptions"]["marketType"] == "spot"

    monkeypatch.setenv(stackconfig.PLACEMENT_ENV, json.dumps({"zone": "us-west-2b", "capacity": {"gpu": "on-demand"}}))
    moved = plan_config("failover", config)
    assert {s.props["availabilityZone"] for s in moved.of_type(SUBNET)} == {"us-west-2b"}
    assert "instanceMarketOptions" not in moved.of_type(LT)[0].props


def test_the_place_up_found_is_written_back_keeping_the_files_comments(tmp_path):
    path = tmp_path / "Pulumi.aws-p4d-4node-spot.yaml"
    shutil.copy(stack_file("aws-p4d-4node-spot"), path)
    before = path.read_text()
    stackconfig.record_placement(path, "us-west-2b", {"gpu": "on-demand"}, "found by up: us-west-2a had none")
    stackconfig.record_placement(path, "us-west-2c", {"gpu": "spot"}, "found by up: second try")
    after = path.read_text()
    assert before.splitlines()[0] in after  # the file's own comment
    assert after.count("found by up") == 1 and "goldenenv:zone: us-west-2c  # found by up: second try" in after
    config = stackconfig.read_stack_file(path)
    assert config["goldenenv:zone"] == "us-west-2c" and config["goldenenv:nodes"]["capacity"] == "spot"
    assert {k: v for k, v in config.items() if k != "goldenenv:zone"} == \
        {**stackconfig.read_stack_file(stack_file("aws-p4d-4node-spot")), "goldenenv:nodes": config["goldenenv:nodes"]}


def test_a_list_of_pools_takes_each_named_pools_capacity():
    placed = stackconfig.with_placement(
        {"zone": "a", "nodes": [{"name": "big", "capacity": "spot"}, {"name": "small"}, {"capacity": "spot"}]},
        {"zone": "b", "capacity": {"big": "on-demand", "gpu": "on-demand"}})
    assert placed == {"zone": "b", "nodes": [{"name": "big", "capacity": "on-demand"}, {"name": "small"},
                                            {"capacity": "on-demand"}]}
