"""A GPU pool's host image is judged by its host layer: what it carries, what the host lock installs, what is missing.

The golden container needs Docker, the NVIDIA driver and the NVIDIA Container Toolkit on the host. Alibaba's public
Ubuntu image (the catalog's only Alibaba host image) has none of them: `up` of a shipped Alibaba stack used to
create two ebmgn8v nodes that could run nothing, then refused the stack until it named an image of its own. Now the
host lock's install step provides all three at first boot, at the lock's versions, and the lock's CUDA is checked
against the driver it installs. The stack's own hostImage {id, driver} is still its statement that the image has
them. The AWS Deep Learning Base OSS AMI carries the driver; the engine and toolkit are held at the host lock's.
"""

from __future__ import annotations

import pytest
import yaml

from goldenenv import catalog, compat
from goldenenv.images import host
from goldenenv.images.lock import load
from goldenenv.lifecycle import load_spec
from goldenenv.plan import STACKS, plan
from goldenenv.spec import HostImageOverride

ALIBABA = ["alicloud-ebmgn8v-2node", "alicloud-gn7i-dev"]
AWS = ["aws-g5-dev", "aws-p4d-4node-spot", "aws-p5-2node"]
OWN_IMAGE = {"id": "m-goldenenv0test0image", "driver": "570.133.20"}
GPU_NEEDS = (host.ENGINE, host.DRIVER, host.TOOLKIT)


def by_need(found: host.HostLayer) -> dict[str, host.Provided]:
    return {p.need: p for p in found.provided}


@pytest.mark.parametrize("stack", ALIBABA)
def test_the_public_image_gets_the_driver_engine_and_toolkit_from_the_host_lock(stack):
    spec = load_spec(stack)
    found = host.layer(spec, spec.nodes[0])
    lock = host.load_host(load(spec.image.lock).host)
    for need in GPU_NEEDS:
        p = by_need(found)[need]
        assert p.by == host.INSTALL and p.why == "the host image lacks it", p
        assert p.version == lock.components[p.component].version
    (checked,) = compat.check_stack(spec)
    assert checked.driver == lock.components[by_need(found)[host.DRIVER].component].version
    assert checked.driver_level == compat.driver_support(load(spec.image.lock).cuda, checked.driver).level
    assert not [c for c in checked.conflicts if c.rule == compat.HOST_LAYER and
                any(pin in c.pins for pin in (f"need={n}" for n in GPU_NEEDS))]


@pytest.mark.parametrize("stack", ALIBABA)
def test_a_stack_naming_its_own_image_states_what_it_carries(stack, tmp_path):
    doc = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    doc["config"]["goldenenv:nodes"]["hostImage"] = OWN_IMAGE
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    result = plan(stack, tmp_path, strict=True)
    assert not result.failed and [c.ok for c in result.compat] == [True]
    (checked,) = result.compat
    assert checked.driver == OWN_IMAGE["driver"] and not checked.layer.installs
    assert all(by_need(checked.layer)[n].by == host.IMAGE for n in GPU_NEEDS)


@pytest.mark.parametrize("stack", AWS)
def test_aws_stacks_run_the_amis_driver_and_the_host_locks_engine_and_toolkit(stack):
    spec = load_spec(stack)
    (checked,) = compat.check_stack(spec)
    image = catalog.host_image("aws", spec.region)
    assert checked.driver == image.nvidia_driver and checked.ok
    found = by_need(checked.layer)
    assert found[host.DRIVER].by == host.IMAGE
    lock = host.load_host(checked.layer.host_lock)
    for need in (host.ENGINE, host.TOOLKIT):  # the AMI's are not the pinned versions: the install holds them
        assert found[need].by == host.INSTALL and found[need].version == lock.components[found[need].component].version


# ---------------------------------------------------------------- the rule, pool by pool

def pools(stack: str, *host_images):
    spec = load_spec(stack)
    pool = spec.nodes[0]
    chosen = [pool.model_copy(update={"host_image": h}) for h in host_images]
    keys = [f"goldenenv:nodes[{i}]" for i in range(len(chosen))]
    return compat.check_pools(spec, load(spec.image.lock), chosen, keys)


def test_each_pool_is_judged_on_its_own_image_and_named_by_its_key():
    public, own = pools("alicloud-gn7i-dev", None, HostImageOverride(**OWN_IMAGE))
    assert public.layer.installs and public.host.image.name == "ubuntu-2204-uefi-20240807"
    assert not own.layer.installs and own.driver == OWN_IMAGE["driver"] and own.ok
    assert not [c for c in public.conflicts if c.rule == "host-driver-unknown"]


@pytest.mark.parametrize("carried, said, by", [
    ("none", "the host image lacks it", host.MISSING),
    ("", "the catalog does not say whether the host image has it", host.MISSING),
    ("installed", "", host.IMAGE),
])
def test_without_a_host_lock_component_only_what_the_catalog_states_is_the_images(carried, said, by):
    """Never assumed: an empty catalog cell is as missing as `none`."""
    (found,) = host.resolve([host.ENGINE], None, "ubuntu-22.04", lambda need: carried).provided
    assert found.by == by and (not said or found.why == said)


# ---------------------------------------------------------------- the catalog rows (literal anchors)

def test_the_catalog_says_what_each_host_image_carries():
    for image in catalog.host_images("aws").values():
        assert image.docker == "installed", image.name  # AWS DLAMI release notes: Docker, NVIDIA container toolkit
        assert image.container_toolkit not in ("", "none"), image.name
        assert image.nvidia_driver == "570.133.20", image.name
    assert catalog.host_images("aws")["dlami-base-oss-u22-20250523"].container_toolkit == "1.17.4"
    public = catalog.host_images("alicloud")["ubuntu-2204-uefi-20240807"]
    assert (public.nvidia_driver, public.docker, public.container_toolkit) == ("", "none", "none")
