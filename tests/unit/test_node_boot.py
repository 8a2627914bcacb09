"""Node boot: systemd units that bring scratch, the shared file system and the golden container back after every
stop/start.

The rendered scripts run here under bash with stub commands (docker, aws, mdadm, mount, lsblk ...) on PATH, so what
they would do on a node is asserted from the commands they call, not from their text alone. Ready markers go to the
test's temp dir (nodeboot.READY_DIR), never to the machine's /run.
"""

from __future__ import annotations

import base64
import configparser
import copy
import gzip
import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from goldenenv import catalog, nodeboot, stackconfig
from goldenenv.clouds.alicloud import storage as alicloud_storage
from goldenenv.clouds.aws.basics import lustre_mount
from goldenenv.images.dockerfile import UID
from goldenenv.health import judge
from goldenenv.images import host
from goldenenv.nodeboot import HEALTH_EVIDENCE_UNIT, NodeBoot
from goldenenv.plan import stack_file

DIGEST = "sha256:" + "0123456789abcdef" * 4
ECR_REF = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv/aws-h100@{DIGEST}"
ACR_REF = f"registry-vpc.cn-wulanchabu.aliyuncs.com/goldenenv/alicloud-h100@{DIGEST}"
FSX_DNS = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
FSX_MOUNT = "abcdefgh"
NAS_DOMAIN = "0a1b2c3d4e-abc12.cn-wulanchabu.extreme.nas.aliyuncs.com"
OWN_HOST_IMAGE = {"id": "ami-0123456789abcdef0", "driver": "570.133.20"}
"""A host image the stack brings itself: goldenenv knows nothing of its services, so scratch stripes bare disks."""

SCRATCH = "goldenenv-scratch.service"
FSX = "goldenenv-fsx.service"
SHAREDFS = "goldenenv-sharedfs.service"
ERDMA = "goldenenv-erdma.service"
CONTAINER = "goldenenv-container.service"


def load_stack(name: str, **nodes):
    """A stack file's spec, with node pool keys as a stack file writes them (hostImage=...) replaced."""
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(name)))
    config["goldenenv:nodes"].update(nodes)
    values, extra = stackconfig.namespaced(config)
    return stackconfig.load(name, values, extra)


@pytest.fixture(scope="module")
def spec():
    """aws-p5-2node: eight instance-store disks, the catalog's Deep Learning AMI, FSx, EFA."""
    return load_stack("aws-p5-2node")


@pytest.fixture(scope="module")
def bare_p5():
    return load_stack("aws-p5-2node", hostImage=OWN_HOST_IMAGE)


@pytest.fixture(scope="module")
def bare_g5():
    return load_stack("aws-g5-dev", hostImage=OWN_HOST_IMAGE)


@pytest.fixture(scope="module")
def gn7i():
    """alicloud-gn7i-dev: no instance store, no shared file system."""
    return load_stack("alicloud-gn7i-dev")


@pytest.fixture(scope="module")
def ebmgn8v():
    """alicloud-ebmgn8v-2node: eRDMA, CPFS, no instance store."""
    return load_stack("alicloud-ebmgn8v-2node")


@pytest.fixture(autouse=True)
def ready_dir(tmp_path, monkeypatch) -> Path:
    """Where the rendered units leave their ready markers in these tests (on a node: /run/goldenenv)."""
    path = tmp_path / "run" / "goldenenv"
    monkeypatch.setattr(nodeboot, "READY_DIR", str(path), raising=False)
    return path


def with_storage(spec, **changes):
    """The spec with storage fields replaced, e.g. mount points inside a test's temp dir."""
    storage = spec.storage
    local = storage.local_nvme.model_copy(update={k: v for k, v in changes.items() if k == "mount_point"})
    fs = storage.parallel_fs.model_copy(update={k[3:]: v for k, v in changes.items() if k.startswith("fs_")})
    return spec.model_copy(update={"storage": storage.model_copy(update={"local_nvme": local, "parallel_fs": fs})})


def parse(text: str) -> tuple[dict, dict[str, str]]:
    """The cloud-config and its files as cloud-init writes them (a gz+b64 file decoded)."""
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    return doc, {f["path"]: decoded(f) for f in doc["write_files"]}


def decoded(entry: dict) -> str:
    if entry.get("encoding") == "gz+b64":
        return gzip.decompress(base64.b64decode(entry["content"])).decode()
    assert "encoding" not in entry, entry["encoding"]
    return entry["content"]


def host_layer_units(spec) -> list[str]:
    """The host layer's install unit, first, where the first pool's host image lacks part of the layer."""
    return [nodeboot.HOST_LAYER_UNIT] if host.layer(spec, spec.nodes[0]).installs else []


def boot_files(spec, image_ref=ECR_REF, **kw) -> tuple[dict, dict[str, str]]:
    """A p5 node's boot as the AWS cloud renders it: EFA, instance store, FSx, ECR."""
    return parse(NodeBoot(spec, "gpu", fabric="efa", local_nvme=True, image_ref=image_ref,
                          registry_login="ecr").cloud_config(
        lustre_mount(kw.get("dns", FSX_DNS), kw.get("mount", FSX_MOUNT))))


def node_files(spec, image_ref: str | None = None, shared_fs=None) -> tuple[dict, dict[str, str]]:
    """Any stack's first pool, its fabric and instance store as the catalog has them for its type."""
    pool = spec.nodes[0]
    it = catalog.instance_type(spec.cloud, pool.instance_type)
    return parse(NodeBoot(spec, pool.name, fabric=it.rdma if it.has_rdma else "none",
                          local_nvme=it.local_nvme_count > 0, image_ref=image_ref).cloud_config(shared_fs))


def unit(files: dict[str, str], name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str
    parser.read_string(files[f"/etc/systemd/system/{name}"])
    return parser


def unit_names(files: dict[str, str]) -> list[str]:
    return [path.rsplit("/", 1)[1] for path in files if path.startswith("/etc/systemd/system/")]


def script_of(files: dict[str, str], name: str) -> str:
    return files[unit(files, name)["Service"]["ExecStart"]]


def steps_done(files: dict[str, str]) -> None:
    """Every step unit (all but the container) has left its ready marker, as after a boot that went well."""
    for name in unit_names(files):
        if name != CONTAINER:
            marker = Path(nodeboot.ready_marker(name))
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()


def stub_bin(tmp_path: Path, stubs: dict[str, str]) -> Path:
    """Commands that log their arguments to $STUB_LOG, then run the given bash body."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(f'#!/bin/bash\necho "{name} $*" >> "$STUB_LOG"\n{body}\n')
        path.chmod(0o755)
    return bin_dir


def run_script(tmp_path: Path, text: str, stubs: dict[str, str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run a rendered script; chown is always a stub (its calls are the assertion), so the tests need no root."""
    script = tmp_path / "script.sh"
    script.write_text(text)
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {"PATH": f"{stub_bin(tmp_path, {'chown': 'exit 0', **stubs})}:/usr/bin:/bin", "STUB_LOG": str(log),
           "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    return result, log.read_text().splitlines()


def mounted(*paths) -> str:
    """A `mountpoint -q PATH` stub: true for these paths only."""
    return f'for m in {" ".join(shlex.quote(str(p)) for p in paths)}; do [ "$2" = "$m" ] && exit 0; done; exit 1'


# ---------------------------------------------------------------- lsblk, as a node's block devices show


FAKE_LSBLK = r'''
import json, os, sys

table = json.load(open(sys.argv[1]))
flags, columns, wanted, args = set(), ["NAME"], [], sys.argv[2:]
i = 0
while i < len(args):
    if args[i].startswith("-"):
        flags |= set(args[i][1:])
        if "o" in args[i][1:]:
            i += 1
            columns = args[i].split(",")
    else:
        wanted.append(args[i])
    i += 1
by_name = {d["name"]: d for d in table}
for name in wanted:
    if name not in by_name:
        sys.exit(f"lsblk: {name}: not a block device")
rows = [] if "n" in flags else [" ".join(columns)]


def add(device, depth):
    values = []
    for column in columns:
        if column == "NAME":
            name = device["name"] if "p" in flags else os.path.basename(device["name"])
            values.append(name if depth == 0 or "l" in flags else "`-" + name)
        else:
            values.append(device.get(column.lower(), ""))
    rows.append(" ".join(values))
    if "d" not in flags:
        for child in device.get("children", []):
            add(child, depth + 1)


for device in [by_name[n] for n in wanted] or table:
    add(device, 0)
print("\n".join(rows))
'''

INSTANCE_STORE_MODEL = "Amazon EC2 NVMe Instance Storage"
ROOT_DISK = {"name": "/dev/nvme0n1", "type": "disk", "model": "Amazon Elastic Block Store", "children": [
    {"name": "/dev/nvme0n1p1", "type": "part", "fstype": "ext4", "mountpoint": "/"}]}
DLAMI_LV = {"name": "/dev/mapper/vg.01-lv_ephemeral", "type": "lvm", "fstype": "ext4", "mountpoint": "/opt/dlami/nvme"}
OUR_ARRAY = {"name": "/dev/md127", "type": "raid0", "fstype": "xfs"}


def instance_store(count: int, fstype: str = "", children: tuple = ()) -> list[dict]:
    return [{"name": f"/dev/nvme{i}n1", "type": "disk", "model": INSTANCE_STORE_MODEL, "fstype": fstype,
             "children": list(children)} for i in range(1, count + 1)]


BLANK = instance_store(2)
"""After a stop/start: the instance-store disks are blank."""
ARRAY_AFTER_REBOOT = instance_store(2, "linux_raid_member", (OUR_ARRAY,))
DLAMI_LVM = instance_store(2, "LVM2_member", (DLAMI_LV,))
"""As the Deep Learning AMI's dlami-nvme.service leaves them: LVM physical volumes of one striped lv_ephemeral."""
BUSY_MDADM = 'case "$1" in --create) echo "mdadm: cannot open $6: Device or resource busy" >&2 ;; esac; exit 1'


def lsblk_stub(tmp_path: Path, devices: list[dict]) -> str:
    table = tmp_path / "lsblk.json"
    table.write_text(json.dumps([ROOT_DISK, *devices]))
    program = tmp_path / "lsblk.py"
    program.write_text(FAKE_LSBLK)
    return f'exec {shlex.quote(sys.executable)} -S {shlex.quote(str(program))} {shlex.quote(str(table))} "$@"'


# ---------------------------------------------------------------- cloud-init enables the units once


def test_cloud_init_writes_the_units_and_enables_them_once_without_waiting_for_them(spec):
    doc, files = boot_files(spec)
    units = [*host_layer_units(spec), SCRATCH, FSX, HEALTH_EVIDENCE_UNIT, CONTAINER]
    for name in units:
        assert f"/etc/systemd/system/{name}" in files
        assert script_of(files, name).startswith("#!/bin/bash\n")
    (step,) = doc["runcmd"]
    lines = files[step].splitlines()
    timer = HEALTH_EVIDENCE_UNIT.replace(".service", ".timer")
    assert f"/etc/systemd/system/{timer}" in files
    enable = f"systemctl enable --now --no-block {' '.join(units)} {timer}"
    assert "systemctl daemon-reload" in lines
    assert enable in lines, "cloud-init must not hang on a mount that is still retrying"
    assert lines.index("systemctl daemon-reload") < lines.index(enable)


def test_every_unit_starts_on_every_boot_not_only_the_first(spec):
    _, files = boot_files(spec)
    for name in (SCRATCH, FSX, CONTAINER):
        assert unit(files, name)["Install"]["WantedBy"] == "multi-user.target"
        assert "ConditionFirstBoot" not in files[f"/etc/systemd/system/{name}"]
    for name in (SCRATCH, FSX):
        service = unit(files, name)["Service"]
        assert (service["Type"], service["RemainAfterExit"]) == ("oneshot", "yes")
    container = unit(files, CONTAINER)["Service"]
    assert container["Type"] in ("exec", "simple"), "the container runs in the unit's foreground"
    assert "RemainAfterExit" not in container
    assert "docker stop" in container["ExecStop"] and container["ExecStop"].endswith(" goldenenv")


def test_storage_is_mounted_before_docker_and_fsx_waits_for_the_network(spec):
    _, files = boot_files(spec)
    scratch, fsx = unit(files, SCRATCH), unit(files, FSX)
    for parsed in (scratch, fsx):
        assert {"docker.service", CONTAINER} <= set(parsed["Unit"]["Before"].split())
    assert "network-online.target" in fsx["Unit"]["After"].split()
    assert "network-online.target" in fsx["Unit"]["Wants"].split()


def test_the_container_starts_after_docker_and_its_steps_and_wants_them_without_requiring_them(spec):
    _, files = boot_files(spec)
    container = unit(files, CONTAINER)["Unit"]
    wanted = {"docker.service", SCRATCH, FSX}
    assert wanted <= set(container["After"].split())
    assert wanted <= set(container["Wants"].split())
    assert "Requires" not in container, "a failed dependency is never retried by systemd: the container would stay down"


@pytest.mark.parametrize("stack", ["spec", "bare_p5", "gn7i", "ebmgn8v"])
def test_every_step_retries_until_it_succeeds_and_the_container_always_comes_back(stack, request):
    chosen = request.getfixturevalue(stack)
    if stack == "ebmgn8v":
        _, files = node_files(chosen, ACR_REF, alicloud_storage.cpfs_mount(
            chosen.region, "cpfs-0123456789abcdef", "exp-0123456789abcdef"))
    elif stack == "gn7i":
        _, files = node_files(chosen, ACR_REF)
    else:
        _, files = boot_files(chosen)
    steps = [name for name in unit_names(files) if name != CONTAINER and name.endswith(".service")]
    assert SCRATCH in steps
    if stack == "ebmgn8v":
        assert {SHAREDFS, ERDMA} <= set(steps)
    for name in steps:
        parsed = unit(files, name)
        assert parsed["Service"]["Restart"] == "on-failure", name
        assert int(parsed["Service"]["RestartSec"]) > 0, name
        assert parsed["Unit"]["StartLimitIntervalSec"] == "0", f"{name}: systemd would give up after 5 failures"
    container = unit(files, CONTAINER)
    assert container["Service"]["Restart"] == "always"
    assert container["Unit"]["StartLimitIntervalSec"] == "0"
    assert "Requires" not in container["Unit"]
    assert set(steps) <= set(container["Unit"]["After"].split()) & set(container["Unit"]["Wants"].split())


def test_no_mount_is_left_in_fstab_to_hang_a_boot(spec, bare_p5, gn7i):
    for chosen in (spec, bare_p5, gn7i):
        _, files = node_files(chosen, ECR_REF, lustre_mount(FSX_DNS, FSX_MOUNT))
        for content in files.values():
            assert "/etc/fstab" not in content


def test_without_an_image_ref_no_container_unit_is_written(spec):
    doc, files = boot_files(spec, image_ref=None)
    assert f"/etc/systemd/system/{CONTAINER}" not in files
    (step,) = doc["runcmd"]
    units = [*host_layer_units(spec), SCRATCH, FSX, HEALTH_EVIDENCE_UNIT, HEALTH_EVIDENCE_UNIT.replace(".service",
                                                                                                     ".timer")]
    assert f"systemctl enable --now --no-block {' '.join(units)}" in files[step].splitlines()


def test_constructor_and_cloud_config_keep_their_old_signature(spec):
    boot = NodeBoot(spec, "gpu", "efa", True)
    doc = yaml.safe_load(boot.cloud_config())
    paths = [f["path"] for f in doc["write_files"]]
    assert f"/etc/systemd/system/{SCRATCH}" in paths
    assert not any("fsx" in p or "container" in p for p in paths), "no FSx address, no image: no such units"


# ---------------------------------------------------------------- scratch on the Deep Learning AMI: its own volume


def test_on_the_dlami_scratch_is_the_amis_own_instance_store_volume_and_mdadm_never_runs(spec, tmp_path):
    host = catalog.host_image(spec.cloud, spec.region)
    assert (host.instance_store_unit, host.instance_store_mount) == ("dlami-nvme.service", "/opt/dlami/nvme")
    mount_point = tmp_path / "scratch"
    _, files = boot_files(with_storage(spec, mount_point=str(mount_point)))
    scratch = unit(files, SCRATCH)["Unit"]
    assert host.instance_store_unit in scratch["After"].split(), "the AMI's service mounts its volume first"
    assert host.instance_store_unit in scratch["Wants"].split()
    stubs = {"lsblk": lsblk_stub(tmp_path, DLAMI_LVM), "mdadm": BUSY_MDADM, "mkfs.xfs": "exit 0", "mount": "exit 0",
             "mountpoint": mounted(host.instance_store_mount)}
    result, calls = run_script(tmp_path, script_of(files, SCRATCH), stubs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(c.startswith(("mdadm", "mkfs")) for c in calls), "the AMI's disks are its LVM volume's"
    bind = f"mount --bind {host.instance_store_mount} {mount_point}"
    assert bind in calls
    assert calls.index(bind) < calls.index(f"chown {UID}:{UID} {mount_point}"), "the volume is chowned, not the folder"


def test_when_the_dlami_found_no_disks_scratch_stays_on_the_root_volume(spec, tmp_path):
    mount_point = tmp_path / "scratch"
    _, files = boot_files(with_storage(spec, mount_point=str(mount_point)))
    stubs = {"lsblk": lsblk_stub(tmp_path, []), "mdadm": BUSY_MDADM, "mount": "exit 0", "mountpoint": mounted()}
    result, calls = run_script(tmp_path, script_of(files, SCRATCH), stubs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "root volume" in result.stdout
    assert not any(c.startswith(("mdadm", "mount ")) for c in calls)
    assert mount_point.is_dir()


# ---------------------------------------------------------------- scratch on a bare host: RAID0 of instance store

RAID_STUBS = {"mountpoint": "exit 1", "mdadm": "exit 0", "mkfs.xfs": "exit 0", "mount": "exit 0"}


def scratch_script(spec, tmp_path) -> tuple[str, Path]:
    mount_point = tmp_path / "scratch"
    _, files = boot_files(with_storage(spec, mount_point=str(mount_point)))
    return script_of(files, SCRATCH), mount_point


def test_blank_instance_store_after_stop_start_gets_a_new_array_and_filesystem(bare_p5, tmp_path):
    text, mount_point = scratch_script(bare_p5, tmp_path)
    stubs = {**RAID_STUBS, "lsblk": lsblk_stub(tmp_path, BLANK), "blkid": "exit 2"}
    result, calls = run_script(tmp_path, text, stubs)
    assert result.returncode == 0, result.stdout + result.stderr
    mdadm = [c for c in calls if c.startswith("mdadm ")]
    assert mdadm[0] == "mdadm --assemble --scan", "assemble what a reboot left before creating anything"
    assert mdadm[1] == "mdadm --create /dev/md0 --run --level=0 --raid-devices=2 /dev/nvme1n1 /dev/nvme2n1"
    assert "mkfs.xfs -f /dev/md0" in calls
    assert f"mount -o noatime /dev/md0 {mount_point}" in calls
    assert "blank after a stop/start" in result.stdout


def test_after_a_reboot_the_existing_array_and_data_are_kept(bare_p5, tmp_path):
    text, mount_point = scratch_script(bare_p5, tmp_path)
    stubs = {**RAID_STUBS, "lsblk": lsblk_stub(tmp_path, ARRAY_AFTER_REBOOT), "blkid": "exit 0"}
    result, calls = run_script(tmp_path, text, stubs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(c.startswith(("mdadm --create", "mkfs")) for c in calls)
    assert f"mount -o noatime /dev/md127 {mount_point}" in calls


def test_a_node_without_instance_store_says_so_and_boots_on(bare_p5, tmp_path):
    text, mount_point = scratch_script(bare_p5, tmp_path)
    result, calls = run_script(tmp_path, text, {**RAID_STUBS, "lsblk": lsblk_stub(tmp_path, []), "blkid": "exit 2"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no local NVMe instance-store disks" in result.stdout
    assert not any(c.startswith(("mdadm", "mkfs", "mount ")) for c in calls)
    assert mount_point.is_dir()


def test_disks_another_service_holds_fail_the_unit_naming_the_disk_and_the_catalog_not_mdadm(bare_p5, tmp_path):
    text, mount_point = scratch_script(bare_p5, tmp_path)
    stubs = {**RAID_STUBS, "lsblk": lsblk_stub(tmp_path, DLAMI_LVM), "mdadm": BUSY_MDADM, "blkid": "exit 0"}
    result, calls = run_script(tmp_path, text, stubs)
    assert result.returncode != 0
    assert "/dev/nvme1n1" in result.stdout
    assert "host_images.csv" in result.stdout and "instance_store_unit" in result.stdout
    assert "Device or resource busy" not in result.stdout + result.stderr
    assert not any(c.startswith(("mdadm", "mkfs", "mount ")) for c in calls), "nothing is done to a held disk"
    assert not any(c.startswith("chown") for c in calls)


# ---------------------------------------------------------------- scratch, every way: the image user owns it


SCRATCH_VARIANTS = {
    # name: (stack fixture, block devices, mounted paths ("SCRATCH": the scratch mount point itself), blkid)
    "dlami-volume": ("spec", DLAMI_LVM, ["/opt/dlami/nvme"], "exit 0"),
    "dlami-no-volume": ("spec", [], [], "exit 2"),
    "bare-blank-array": ("bare_p5", BLANK, [], "exit 2"),
    "bare-array-after-reboot": ("bare_p5", ARRAY_AFTER_REBOOT, [], "exit 0"),
    "bare-already-mounted": ("bare_p5", ARRAY_AFTER_REBOOT, ["SCRATCH"], "exit 0"),
    "bare-g5-single-disk": ("bare_g5", instance_store(1), [], "exit 2"),
    "bare-no-disks": ("bare_p5", [], [], "exit 2"),
    "no-instance-store-gn7i": ("gn7i", [], [], "exit 2"),
}


@pytest.mark.parametrize("variant", SCRATCH_VARIANTS)
def test_scratch_is_owned_by_the_image_user_and_open_to_all_in_every_variant(variant, request, tmp_path):
    stack, devices, mounts, blkid = SCRATCH_VARIANTS[variant]
    mount_point = tmp_path / "scratch"
    _, files = node_files(with_storage(request.getfixturevalue(stack), mount_point=str(mount_point)), ECR_REF)
    stubs = {**RAID_STUBS, "lsblk": lsblk_stub(tmp_path, devices), "blkid": blkid,
             "mountpoint": mounted(*(mount_point if m == "SCRATCH" else m for m in mounts))}
    result, calls = run_script(tmp_path, script_of(files, SCRATCH), stubs)
    assert result.returncode == 0, result.stdout + result.stderr
    chown = f"chown {UID}:{UID} {mount_point}"
    assert chown in calls, "left to Docker, the bind source would be root's, 0755"
    mounts_done = [i for i, c in enumerate(calls) if c.startswith("mount ")]
    assert all(i < calls.index(chown) for i in mounts_done), "what is mounted is chowned, not the folder beneath"
    assert stat.S_IMODE(mount_point.stat().st_mode) == 0o1777


# ---------------------------------------------------------------- shared file systems, every boot

FSX_STUBS = {"mountpoint": "exit 1", "mount": "exit 0", "mount.lustre": "exit 0", "modinfo": "exit 0",
             "apt-get": "exit 1", "curl": "exit 1"}


def test_fsx_is_mounted_and_its_folders_made_on_every_boot(spec, tmp_path):
    mount_point = tmp_path / "fsx"
    _, files = boot_files(with_storage(spec, fs_mount_point=str(mount_point)))
    result, calls = run_script(tmp_path, script_of(files, FSX), FSX_STUBS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"mount -t lustre -o relatime,flock {FSX_DNS}@tcp:/{FSX_MOUNT} {mount_point}" in calls
    assert not any(c.startswith(("apt-get", "curl")) for c in calls), "the host image's client is used as it is"
    assert (mount_point / "datasets").is_dir() and (mount_point / "checkpoints").is_dir()


@pytest.mark.parametrize("kind", ["fsx", "nas"])
def test_the_shared_file_system_has_a_code_folder_the_image_user_owns(kind, spec, ebmgn8v, tmp_path):
    mount_point = tmp_path / "shared"
    if kind == "fsx":
        _, files = boot_files(with_storage(spec, fs_mount_point=str(mount_point)))
        result, calls = run_script(tmp_path, script_of(files, FSX), FSX_STUBS)
    else:
        _, files = node_files(with_storage(ebmgn8v, fs_mount_point=str(mount_point)), ACR_REF,
                              alicloud_storage.nas_mount(NAS_DOMAIN))
        stubs = {"mountpoint": "exit 1", "mount": "exit 0", "mount.nfs": "exit 0", "apt-get": "exit 1",
                 "yum": "exit 1"}
        result, calls = run_script(tmp_path, script_of(files, SHAREDFS), stubs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (mount_point / "code").is_dir(), "`goldenenv run --code` copies code there"
    (chown,) = [c.split() for c in calls if c.startswith("chown")]
    assert chown[1] == f"{UID}:{UID}" and str(mount_point / "code") in chown[2:]


def test_cpfs_makes_and_chowns_the_code_folder_too(ebmgn8v):
    # CPFS looks its export up from the NAS API and caches it under /var/lib: its folder lines are read, not run
    _, files = node_files(ebmgn8v, ACR_REF, alicloud_storage.cpfs_mount(
        ebmgn8v.region, "cpfs-0123456789abcdef", "exp-0123456789abcdef"))
    code = f"{ebmgn8v.storage.parallel_fs.mount_point}/code"
    lines = script_of(files, SHAREDFS).splitlines()
    (mkdir,) = [line.split() for line in lines if line.startswith("mkdir -p /")]
    (chown,) = [line.split() for line in lines if line.startswith(f"chown {UID}:{UID} ")]
    assert code in mkdir and code in chown


def test_a_failing_fsx_mount_fails_the_unit_so_the_container_stays_down(spec, tmp_path):
    _, files = boot_files(with_storage(spec, mount_point=str(tmp_path / "scratch"),
                                       fs_mount_point=str(tmp_path / "fsx")))
    steps_done(files)  # a boot that went well; now the FSx step runs again and fails
    text = script_of(files, FSX).replace("sleep 15", "sleep 0")
    stubs = {"mountpoint": "exit 1", "mount": "exit 32", "mount.lustre": "exit 0", "modinfo": "exit 0"}
    result, calls = run_script(tmp_path, text, stubs)
    assert result.returncode != 0
    assert len([c for c in calls if c.startswith("mount -t lustre")]) == 10
    assert "could not mount" in result.stdout
    result, calls = run_script(tmp_path, script_of(files, CONTAINER), {"docker": DOCKER, "aws": AWS})
    assert result.returncode != 0 and f"waiting for {FSX}" in result.stdout
    assert not any(c.startswith("docker") for c in calls)


def test_lustre_client_fallback_comes_from_the_fsx_repository_on_s3_not_the_ubuntu_archive(spec):
    _, files = boot_files(spec)
    text = script_of(files, FSX)
    assert "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc" in text
    assert "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $codename main" in text
    commands = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert not any("archive.ubuntu.com" in line for line in commands)
    update = next(line for line in commands if "apt-get update" in line)
    assert "Dir::Etc::sourceparts=-" in update, "refresh only the FSx source: the others need NAT"


# ---------------------------------------------------------------- eRDMA: one device per ERI, from `rdma dev show`


def erdma_stubs(erdma_devices: int) -> dict[str, str]:
    dev = [f"{i}: erdma_{i}: node_type ca fw 0.2.0 node_guid 0216:3eff:fe00:000{i} sys_image_guid "
           f"0216:3eff:fe00:000{i}" for i in range(erdma_devices)]
    dev.append(f"{erdma_devices}: rxe0: node_type ca fw 0.0.0 node_guid 0000:0000:0000:0001")  # not an ERI
    link = [f"link erdma_{i}/1 state ACTIVE physical_state LINK_UP netdev eth{i + 1}" for i in range(erdma_devices)]
    quoted = {name: " ".join(shlex.quote(line) for line in lines) for name, lines in (("dev", dev), ("link", link))}
    return {"lsmod": 'printf "%s\\n" "Module Size Used by" "erdma 200704 0"', "modprobe": "exit 0",
            "ip": "exit 0", "rdma": f'case "$1 $2" in "dev show") printf "%s\\n" {quoted["dev"]} ;; '
                                    f'"link show") printf "%s\\n" {quoted["link"]} ;; esac'}


@pytest.mark.parametrize("devices", [1, 2])
def test_the_erdma_check_counts_the_devices_rdma_dev_show_lists(devices, ebmgn8v, tmp_path):
    _, files = node_files(ebmgn8v, ACR_REF)
    it = catalog.instance_type(ebmgn8v.cloud, ebmgn8v.nodes[0].instance_type)
    mtu = catalog.fabric_mtu("erdma", catalog.node_layout(ebmgn8v.cloud, it.name).jumbo_frames).mtu
    assert it.rdma_interfaces == 2
    result, calls = run_script(tmp_path, script_of(files, ERDMA), erdma_stubs(devices))
    if devices < it.rdma_interfaces:
        assert result.returncode != 0
        assert f"{devices} eRDMA device" in result.stdout and f"expected {it.rdma_interfaces}" in result.stdout
        assert not any(c.startswith("ip link set") for c in calls)
    else:
        assert result.returncode == 0, result.stdout + result.stderr
        for i in range(devices):
            assert f"ip link set dev eth{i + 1} mtu {mtu}" in calls


# ---------------------------------------------------------------- the golden container, by digest only

# No image on the node yet; `docker login` reads the password from stdin as the real one does.
DOCKER = 'case "$1" in image) exit 1 ;; login) cat >/dev/null ;; esac; exit 0'
AWS = "echo token"


def docker_run(calls: list[str]) -> list[str]:
    (run,) = [c for c in calls if c.startswith("docker run")]
    return run.split()


def restart_policy(run: list[str]) -> str:
    """Docker's restart policy for that `docker run`: --restart X, --restart=X, or Docker's default, no."""
    for i, arg in enumerate(run):
        if arg == "--restart":
            return run[i + 1]
        if arg.startswith("--restart="):
            return arg.split("=", 1)[1]
    return "no"


def test_the_container_waits_for_every_step_then_runs_in_the_foreground_with_dockers_restart_off(spec, tmp_path):
    scratch, fsx = tmp_path / "scratch", tmp_path / "fsx"
    _, files = boot_files(with_storage(spec, mount_point=str(scratch), fs_mount_point=str(fsx)))
    container = script_of(files, CONTAINER)
    stubs = {"docker": DOCKER, "aws": AWS}

    result, calls = run_script(tmp_path, container, stubs)
    assert result.returncode != 0 and "waiting for" in result.stdout, "no step done: no container"
    assert not any(c.startswith(("docker", "aws")) for c in calls)
    for name in host_layer_units(spec):  # its install step (test_host_install.py) leaves its marker
        assert f"waiting for {name}" in result.stdout
        Path(nodeboot.ready_marker(name)).parent.mkdir(parents=True, exist_ok=True)
        Path(nodeboot.ready_marker(name)).touch()

    dlami = catalog.host_image(spec.cloud, spec.region).instance_store_mount
    step, _ = run_script(tmp_path, script_of(files, SCRATCH), {"mount": "exit 0", "mountpoint": mounted(dlami)})
    assert step.returncode == 0, step.stdout + step.stderr
    result, calls = run_script(tmp_path, container, stubs)
    assert result.returncode != 0 and f"waiting for {FSX}" in result.stdout, "scratch alone is not enough"
    assert not any(c.startswith(("docker", "aws")) for c in calls)

    step, _ = run_script(tmp_path, script_of(files, FSX), FSX_STUBS)
    assert step.returncode == 0, step.stdout + step.stderr
    result, calls = run_script(tmp_path, container, stubs)
    assert result.returncode != 0 and f"waiting for {HEALTH_EVIDENCE_UNIT}" in result.stdout

    xid = "NVRM: Xid (PCI:0000:53:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    step, _ = run_script(tmp_path, script_of(files, HEALTH_EVIDENCE_UNIT), {
        "journalctl": f"echo 'kernel: eth0 up'; echo {shlex.quote(xid)}", "systemctl": "echo active"})
    assert step.returncode == 0, step.stdout + step.stderr
    assert Path(nodeboot.HOST_HEALTH_DIR, "kernel.log").read_text().strip() == xid  # only the XID lines
    assert Path(nodeboot.HOST_HEALTH_DIR, "fabric_manager.txt").read_text().strip() == "active"  # p5: NVSwitch
    result, calls = run_script(tmp_path, container, stubs)
    assert result.returncode == 0, result.stdout + result.stderr
    run = docker_run(calls)
    assert "--rm" in run
    assert restart_policy(run) == "no", "a Docker restart must never revive a container on old mounts"
    assert not {"unless-stopped", "always", "-d", "--detach"} & set(run)
    assert f"{scratch}:{scratch}" in run and f"{fsx}:{fsx}" in run
    assert f"{nodeboot.HOST_HEALTH_DIR}:{judge.HOST_EVIDENCE_DIR}:ro" in run


def test_a_container_that_ends_ends_the_unit_so_systemd_starts_it_again(spec, tmp_path):
    _, files = boot_files(spec)
    steps_done(files)
    docker = 'case "$1" in run) exit 137 ;; esac; exit 0'
    result, calls = run_script(tmp_path, script_of(files, CONTAINER), {"docker": docker, "aws": AWS})
    assert result.returncode == 137
    assert calls[-1].startswith("docker run"), "nothing after the container: the unit lives as long as it does"


def test_the_container_is_pulled_by_digest_and_recreated_with_its_mounts(spec, tmp_path):
    _, files = boot_files(spec)
    steps_done(files)
    result, calls = run_script(tmp_path, script_of(files, CONTAINER), {"docker": DOCKER, "aws": AWS})
    assert result.returncode == 0, result.stdout + result.stderr
    registry = ECR_REF.split("/")[0]
    assert "aws ecr get-login-password --region us-east-1" in calls
    assert f"docker login --username AWS --password-stdin {registry}" in calls
    assert f"docker pull {ECR_REF}" in calls
    assert calls.index("docker rm -f goldenenv") < next(i for i, c in enumerate(calls) if c.startswith("docker run"))
    run = " ".join(docker_run(calls))
    assert "--name goldenenv" in run and "--env-file /etc/goldenenv/launch.env" in run
    assert "--volume /scratch:/scratch" in run and "--volume /fsx:/fsx" in run
    assert run.endswith(f"{ECR_REF} sleep infinity")


def test_an_image_already_on_the_node_is_not_pulled_again(spec, tmp_path):
    _, files = boot_files(spec)
    steps_done(files)
    result, calls = run_script(tmp_path, script_of(files, CONTAINER), {"docker": "exit 0", "aws": AWS})
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(c.startswith(("docker pull", "aws ")) for c in calls)
    assert any(c.startswith("docker run") for c in calls)


@pytest.mark.parametrize("ref", [
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv/aws-h100:latest",
    "registry.example.com/golden@sha256:1234",
    f"registry.example.com/golden:v1@{DIGEST.upper()}",
])
def test_a_ref_not_pinned_by_digest_is_refused(spec, tmp_path, ref):
    _, files = boot_files(spec, image_ref=ref)
    steps_done(files)
    result, calls = run_script(tmp_path, script_of(files, CONTAINER), {"docker": DOCKER, "aws": AWS})
    assert result.returncode != 0
    assert "digest only" in result.stdout
    assert not any(c.startswith(("docker", "aws")) for c in calls)


@pytest.mark.parametrize("ref", [
    "x; touch pwned",
    "$(touch pwned)",
    "`touch pwned`@" + DIGEST,
    "x'; touch pwned; echo '",
    "registry.example.com/golden@" + DIGEST + "\ntouch pwned",
])
def test_a_hostile_image_ref_cannot_run_a_command(spec, tmp_path, ref):
    _, files = boot_files(spec, image_ref=ref)
    steps_done(files)
    text = script_of(files, CONTAINER)
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0
    result, calls = run_script(tmp_path, text, {"docker": DOCKER, "aws": AWS, "touch": "exit 0"})
    assert result.returncode != 0
    assert "digest only" in result.stdout
    assert not (tmp_path / "cwd" / "pwned").exists()
    assert not any(c.startswith(("touch", "docker", "aws")) for c in calls)


def test_a_hostile_folder_name_reaches_mkdir_as_one_literal_path(spec, tmp_path, ready_dir):
    mount_point = tmp_path / "fsx"
    hostile = with_storage(spec, fs_mount_point=str(mount_point), fs_dataset_prefix="data; touch pwned $(id)/")
    _, files = boot_files(hostile)
    stubs = {"mountpoint": "exit 1", "mount": "exit 0", "mount.lustre": "exit 0", "modinfo": "exit 0",
             "touch": "exit 0", "id": "exit 0"}
    result, calls = run_script(tmp_path, script_of(files, FSX), stubs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (mount_point / "data; touch pwned $(id)").is_dir()
    assert not any(c.startswith("id") for c in calls)
    touched = [c for c in calls if c.startswith("touch")]
    assert all(c.startswith(f"touch {ready_dir}/") and "pwned" not in c for c in touched), touched
    assert not (tmp_path / "cwd" / "pwned").exists()


@pytest.mark.parametrize("stack", ["spec", "bare_p5", "gn7i", "ebmgn8v"])
def test_rendered_scripts_are_valid_bash(stack, request):
    chosen = request.getfixturevalue(stack)
    shared_fs = (alicloud_storage.cpfs_mount(chosen.region, "cpfs-0123456789abcdef", "exp-0123456789abcdef")
                 if chosen.cloud == "alicloud" else lustre_mount(FSX_DNS, FSX_MOUNT))
    _, files = node_files(chosen, ECR_REF, shared_fs)
    for path, content in files.items():
        if content.startswith("#!/bin/bash"):
            checked = subprocess.run(["bash", "-n"], input=content, text=True, capture_output=True)
            assert checked.returncode == 0, f"{path}: {checked.stderr}"


def test_scripts_are_executable_and_units_are_not(spec, gn7i):
    for doc, _ in (boot_files(spec), node_files(gn7i, ACR_REF)):
        modes = {f["path"]: f["permissions"] for f in doc["write_files"]}
        for path, mode in modes.items():
            expected = "0644" if path.startswith(("/etc/systemd/", "/etc/goldenenv/")) else "0755"
            assert mode == expected, path
