"""/scratch lands on the node's local NVMe on every cloud whose disks come bare (Google's Local SSD, Azure's NVMe
Direct Disks): the scratch unit the plan renders, booted by cloud-init and systemd on an emulated host whose disks
are a recorded node's of that cloud (tests/unit/captures/local_nvme/), stripes exactly its local disks and mounts
their file system at /scratch, owned by the image's user; a stop/start hands back blank disks and the unit makes
them again. The AWS stacks' instance store (the DLAMI's own volume) is test_emulated_nodes.py's."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import emulated_host
import stand_ins

from goldenenv import catalog, nodeboot, plan, stackconfig
from goldenenv.images.dockerfile import UID

pytestmark = pytest.mark.node_boot

CAPTURES = Path(__file__).resolve().parents[1] / "unit" / "captures" / "local_nvme"
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in plan.stack_file("local").parent.glob(
    "Pulumi.*.yaml"))


def scratch_unit(stack: str):
    """(spec, the first pool's scratch unit as the plan renders it, the recorded disks of its cloud and type) where
    that unit stripes bare local disks; None elsewhere."""
    spec = stackconfig.load(stack, *stackconfig.namespaced(stackconfig.read_stack_file(plan.stack_file(stack))))
    if spec.cloud == "local":
        return None
    pool = spec.nodes[0]
    boot = nodeboot.NodeBoot(spec, pool.name, fabric="none", local_nvme=True)
    unit = next(u for u in boot.units(None) if u.name == nodeboot.SCRATCH_UNIT)
    capture = CAPTURES / f"{spec.cloud}_{pool.instance_type}.txt"
    if not unit.script.path.endswith("/nvme-raid0.sh") or not catalog.instance_type(
            spec.cloud, pool.instance_type).local_nvme_count:
        return None
    assert capture.exists(), f"no recorded {spec.cloud} {pool.instance_type} node under {CAPTURES}"
    return spec, unit, stand_ins.Disks.recorded(capture)


BARE = [stack for stack in STACKS if scratch_unit(stack)]


def test_the_shipped_gcp_and_azure_stacks_with_local_nvme_stripe_bare_disks():
    assert {"gcp-a3mega-2node", "azure-ndh100-2node"} <= set(BARE), BARE


@pytest.fixture
def booted(request, client, host_image, stack_key, tmp_path):
    spec, unit, disks = scratch_unit(request.param)
    pool = spec.nodes[0].name
    user_data = nodeboot.user_data(spec, pool, nodeboot.boot_files(spec, {"GOLDENENV_STACK": spec.stack}, [unit]))
    folder = tmp_path / "local-nvme"
    folder.mkdir()
    (folder / "left-by-the-last-tenant").write_text("x")
    name = f"ge-nvme-{request.param}-{uuid.uuid4().hex[:4]}"
    network = client.networks.create(f"{name}-net", driver="bridge", labels={"goldenenv.test": "node"})
    host = None
    try:
        host = emulated_host.Host.create(
            client, host_image, name=name, networks=[network.name], user_data=user_data,
            public_key=stack_key["public"], login="ubuntu", key=stack_key["key"], shares=[str(folder)],
            sharedfs=None, nvme=str(folder), erdma=0, gpus=0, nvidia_smi="", disks=disks)
        yield host, spec, disks, folder
    finally:
        if host is not None:
            host.remove()
        emulated_host.remove_network(network)


def scratch_up(host) -> None:
    host.wait_for("goldenenv-scratch active", lambda: host.units_state(
        [nodeboot.SCRATCH_UNIT]).get(nodeboot.SCRATCH_UNIT) == "active", timeout=240)


@pytest.mark.parametrize("booted", BARE, indirect=True)
def test_scratch_is_the_local_nvme_array_and_comes_back_blank_after_a_stop_start(booted):
    host, spec, disks, folder = booted
    scratch = spec.storage.local_nvme.mount_point
    scratch_up(host)
    _, log = host.sh(f"journalctl -b --no-pager -u {nodeboot.SCRATCH_UNIT}")
    assert "creating /dev/md0" in log and f"on the {len(disks.local)} local NVMe disks" in log, log
    rc, members = host.sh("cat /run/goldenenv-emulated/disks/members")
    assert rc == 0 and sorted(members.split()) == sorted(disks.local), "exactly the local disks, no OS or data disk"
    assert not (folder / "left-by-the-last-tenant").exists(), "a new file system: the disks start empty"
    rc, owner = host.sh(f"mountpoint -q {scratch} && stat -c %u {scratch} && touch {scratch}/probe")
    assert rc == 0 and owner.split() == [str(UID)], owner
    assert (folder / "probe").exists(), f"{scratch} is the local disks' file system, not a folder on the OS disk"

    host.restart()
    scratch_up(host)
    assert not (folder / "probe").exists(), "local NVMe comes back blank after a stop/start"
    assert host.sh(f"mountpoint -q {scratch} && touch {scratch}/again")[0] == 0
    assert (folder / "again").exists()
