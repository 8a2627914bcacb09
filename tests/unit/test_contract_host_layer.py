"""Every shipped stack's hosts get what the golden container needs beneath it, and `up` refuses a pool whose hosts
would not, before anything is rented.

Per pool the host layer (goldenenv.images.host) says who provides each need: the host image (as the catalog says
it is), the host lock's install step at first boot, or an image `goldenenv host-image build` baked. As shipped,
every stack passes up's offline checks with the install at first boot, and again with a baked image recorded (the
nodes then boot it and install nothing). A need that neither the image is known to carry nor the host lock
provides is refused naming it, also when the catalog does not know (never assumed), and a component whose driver
requirement the node's driver misses is refused naming both pins.
"""

from __future__ import annotations

import dataclasses
import json

import pulumi
import pytest
import shipped
import yaml

from goldenenv import automation, catalog, clouds, compat, program, stackconfig
from goldenenv.images import host, hostfiles
from goldenenv.images import lock as image_lock
from goldenenv.lifecycle import load_spec
from goldenenv.plan import UNPUBLISHED, host_layer_line, plan
from goldenenv.spec import HostImageOverride

STACKS = [pytest.param(cloud, stack, id=stack) for cloud, stack in shipped.pulumi_stacks()]
NO_PINNABLE_SOURCE = {"module:erdma": "Alibaba's eRDMA driver comes as an installer script with no signed "
                                      "repository or checksum to pin, and the stock images lack it",
                      "fs:cfs-turbo": "Tencent's CFS Turbo client comes from Tencent's own download, with no signed "
                                      "repository or checksum found to pin"}
"""Needs no host lock can pin yet, and why. A shipped stack whose pools have one is refused by `up` as shipped,
naming it (test below), whichever cloud's folder it is planned by; a need leaves this list the day a component
provides it."""


def unpinnable(spec) -> list[str]:
    """The needs of NO_PINNABLE_SOURCE the stack's pools have, one per pool that has it."""
    return [p.need for found in layers(spec, baked=False) for p in found.provided if p.need in NO_PINNABLE_SOURCE]


def baked_id(cloud: str) -> str:
    """An image id of the cloud's form, as a bake would record it (its folder's Cloud.host_image_form)."""
    form = clouds.get(cloud).host_image_form
    assert form is not None and form.pattern.fullmatch(form.sample), (
        f"{cloud} says no whole host image id of its form: set Cloud.host_image_form with a sample")
    return form.sample


def refusals(spec, stacks_dir=None) -> list[str]:
    """What up's guard refuses the stack for before renting anything, but the golden image not pushed yet (another
    contract's: no image is pushed here)."""
    try:
        automation.guard(spec, creating=True, stacks_dir=stacks_dir)
    except automation.LifecycleError as refused:
        lines = [line.strip() for line in str(refused).splitlines()[1:]]
        return [line for line in lines if line.split(": ", 1)[0] != UNPUBLISHED]
    return []


def layers(spec, baked: bool = True) -> list[host.HostLayer]:
    return [host.layer(spec, pool, baked=baked) for pool in spec.nodes]


def rendered(result) -> str:
    return json.dumps([r.props for r in result.resources], default=str)


@pytest.fixture(autouse=True)
def images(tmp_path, monkeypatch):
    """An images folder of this test first (published records and host locks written here win, none of the
    project's own), the packaged locks behind it."""
    monkeypatch.setattr(image_lock, "IMAGES", tmp_path)
    return tmp_path


def host_lock_without(images, name: str, component: str) -> None:
    """A copy of the packaged host lock in the test's images folder with one component removed."""
    doc = yaml.safe_load(host.host_lock_path(name).read_text())
    del doc["components"][component]
    (images / host.HOSTS).mkdir(exist_ok=True)
    (images / host.HOSTS / f"{name}.yaml").write_text(yaml.safe_dump(doc))


# ---------------------------------------------------------------- as shipped: the install at first boot

@pytest.mark.parametrize("cloud, stack", STACKS)
def test_every_shipped_stack_passes_ups_checks_with_the_install_at_first_boot(cloud, stack):
    spec = load_spec(stack)
    unpinned = unpinnable(spec)
    if unpinned:
        assert [p.need for found in layers(spec) for p in found.missing] == unpinned
        assert refusals(spec) and all(any(n in line for n in unpinned) for line in refusals(spec)), refusals(spec)
        return
    assert refusals(spec) == []
    for found in layers(spec):
        assert not found.missing, [p for p in found.missing]
        assert found.host_lock or not found.install  # an image that carries every need needs no host lock
        assert found.baked is None
        for p in found.provided:
            if p.by == host.INSTALL:  # at the host lock's version, from its component for the image's OS family
                component = host.load_host(found.host_lock).components[p.component]
                assert p.version == component.version and found.family in component.packages


@pytest.mark.parametrize("cloud, stack", STACKS)
def test_plan_says_per_pool_who_provides_each_need_and_counts_the_install(cloud, stack):
    result = plan(stack)
    shown = {pool["pool"]: pool["hostLayer"] for pool in result.to_json()["compat"]}
    for checked in result.compat:
        found = checked.layer
        line = host_layer_line(found)
        assert line.startswith(f"host layer ({found.host_lock or 'no host lock'}, "
                               f"{found.family or 'OS family unknown'}): ")
        for p in found.provided:
            assert shown[checked.pool]["byNeed"][p.need]["by"] == p.by
            if p.by == host.INSTALL:
                assert f"{p.component} {p.version}" in line.split(": ", 1)[1].split(" (")[0]
            if p.by == host.IMAGE:
                assert f"{p.need} from the image" in line
        assert shown[checked.pool]["installsAtFirstBoot"] is found.installs
        assert "first boot installs" in line if found.installs else "first boot installs" not in line
    terms = {t.name: t for t in result.cold_start.terms}
    if any(c.layer.installs for c in result.compat):
        figure = catalog.cold_start_terms(cloud)["host_layer_install_s"]
        assert terms["host layer"].seconds == figure.value
        if figure.source.lower().startswith("unverified"):
            assert "host layer" in result.cold_start.unverified and "unverified" in terms["host layer"].how
    else:
        assert "host layer" not in terms


# ---------------------------------------------------------------- baked: the nodes boot the recorded image

@pytest.mark.parametrize("cloud, stack", STACKS)
def test_with_a_baked_image_recorded_the_nodes_boot_it_and_install_nothing(cloud, stack, images):
    spec = load_spec(stack)
    first_boot = plan(stack)
    baked_as, unpinned = baked_id(cloud), unpinnable(spec)
    for found in layers(spec, baked=False):
        if found.install:
            hostfiles.record(found.host_lock, hostfiles.BakedImage(cloud, spec.region, found.base, found.digest,
                                                         baked_as, found.host_lock,
                                                         "2026-12-01T00:00:00+00:00"))
    baked = [found for found in layers(spec) if found.install]
    if not baked:
        pytest.skip(f"{stack}: its host images carry every pinned component, nothing to bake")
    for pool, found in zip(spec.nodes, layers(spec)):
        installed = {p.need for p in host.layer(spec, pool, baked=False).provided if p.by == host.INSTALL}
        assert found.baked == (baked_as if installed else None) and not found.installs
        assert {p.need for p in found.provided if p.by == host.BAKED} == installed
    if unpinned:  # a bake installs what the host lock pins, and no more
        assert refusals(spec) and all(any(n in line for n in unpinned) for line in refusals(spec))
    else:
        assert refusals(spec) == []
    result = plan(stack)
    assert baked_as in rendered(result) and baked_as not in rendered(first_boot)
    if result.cold_start:
        assert {t.name: t.seconds for t in result.cold_start.terms}.get("host layer") == 0.0


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("said, carried", [("the host image lacks it", "none"),
                                           ("the catalog does not say whether the host image has it", "")])
@pytest.mark.parametrize("cloud, stack", STACKS)
def test_a_need_no_one_provides_is_refused_at_up_naming_it(cloud, stack, said, carried, images, monkeypatch):
    """The engine: the catalog's image without it (or not saying), and a host lock without its component."""
    spec = load_spec(stack)
    name = host.layer(spec, spec.nodes[0]).host_lock
    if name:  # a lock that names no host lock (the Ascend image on Huawei's NPU image) has no component to remove
        (engine,) = [n for n, c in host.load_host(name).components.items() if host.ENGINE in c.provides]
        host_lock_without(images, name, engine)
    original = catalog.host_images  # every image of the cloud, so whichever one the pool boots
    monkeypatch.setattr(catalog, "host_images", lambda cloud: {
        name: dataclasses.replace(image, docker=carried) for name, image in original(cloud).items()})
    refused = [r for r in refusals(spec) if r.startswith(f"compat:{compat.HOST_LAYER}: ")]
    assert refused, refusals(spec)
    assert "lacks engine" in refused[0] and said in refused[0]
    assert (f"images/hosts/{name}.yaml" if name else "names no host lock") in refused[0]
    assert "hostImage to an image of yours" in refused[0]

    class NeverCalled:
        def up(self, **kwargs):
            raise AssertionError("up reached Pulumi")

    with pytest.raises(automation.LifecycleError):
        automation.up(spec, log=lambda m: None, target=NeverCalled())
    monkeypatch.setattr(stackconfig, "from_pulumi", lambda: spec)  # `pulumi up` run directly refuses it too
    with pytest.raises(pulumi.RunError, match=f"(?s)does not fit the nodes.*{compat.HOST_LAYER}: .*lacks engine"):
        program.refuse_incompatible()
    shown = [f for f in plan(stack).findings if f.rule == f"compat:{compat.HOST_LAYER}"]
    assert shown and shown[0].severity.value == "warning" and "lacks engine" in shown[0].message


@pytest.mark.parametrize("cloud, stack", STACKS)
def test_a_driver_below_a_components_requirement_is_refused_naming_both(cloud, stack, monkeypatch):
    """NVIDIA's container toolkit against the node's driver; a family whose host needs no toolkit (Ascend) holds the
    node's driver to the lock's own driver pin instead."""
    spec = load_spec(stack)
    checked = compat.check_stack(spec)[0]
    toolkit = next((p for p in checked.layer.provided if p.need == host.TOOLKIT), None)
    if toolkit is None:
        driver_below_the_locks_is_refused(spec, checked, monkeypatch)
        return
    major = int(checked.driver.split(".")[0])
    row = {"component": toolkit.component, "version": toolkit.version, "requires": "driver",
           "minimum": f"{major + 1}.0", "maximum": "", "source": "a test's row"}
    monkeypatch.setattr(compat, "_requirements", lambda: [row])
    (conflict,) = [c for c in compat.check_stack(spec)[0].conflicts if c.rule == compat.HOST_LAYER_COMPAT]
    assert conflict.severity == compat.ERROR
    assert conflict.pins == (f"{toolkit.component}={toolkit.version}", f"driver={checked.driver}")
    assert f"needs driver >= {major + 1}.0" in conflict.message and f"driver {checked.driver}" in conflict.message
    assert any(r.startswith(f"compat:{compat.HOST_LAYER_COMPAT}: ") for r in refusals(spec))
    row.update(minimum=f"{major}.0")
    assert not [c for c in compat.check_stack(spec)[0].conflicts if c.rule == compat.HOST_LAYER_COMPAT]


def driver_below_the_locks_is_refused(spec, checked, monkeypatch):
    """An NPU pool: the catalog's host images with an NPU driver one major release below the lock's ascend.driver
    are refused naming both pins; at the lock's own driver they pass."""
    section = image_lock.load(spec.image.lock).ascend
    pinned = section.driver
    if pinned is None:  # a lock that pins no driver: the image's driver is judged against the vendor's pairs
        (said,) = [c for c in compat.check_stack(spec)[0].conflicts if c.rule == "ascend-driver"]
        assert said.pins == (f"ascend.cann={section.cann}", f"driver={checked.driver}")
        assert said.severity == (compat.ERROR if any(r["cann"] == section.cann for r in catalog.rows("ascend_driver"))
                                 else compat.WARNING)
        return
    assert checked.driver == pinned, f"as shipped, the pool's host image carries the lock's driver {pinned}"
    below = f"{int(pinned.split('.')[0]) - 1}.0.6"
    original = catalog.host_images
    monkeypatch.setattr(catalog, "host_images", lambda cloud: {
        name: dataclasses.replace(image, npu_driver=below) if image.npu_driver else image
        for name, image in original(cloud).items()})
    (conflict,) = [c for c in compat.check_stack(spec)[0].conflicts if c.rule == "ascend-driver"]
    assert conflict.severity == compat.ERROR
    assert conflict.pins == (f"ascend.driver={pinned}", f"driver={below}")
    assert f"NPU driver {pinned}" in conflict.message and f"driver is {below}, below it" in conflict.message
    assert any(r.startswith("compat:ascend-driver: ") for r in refusals(spec))
    monkeypatch.setattr(catalog, "host_images", original)
    assert not [c for c in compat.check_stack(spec)[0].conflicts if c.rule == "ascend-driver"]


@pytest.mark.parametrize("cloud, stack", STACKS)
def test_an_unknown_kernel_is_a_warning_not_a_pass(cloud, stack, monkeypatch):
    spec = load_spec(stack)
    engine = next(p for p in compat.check_stack(spec)[0].layer.provided if p.need == host.ENGINE)
    row = {"component": engine.component or "engine", "version": "*", "requires": "kernel", "minimum": "5.15",
           "maximum": "", "source": "a test's row"}
    monkeypatch.setattr(compat, "_requirements", lambda: [row])
    found = [c for c in compat.check_stack(spec)[0].conflicts if c.rule in (compat.HOST_KERNEL_UNKNOWN,
                                                                            compat.HOST_LAYER_COMPAT)]
    image = catalog.host_image(cloud, spec.region)
    if engine.component is None:
        assert found == []  # the image's own engine: no host lock component to hold to a row
    elif not image.kernel:
        assert [c.rule for c in found] == [compat.HOST_KERNEL_UNKNOWN] and found[0].severity == compat.WARNING


# ---------------------------------------------------------------- a stack's own image

def test_a_stacks_own_image_with_its_os_gets_what_it_lacks_installed(tmp_path):
    stack = "alicloud-gn7i-dev"
    doc = yaml.safe_load((shipped.STACKS / f"Pulumi.{stack}.yaml").read_text())
    own = {"id": "m-goldenenv0test0image", "driver": "570.133.20"}
    doc["config"]["goldenenv:nodes"]["hostImage"] = own
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(stack, tmp_path)
    stated = host.layer(spec, spec.nodes[0])
    assert {p.need: p.by for p in stated.provided}[host.ENGINE] == host.IMAGE and not stated.installs
    doc["config"]["goldenenv:nodes"]["hostImage"] = {**own, "os": "ubuntu-22.04"}
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(stack, tmp_path)
    found = host.layer(spec, spec.nodes[0])
    lock = host.load_host(found.host_lock)
    assert found.base == own["id"] and found.family == "ubuntu-22.04"
    by = {p.need: p for p in found.provided}
    assert by[host.ENGINE].by == host.INSTALL and by[host.ENGINE].version == lock.components[
        by[host.ENGINE].component].version
    assert by[host.DRIVER].by == host.IMAGE and by[host.DRIVER].version == own["driver"]
    assert refusals(spec, tmp_path) == []


def test_a_stacks_os_is_a_pattern_not_a_shell_word():
    with pytest.raises(ValueError):
        HostImageOverride(id="m-abc", driver="570.133.20", os="ubuntu-22.04; reboot")
    assert HostImageOverride(id="m-abc", driver="570.133.20", os="ubuntu-24.04").os == "ubuntu-24.04"


def test_the_a3_mega_stack_boots_googles_stock_image_and_installs_import_helper():
    spec = load_spec("gcp-a3mega-2node")
    assert spec.nodes[0].host_image is None
    by = {p.need: p for p in host.layer(spec, spec.nodes[0], baked=False).provided}
    assert by[host.module_need("import_helper")].by == host.INSTALL

