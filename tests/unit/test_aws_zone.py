"""A stack that names no zone gets the first zone, in name order, that sells every pool's type.

Not every zone sells a GPU type (p4d in us-west-2, g5.xlarge in us-east-1): taking the region's first zone put the
nodes where EC2 refuses them. The zone comes from EC2's instance type offerings; a zone the stack names is kept.
The offerings are the account's answer, so these tests give the plan's mocks the answers an account would.
"""

from __future__ import annotations

import pytest
import yaml

from goldenenv.clouds.aws import MOCK_ZONES, OFFERINGS_TOKEN, AwsCloud
from goldenenv.clouds.aws.basics import zone_selling
from goldenenv.plan import plan_config, stack_file
from goldenenv.spec import ConfigError

SUBNET = "aws:ec2/subnet:Subnet"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


def config(stack: str) -> dict:
    return yaml.safe_load(stack_file(stack).read_text())["config"]


@pytest.fixture
def offered(monkeypatch):
    """Make the offline plan's offerings those of an account where each type is sold only in the zones given;
    returns the filters the program asked with."""
    asked: list[list[dict]] = []
    sold: dict[str, tuple[str, ...]] = {}
    plain = AwsCloud.plan_call

    def plan_call(self, args):
        if args.token != OFFERINGS_TOKEN:
            return plain(self, args)
        asked.append(args.args.get("filters", []))
        assert args.args.get("locationType") == "availability-zone"
        wanted = [v for f in args.args.get("filters", []) if f["name"] == "instance-type" for v in f["values"]]
        pairs = [(t, zone) for t in wanted for zone in sold.get(t, MOCK_ZONES)]
        return {"instanceTypes": [t for t, _ in pairs], "locations": [z for _, z in pairs],
                "locationTypes": ["availability-zone"] * len(pairs)}

    monkeypatch.setattr(AwsCloud, "plan_call", plan_call)
    return sold, asked


def zones_used(result) -> set[str]:
    subnets = {r.props["availabilityZone"] for r in result.of_type(SUBNET)}
    templates = {r.props["placement"]["availabilityZone"] for r in result.of_type(LAUNCH_TEMPLATE)}
    return subnets | templates


def test_the_first_zone_that_sells_the_type_is_taken(offered):
    sold, asked = offered
    sold["g5.xlarge"] = ("mock-az-b",)  # mock-az-a, first by name, has no g5.xlarge
    result = plan_config("aws-g5-dev", config("aws-g5-dev"))
    assert zones_used(result) == {"mock-az-b"}
    assert asked == [[{"name": "instance-type", "values": ["g5.xlarge"]}]]


def test_every_pool_must_be_sold_in_the_zone(offered):
    sold, asked = offered
    cfg = config("aws-g5-dev")
    cfg["goldenenv:nodes"] = [{"name": "gpu", "instanceType": "g5.xlarge", "count": 1},
                              {"name": "big", "instanceType": "g6e.48xlarge", "count": 1}]
    sold["g5.xlarge"] = MOCK_ZONES
    sold["g6e.48xlarge"] = ("mock-az-b",)
    result = plan_config("aws-g5-dev", cfg)
    assert zones_used(result) == {"mock-az-b"}
    assert asked == [[{"name": "instance-type", "values": ["g5.xlarge", "g6e.48xlarge"]}]]


def test_no_zone_selling_the_type_is_an_error_naming_the_key(offered):
    sold, _ = offered
    sold["g5.xlarge"] = ()
    with pytest.raises(ConfigError, match=r"goldenenv:zone: no availability zone of us-east-1 sells g5\.xlarge"):
        plan_config("aws-g5-dev", config("aws-g5-dev"))


def test_a_zone_the_stack_names_is_kept(offered):
    sold, asked = offered
    sold["p5.48xlarge"] = ("mock-az-b",)
    result = plan_config("aws-p5-2node", config("aws-p5-2node"))
    assert zones_used(result) == {"us-east-1a"}
    assert asked == []


def test_plan_says_how_up_picks_the_zone():
    result = plan_config("aws-g5-dev", config("aws-g5-dev"))
    notes = [f.message for f in result.findings if f.rule == "plan-note" and "no zone set" in f.message]
    assert len(notes) == 1 and "g5.xlarge" in notes[0] and "DescribeInstanceTypeOfferings" in notes[0]


def test_zone_selling_reads_the_offerings_as_ec2_lists_them():
    offerings = [("p4d.24xlarge", "us-west-2b"), ("p4d.24xlarge", "us-west-2c"), ("g5.xlarge", "us-west-2a"),
                 ("g5.xlarge", "us-west-2c")]
    zones = ["us-west-2d", "us-west-2c", "us-west-2b", "us-west-2a"]
    assert zone_selling("us-west-2", ["p4d.24xlarge"], zones, offerings) == "us-west-2b"
    assert zone_selling("us-west-2", ["g5.xlarge", "p4d.24xlarge"], zones, offerings) == "us-west-2c"
    # a zone that sells the type but is not an available zone of the account (impaired, a Local Zone) is skipped
    assert zone_selling("us-west-2", ["p4d.24xlarge"], ["us-west-2c"], offerings) == "us-west-2c"
    with pytest.raises(ConfigError, match=r"p4d\.24xlarge in us-west-2b, us-west-2c; g6e\.48xlarge in no zone"):
        zone_selling("us-west-2", ["p4d.24xlarge", "g6e.48xlarge"], zones, offerings)
