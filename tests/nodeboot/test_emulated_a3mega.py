"""An A3 Mega node's GPU network is really used: gcp-a3mega-2node's first GPU node, planned offline and booted on an
emulated Compute Engine host from its metadata (as test_emulated_gcp.py boots gcp-g2-dev's), runs Google's
receive-datapath manager (RxDM) beside the golden container, gives the container the aperture devices and the
import helper's device, and the TCPXO plugin's env file's tuning; /scratch is the array of its 16 Local SSDs.

The host is what the stack's host image and machine type give (tests/nodeboot/stand_ins.py): nine gVNICs (the
system NIC and eight GPU NICs, each on a network at its VPC's planned MTU), an aperture device (PCI 1ae0:0084) beside
each GPU NIC, the kernel modules TCPXO needs, which the host lock's import-helper component installs on Google's
stock image (import_helper, whose modprobe registers /dev/dmabuf_import_helper), plus the Lustre client the stack's
Managed Lustre needs, the 16 Local SSDs as the recorded a3-megagpu-8g lists them, and Managed Lustre as a folder of
this machine (the shared-FS stand-in). RxDM is a stand-in image tagged as the lock's pinned reference (Google's
registry is out of reach), which refuses to start without the import helper's device, its GPUs or its NICs, logs the
line Google's prolog waits for and serves until stopped. The golden image is the fixtures' test image with TCPXO's
env file where the fabric declares it, pushed by digest.

One host: the head is its golden container alone (the planned head's slurm.conf and `goldenenv-slurm head`, from the
same golden image, with the munge key the node reads from Secret Manager) at the head's planned address on the
system network, so the node's slurmd fetches its configuration and keeps running, as it does on a cluster."""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import os
import random
import re
import shlex
import tarfile
import time
import uuid
from pathlib import Path
from typing import NamedTuple

import docker
import emulated_host
import emulated_stack
import gce_metadata
import gcp_apis
import pytest
import stand_ins
import yaml

from goldenenv import catalog, fabrics, plan, slurm, stackconfig

pytestmark = pytest.mark.node_boot

STACK = "gcp-a3mega-2node"
INSTANCE = "gcp:compute/instance:Instance"
NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
HERE = Path(__file__).resolve().parent
PROJECT_NUMBER = 123456789012
INSTANCE_ID = 4567890123456789013
LOCAL_NVME = HERE.parent / "unit" / "captures" / "local_nvme" / "gcp_a3-megagpu-8g.txt"
RXDM = "goldenenv-rxdm"
CONTAINER = "goldenenv"
LUSTRE_CLIENT = "lustre"
"""The Managed Lustre client module the stack's shared file system mounts with (lustre-mount-gcp.sh waits for it)."""

PROFILE = {
    # A few of the values Google's nccl-env-profile.sh (in the TCPXO plugin's image, next to the plugin) sets for
    # A3 Mega, and its interface defaults, which the node's own names override (launch env, item 10's rule)
    "NCCL_FASTRAK_CTRL_DEV": "eth0",
    "NCCL_FASTRAK_IFNAME": "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_ALGO": "Ring,Tree",
    "NCCL_PROTO": "Simple",
    "NCCL_MIN_NCHANNELS": "4",
    "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
    "NCCL_TUNER_CONFIG_PATH": "${NCCL_LIB_DIR}/a3plus_tuner_config.textproto",
    "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
    "NCCL_FASTRAK_NUM_FLOWS": "2",
}
PROFILE_SCRIPT = ('# nccl-env-profile.sh (test image): TCPXO\'s recommended NCCL settings\n'
                  ': "${NCCL_LIB_DIR:?Must set NCCL_LIB_DIR}"\n'
                  + "".join(f'export {k}="{v}"\n' for k, v in PROFILE.items()))

RXDM_SCRIPT = r'''#!/bin/bash
# RxDM (tcpgpudmarxd) stand-in: it takes its publisher's flags, opens the import helper's device, finds its GPUs and
# its NICs (the host's, on the host's network) and serves until it is stopped
nics="" hops=""
for arg in "$@"; do
  case "$arg" in
    --num_nics=*) nics=${arg#*=} ;;
    --num_hops=*) hops=${arg#*=} ;;
    *) echo "ERROR: unknown command line flag '${arg%%=*}'"; exit 1 ;;
  esac
done
[ -n "$nics" ] && [ -n "$hops" ] || { echo "ERROR: --num_nics and --num_hops are required"; exit 1; }
[ -c /dev/dmabuf_import_helper ] || { echo "ERROR: open /dev/dmabuf_import_helper: No such file or directory"; exit 1; }
gpus=$(ls /dev | grep -cE '^nvidia[0-9]+$')
[ "$gpus" -gt 0 ] || { echo "ERROR: no GPU (no /dev/nvidia<i>)"; exit 1; }
primary=$(awk '$2 == "00000000" { print $1; exit }' /proc/net/route)
found=$(ls /sys/class/net | grep -vx -e lo -e "$primary" | wc -l)
[ "$found" -ge "$nics" ] || { echo "ERROR: $found NIC(s) besides $primary, --num_nics=$nics"; exit 1; }
echo "RxDM: $gpus GPUs, $nics NICs besides $primary, $hops hops"
echo "Buffer manager initialization complete"
trap 'echo "RxDM: stopping"; exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
'''


class A3Node(NamedTuple):
    host: emulated_host.Host
    instance: object
    user_data: str
    rxdm_image: str
    golden: str
    """The golden image (by digest) the plan gave the node."""
    nvme: Path
    """The folder of this machine standing for the 16 Local SSDs."""
    head: docker.models.containers.Container
    """The head's golden container."""


def context_of(files: dict[str, tuple[str, int]]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, (text, mode) in files.items():
            info = tarfile.TarInfo(path)
            data = text.encode()
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def tcpxo_golden(client, golden_ref: str, profile: str) -> str:
    """The fixtures' golden test image with TCPXO's env file at `profile`, pushed to their registry: repo@sha256."""
    repository = golden_ref.split("@", 1)[0] + "-tcpxo"
    tag = f"{repository}:{uuid.uuid4().hex[:8]}"
    dockerfile = f"FROM {golden_ref}\nCOPY nccl-env-profile.sh {profile}\n"
    client.images.build(fileobj=context_of({"Dockerfile": (dockerfile, 0o644),
                                            "nccl-env-profile.sh": (PROFILE_SCRIPT, 0o644)}),
                        custom_context=True, tag=tag, rm=True, forcerm=True)
    for line in client.images.push(repository, tag=tag.rsplit(":", 1)[1], stream=True, decode=True):
        assert "error" not in line, line
    digest = next(d for d in client.images.get(tag).attrs["RepoDigests"] if d.startswith(repository + "@"))
    client.images.remove(tag)
    return digest


def rxdm_image(client, base: str, ref: str) -> None:
    """The RxDM stand-in, tagged as the reference the node's RxDM unit pulls."""
    assert "@" not in ref, f"the lock pins RxDM by digest ({ref}): a stand-in cannot carry Google's digest"
    client.images.build(fileobj=context_of({
        "Dockerfile": (f"FROM {base}\nCOPY rxdm /usr/local/bin/rxdm\nENTRYPOINT [\"/usr/local/bin/rxdm\"]\n", 0o644),
        "rxdm": (RXDM_SCRIPT, 0o755)}), custom_context=True, tag=ref, rm=True, forcerm=True)


def vpc_network(client, name: str, cidr: str, mtu: int):
    """A network for one of the node's VPCs at the VPC's MTU (the cloud gives a NIC its VPC's): a free /24 of the
    range, the node at its .20: (network, address)."""
    candidates = list(ipaddress.ip_network(cidr).subnets(new_prefix=24)) if "/24" not in cidr else [
        ipaddress.ip_network(cidr)]
    random.shuffle(candidates)
    for subnet in candidates[:32]:
        pool = docker.types.IPAMPool(subnet=str(subnet), gateway=str(subnet[1]),
                                     iprange=str(list(subnet.subnets(new_prefix=25))[1]))
        try:
            network = client.networks.create(name, driver="bridge", options={"com.docker.network.driver.mtu": str(mtu)},
                                             ipam=docker.types.IPAMConfig(pool_configs=[pool]),
                                             labels={"goldenenv.test": "node"})
        except docker.errors.APIError as e:
            if "overlap" in str(e).lower():
                continue
            raise
        return network, str(subnet[20])
    raise RuntimeError(f"no free /24 in {cidr} for {name}")



def head_container(client, image: str, network, address: str, head_user_data: str, key: bytes, folder: Path):
    """The head's golden container as the head's boot runs it (its slurm.conf, the munge key, its state and database
    folders, slurmdbd on the MariaDB it runs), at the head's address: what the node's slurmd registers with."""
    conf = folder / "slurm"
    conf.mkdir()
    for entry in yaml.safe_load(head_user_data)["write_files"]:
        if entry["path"].startswith("/etc/goldenenv/slurm/"):
            (conf / Path(entry["path"]).name).write_text(emulated_host.written(entry))
    (folder / "munge.key").write_bytes(key)
    (folder / "state").mkdir()
    (folder / "db").mkdir()
    endpoint = client.api.create_endpoint_config(ipv4_address=address)
    client.images.pull(image)  # by digest, as the head's boot pulls it
    container = client.containers.create(
        image, slurm.head_command(db_dir=slurm.DB_DIR), name=f"{network.name}-head", init=True, user="root",
        hostname=slurm.HEAD_HOSTNAME, network=network.name, labels={"goldenenv.test": "head"},
        networking_config={network.name: endpoint}, volumes={
            str(conf): {"bind": "/etc/goldenenv/slurm", "mode": "ro"},
            str(folder / "munge.key"): {"bind": "/run/goldenenv-secrets/munge.key", "mode": "ro"},
            str(folder / "state"): {"bind": "/var/spool/slurmctld", "mode": "rw"},
            str(folder / "db"): {"bind": slurm.DB_DIR, "mode": "rw"}})
    container.start()
    return container


def launch_env(user_data: str) -> dict[str, str]:
    entry = next(f for f in yaml.safe_load(user_data)["write_files"] if f["path"].endswith("/launch.env"))
    return dict(line.split("=", 1) for line in entry["content"].splitlines() if line and not line.startswith("#"))


@pytest.fixture(scope="module")
def a3(client, golden_base, host_image, golden_ref, stack_key, cloud_apis, tmp_path_factory) -> A3Node:
    spec0 = stackconfig.load(STACK, *stackconfig.namespaced(stackconfig.read_stack_file(plan.stack_file(STACK))))
    it = catalog.instance_type(spec0.cloud, spec0.nodes[0].instance_type)
    profile = fabrics.get("tcpxo").env_files[0].path
    golden = tcpxo_golden(client, golden_ref, profile)
    config = emulated_stack.stack_config(STACK, golden, stack_key["public"])
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    resources, _ = plan.run_program(STACK, config, plan.offline_context(spec))
    instance = next(r for r in resources if r.type == INSTANCE and not r.name.endswith(f"-{slurm.HEAD_HOSTNAME}"))
    head = next(r for r in resources if r.type == INSTANCE and r.name.endswith(f"-{slurm.HEAD_HOSTNAME}"))
    user_data = instance.props["metadata"]["user-data"]
    rxdm_ref = emulated_stack.script_values(user_data, "sidecar.sh")["image"]
    rxdm_image(client, golden_base, rxdm_ref)
    secret = emulated_stack.script_values(user_data, "munge-key-gcp.sh")["secret"]
    account, head_account = instance.props["serviceAccount"]["email"], head.props["serviceAccount"]["email"]

    # the node's VPCs, in the order of its network interfaces, each at its planned MTU
    networks_of = {r.props["name"]: r for r in resources if r.type == NETWORK}
    subnets = {r.props["name"]: r for r in resources if r.type == SUBNETWORK}
    vpcs = []
    for nic in instance.props["networkInterfaces"]:
        subnet = subnets[nic["subnetwork"].rsplit("/", 1)[-1]]
        vpcs.append((subnet.props["ipCidrRange"], int(networks_of[subnet.props["network"].rsplit("/", 1)[-1]]
                                                          .props["mtu"])))
    launch = next(f["content"] for f in yaml.safe_load(user_data)["write_files"]
                  if f["path"].endswith("/golden-image.sh"))
    head_address = re.search(r"--conf-server (\S+)", launch).group(1)
    # the system VPC's network holds the head's address, which the plan gives the node
    vpcs[0] = (str(ipaddress.ip_network(f"{head_address}/24", strict=False)), vpcs[0][1])
    name = f"ge-a3mega-{uuid.uuid4().hex[:4]}"
    made, address = [], None
    env = launch_env(user_data)
    folders = {k: tmp_path_factory.mktemp(k) for k in ("nvme", "pci", "lustre", "gce-metadata", "head")}
    key = os.urandom(1024)
    server = host = head_golden = None
    try:
        for i, (cidr, mtu) in enumerate(vpcs):
            network, at = vpc_network(client, f"{name}-net{i}", cidr, mtu)
            made.append(network)
            address = address or (at if at != head_address else str(ipaddress.ip_address(at) + 1))
        state = folders["gce-metadata"]
        gce_metadata.write_state(state, gce_metadata.instance_document(
            name=instance.props["name"], instance_id=INSTANCE_ID, zone=instance.props["zone"],
            project=instance.props["project"], project_number=PROJECT_NUMBER,
            machine_type=instance.props["machineType"], ip=address, attributes=instance.props["metadata"],
            service_account=account))
        token, head_token = gce_metadata.new_token(), gce_metadata.new_token()
        gce_metadata.set_token(state, token)
        gcp_apis.register(cloud_apis.folder, tokens={token: account, head_token: head_account}, secrets={
            secret: {"project_number": PROJECT_NUMBER,
                     "members": gcp_apis.members_of(resources, secret.rsplit("/", 1)[-1])}})
        status, added = gcp_apis.call(cloud_apis.address, cloud_apis.authority.cert_pem, "POST",
                                      f"/v1/{secret}:addVersion", head_token,
                                      {"payload": {"data": base64.b64encode(key).decode()}})
        assert status == 200, added
        head_golden = head_container(client, golden, made[0], head_address, head.props["metadata"]["user-data"], key,
                                     folders["head"])
        cloud_apis.attach(made[0].name, [gcp_apis.HOST])
        server = emulated_stack.gce_metadata_server(client, host_image, made[0], state)
        host_files = stand_ins.gce_gpu_host_files(
            folder=str(folders["pci"]), primary=env["NCCL_FASTRAK_CTRL_DEV"],
            gpu_nics=env["NCCL_FASTRAK_IFNAME"].split(","), apertures=True,
            modules=[*fabrics.get("tcpxo").kernel_modules, LUSTRE_CLIENT])
        host = emulated_host.Host.create(
            client, host_image, name=name, networks=[n.name for n in made], user_data="", public_key="",
            login="ubuntu", key=stack_key["key"], shares=[str(folders[k]) for k in ("nvme", "pci", "lustre")],
            sharedfs=str(folders["lustre"]), nvme=str(folders["nvme"]), erdma=0, gpus=it.gpu_count,
            nvidia_smi="", health=emulated_stack.healthy_hardware(spec, it),
            extra_files={**stand_ins.gce_files(), **host_files}, disks=stand_ins.Disks.recorded(LOCAL_NVME),
            hostname=instance.props["name"], address=address, trusted_ca=cloud_apis.authority.cert_pem, seed=False)
        host.wait_for("cloud-init's final stage", lambda: host.sh(
            "test -e /var/lib/cloud/instance/boot-finished")[0] == 0, timeout=240)
        yield A3Node(host, instance, user_data, rxdm_ref, golden, folders["nvme"], head_golden)
    finally:
        if host is not None:
            host.remove()
        for container in (server, head_golden):
            if container is not None:
                container.remove(force=True)
        if made:
            cloud_apis.detach(made[0].name)
        for network in made:
            emulated_host.remove_network(network)
        try:
            client.images.remove(rxdm_ref)
        except docker.errors.APIError:
            pass


def engine_containers(a3: A3Node) -> dict[str, docker.models.containers.Container]:
    """The node's containers running on the engine, by the name its units give them."""
    found = a3.host.client.containers.list(filters={"label": f"goldenenv-emulated={a3.host.name}"})
    return {c.name.removeprefix(f"{a3.host.name}-"): c for c in found}


def eventually(a3: A3Node, what: str, check, timeout: float = 300):
    """check()'s answer once it passes with RxDM and the golden container both running (the container starts once
    RxDM serves, and until slurmd has the head's configuration it may end and start again with RxDM, PartOf)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        running = engine_containers(a3)
        if RXDM in running and CONTAINER in running:
            try:
                return check(running)
            except (AssertionError, docker.errors.NotFound, docker.errors.APIError) as e:
                last = e
        time.sleep(1)
    raise AssertionError(f"{what} not within {timeout:.0f} s: {last!r}\n{a3.host.diagnose()}")


def in_golden(a3: A3Node, command: str) -> str:
    """The output of a command in the golden container, as `docker exec` on the node runs it (once it succeeds)."""
    def run(_running):
        rc, out = a3.host.sh(f"docker exec goldenenv sh -c {shlex.quote(command)}")
        assert rc == 0, out
        return out
    return eventually(a3, f"docker exec goldenenv {command}", run)


def test_the_node_boots_from_its_metadata_and_the_tcpxo_check_passes(a3):
    host = a3.host
    result = json.loads(host.sh("cat /run/cloud-init/result.json")[1])["v1"]
    assert result["datasource"].startswith("DataSourceGCE"), result
    assert not [e for e in result["errors"] if any(s in e for s in ("write_files", "runcmd", "scripts_user"))], result
    host.wait_for("the TCPXO check", lambda: host.units_state(["goldenenv-tcpxo.service"]) == {
        "goldenenv-tcpxo.service": "active"}, timeout=120)
    log = host.sh("journalctl -b -u goldenenv-tcpxo --no-pager")[1]
    gpu_nics = launch_env(a3.user_data)["NCCL_FASTRAK_IFNAME"].split(",")
    assert log.count(": mtu 8244") == len(gpu_nics), log
    assert f"{len(gpu_nics)} aperture device(s) under {fabrics.APERTURE_DEVICES}" in log, log
    assert "kernel module import_helper loaded" in log, log


def test_rxdm_runs_beside_the_golden_container(a3):
    host = a3.host

    def side_by_side(running):
        rxdm, golden = running[RXDM], running[CONTAINER]
        assert a3.rxdm_image in rxdm.image.tags, (rxdm.image.tags, a3.rxdm_image)
        assert rxdm.attrs["Args"] == ["--num_hops=2", "--num_nics=8"], rxdm.attrs["Args"]
        assert rxdm.attrs["HostConfig"]["NetworkMode"] == f"container:{host.container.id}", "the node's network"
        assert golden.attrs["HostConfig"]["NetworkMode"] == f"container:{host.container.id}"
        assert "Buffer manager initialization complete" in rxdm.logs().decode()
        assert a3.golden.split("@")[1] in [d.split("@")[1] for d in golden.image.attrs["RepoDigests"]]
        assert host.units_state(["goldenenv-rxdm.service"]) == {"goldenenv-rxdm.service": "active"}

    eventually(a3, "RxDM serving beside the golden container", side_by_side)
    journal = host.sh("journalctl -b -u goldenenv-container --no-pager")[1]
    assert f"starting container goldenenv from {a3.golden}" in journal

    def registered(_running):
        done = a3.head.exec_run(["sinfo", "-h", "-N", "-o", "%N"])
        assert done.exit_code == 0 and host.sh("hostname -s")[1].strip() in done.output.decode().split(), done.output
    eventually(a3, "the node's slurmd registered with the head", registered, timeout=120)


def test_the_golden_container_has_the_aperture_devices_and_the_import_helper(a3):
    out = in_golden(a3, f"test -c {fabrics.IMPORT_HELPER} && echo helper; "
                        f"for d in {fabrics.APERTURE_DEVICES}/*; do echo $(basename $d) $(ls $d); done")
    lines = out.splitlines()
    assert lines[0] == "helper", out
    apertures = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    gpu_nics = launch_env(a3.user_data)["NCCL_FASTRAK_IFNAME"].split(",")
    assert set(apertures) == {stand_ins.bdf_of(nic)[:-1] + "1" for nic in gpu_nics}, out
    assert all(files == ["resource0", "resource1"] for files in apertures.values()), out


def test_the_golden_containers_environment_has_tcpxos_env_file_under_the_nodes_own_values(a3):
    env = dict(line.split("=", 1) for line in in_golden(a3, "env").splitlines() if "=" in line)
    node = launch_env(a3.user_data)
    library = fabrics.TCPXO_LIBRARIES
    for key, value in PROFILE.items():
        expected = node.get(key, value.replace("${NCCL_LIB_DIR}", library))
        assert env.get(key) == expected, (key, env.get(key), expected)
    assert env["NCCL_FASTRAK_IFNAME"] != PROFILE["NCCL_FASTRAK_IFNAME"], "the node's GPU NICs, not the file's default"


def test_scratch_is_the_local_ssd_array(a3):
    host = a3.host
    disks = stand_ins.Disks.recorded(LOCAL_NVME)
    rc, members = host.sh("cat /run/goldenenv-emulated/disks/members")
    assert rc == 0 and sorted(members.split()) == sorted(disks.local), members
    assert len(disks.local) == 16
    assert host.sh("journalctl -b -u goldenenv-scratch --no-pager | grep -q '/dev/md0 mounted at /scratch'")[0] == 0
    root, scratch = (host.sh(f"findmnt -no SOURCE {path}")[1].strip() for path in ("/", "/scratch"))
    assert root and scratch and scratch != root, (root, scratch)
    assert in_golden(a3, "echo from-the-job > /scratch/probe && cat /scratch/probe").strip() == "from-the-job"
    assert (a3.nvme / "probe").read_text() == "from-the-job\n", "the job's /scratch is the Local SSD array"


def test_stopping_rxdm_stops_the_golden_container_until_rxdm_is_back(a3):
    host = a3.host
    units = ["goldenenv-rxdm.service", "goldenenv-container.service"]
    eventually(a3, "RxDM and the golden container", lambda running: True)
    assert host.sh("systemctl stop goldenenv-rxdm.service")[0] == 0
    # BindsTo: the container stopped with RxDM, and its own Restart= does not bring it back while RxDM is down
    for _ in range(10):
        states = host.units_state(units)
        assert states["goldenenv-rxdm.service"] == "inactive", states
        assert states["goldenenv-container.service"] in ("inactive", "failed"), states
        assert not engine_containers(a3), list(engine_containers(a3))
        time.sleep(2)
    # RxDM started again brings the golden container back (Wants), after it serves
    assert host.sh("systemctl start goldenenv-rxdm.service")[0] == 0
    eventually(a3, "the golden container back with RxDM", lambda running: True, timeout=120)


def test_the_stand_ins_refuse_what_the_cloud_refuses(a3):
    host = a3.host
    # a module the host image lacks is not found; only the image's modules register devices
    rc, out = host.sh("modprobe gve_aperture_not_shipped")
    assert rc != 0 and "not found" in out, out
    # RxDM without the import helper's device (a host image without dmabuf-import-helper) does not serve
    rc, out = host.sh(f"docker run --rm --network host --gpus all {shlex.quote(a3.rxdm_image)} "
                      "--num_hops=2 --num_nics=8")
    assert rc != 0 and "dmabuf_import_helper" in out and "Buffer manager initialization complete" not in out, out
