"""A GPU pool whose host image cannot run the node's boot units is refused before anything is rented.

The golden container needs Docker, the NVIDIA driver and the NVIDIA Container Toolkit on the host. Alibaba's public
Ubuntu image (the catalog's only Alibaba host image) has none of them, so `up` of a shipped Alibaba stack used to
create two ebmgn8v nodes that could run nothing. Now `plan` shows the pool refused (a compat error, saying which
key to write and what), `up` refuses before Pulumi runs, and the stack's own hostImage {id, driver} - its statement
that the image has them - lifts the refusal. The AWS Deep Learning Base OSS AMI carries all three.
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from goldenenv import automation, catalog, compat
from goldenenv.images.lock import load
from goldenenv.lifecycle import load_spec
from goldenenv.plan import STACKS, plan
from goldenenv.spec import HostImageOverride

ALIBABA = ["alicloud-ebmgn8v-2node", "alicloud-gn7i-dev"]
AWS = ["aws-g5-dev", "aws-p4d-4node-spot", "aws-p5-2node"]
OWN_IMAGE = {"id": "m-goldenenv0test0image", "driver": "570.133.20"}
RULE = "compat:host-image"


class FakeStack:
    """An Automation API stack that records whether Pulumi was ever asked to create anything."""

    def __init__(self):
        self.calls: list[str] = []

    def up(self, **kwargs):
        self.calls.append("up")
        raise AssertionError("up reached Pulumi")

    def outputs(self):
        return {}


@pytest.mark.parametrize("stack", ALIBABA)
def test_up_refuses_a_gpu_pool_on_the_public_image_before_pulumi_runs(stack):
    spec, target = load_spec(stack), FakeStack()
    with pytest.raises(automation.LifecycleError) as refused:
        automation.up(spec, log=lambda m: None, target=target)
    assert target.calls == []
    message = str(refused.value)
    assert message.startswith("refused before anything is created")
    assert RULE in message and "goldenenv:nodes.hostImage" in message and "{id: <image id>, driver: " in message


@pytest.mark.parametrize("stack", ALIBABA)
def test_a_stack_naming_its_own_image_is_no_longer_refused_for_it(stack, tmp_path):
    doc = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    doc["config"]["goldenenv:nodes"]["hostImage"] = OWN_IMAGE
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    result = plan(stack, tmp_path, strict=True)
    assert not result.failed and [c.ok for c in result.compat] == [True]
    assert not [f for f in result.findings if f.rule == RULE]
    with pytest.raises(automation.LifecycleError) as refused:  # up still wants the pushed golden image
        automation.guard(load_spec(stack, tmp_path), creating=True, stacks_dir=tmp_path)
    assert RULE not in str(refused.value) and "image-unpublished" in str(refused.value)


@pytest.mark.parametrize("stack", AWS)
def test_aws_stacks_boot_an_image_with_driver_docker_and_toolkit(stack):
    result = plan(stack, strict=True)
    assert not [f for f in result.findings if f.rule == RULE]
    assert all(c.ok for c in result.compat)


@pytest.mark.parametrize("stack", ALIBABA)
def test_plan_shows_the_refusal_with_what_to_write(stack):
    """plan passes (a warning: the stack plans, priced, and says what to write); up is what refuses it."""
    result = plan(stack)
    (finding,) = [f for f in result.findings if f.rule == RULE]
    assert finding.severity.value == "warning" and not result.failed and "up refuses the pool" in finding.message
    assert "has no NVIDIA driver, Docker or NVIDIA Container Toolkit (catalog host_images.csv)" in finding.message
    lock = load(result.spec.image.lock)
    assert f">= {compat.min_driver(lock.cuda)} for cuda={lock.cuda}" in finding.message
    assert result.resources and result.lines  # the rest of the plan is all there
    (pool,) = result.compat
    assert "no NVIDIA driver" in pool.host.label


# ---------------------------------------------------------------- the rule, pool by pool

def pools(stack: str, *host_images):
    spec = load_spec(stack)
    pool = spec.nodes[0]
    chosen = [pool.model_copy(update={"host_image": h}) for h in host_images]
    keys = [f"goldenenv:nodes[{i}]" for i in range(len(chosen))]
    return compat.check_pools(load(spec.image.lock), spec.cloud, spec.region, chosen, keys)


def test_each_pool_is_judged_on_its_own_image_and_named_by_its_key():
    public, own = pools("alicloud-ebmgn8v-2node", None, HostImageOverride(**OWN_IMAGE))
    (conflict,) = [c for c in public.conflicts if c.rule == "host-image"]
    assert conflict.severity == compat.WARNING and "set goldenenv:nodes[0].hostImage to" in conflict.message
    assert conflict.pins == ("hostImage=ubuntu-2204-uefi-20240807", "instance=ecs.ebmgn8v.48xlarge")
    assert own.ok and not [c for c in own.conflicts if c.rule == "host-image"]
    assert not [c for c in public.conflicts if c.rule == "host-driver-unknown"]  # said once, as the error


def test_an_image_the_catalog_says_nothing_about_is_a_warning_not_a_refusal(monkeypatch):
    dlami = catalog.host_image("aws", "us-east-1")
    unknown = dataclasses.replace(dlami, docker="")
    monkeypatch.setattr(catalog, "host_image", lambda cloud, region, name=None: unknown)
    (checked,) = pools("aws-p5-2node", None)
    (conflict,) = [c for c in checked.conflicts if c.rule == "host-image-unknown"]
    assert conflict.severity == compat.WARNING and checked.ok
    assert "does not say whether host image" in conflict.message and "Docker" in conflict.message
    missing = dataclasses.replace(dlami, container_toolkit="none")
    monkeypatch.setattr(catalog, "host_image", lambda cloud, region, name=None: missing)
    (checked,) = pools("aws-p5-2node", None)
    assert [c.rule for c in checked.conflicts][-1] == "host-image"
    assert "has no NVIDIA Container Toolkit" in checked.conflicts[-1].message


# ---------------------------------------------------------------- the catalog rows (literal anchors)

def test_the_catalog_says_what_each_host_image_carries():
    for image in catalog.host_images("aws").values():
        assert image.docker == "installed", image.name  # AWS DLAMI release notes: Docker, NVIDIA container toolkit
        assert image.container_toolkit not in ("", "none"), image.name
        assert image.nvidia_driver == "570.133.20", image.name
    assert catalog.host_images("aws")["dlami-base-oss-u22-20250523"].container_toolkit == "1.17.4"
    public = catalog.host_images("alicloud")["ubuntu-2204-uefi-20240807"]
    assert (public.nvidia_driver, public.docker, public.container_toolkit) == ("", "none", "none")
