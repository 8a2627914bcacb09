"""What an emulated host has instead of hardware and cloud services, each behaving as its public source says.

Everything else on the host is real: Debian 12's systemd as PID 1, cloud-init reading a NoCloud seed, sshd, the
Docker CLI, util-linux's mount, iproute2. The stand-ins:

- the engine: the host has no Docker engine of its own (this machine's engine refuses --privileged, so no
  Docker-in-Docker); its CLI reaches the machine's engine through the socket. `docker` on the host is a thin
  adapter over the real CLI that keeps what an engine per host would give: the container's name is the host's
  own (`goldenenv` on every host), `--network host` is the host's network, and a bind source means the host's
  path (it is translated to the same data's path on this machine); `--add-host` with the host's network is an
  entry of the hosts file the container shares with the host. `--gpus` gives the container a device node
  /dev/nvidia<i> per GPU of the instance type, as the NVIDIA Container Toolkit does (a character device standing
  for each GPU: /dev/null's). RDMA devices and the unlimited locked memory RDMA needs stand for hardware the
  machine lacks and are dropped (this engine refuses `--ulimit memlock=-1`: "error setting rlimit type 8:
  operation not permitted").
  `--privileged` is dropped too (the engine refuses it), and `--network=host` is `--network host`. A device node a
  stand-in kernel module registered (`--device`, or a bind of it) is /dev/null's in the container, as the GPUs' are;
  `--device` naming one the host lacks is refused as Docker refuses it. A bind source's binds made below it by the
  host come along, as Docker binds a folder recursively (the aperture devices' PCI functions).
- docker.service: on a node it is the engine; here it waits for the machine's engine socket.
- instance-store disks as the AWS Deep Learning AMI leaves them: its dlami-nvme.service claims them at every boot
  (blank after a stop/start) and mounts the volume at /opt/dlami/nvme; here a folder of this machine stands for
  the volume and is bound there, empty on every boot, as a stop/start leaves instance store.
- bare local NVMe disks, as Google's Local SSD and Azure's NVMe Direct Disks come (no host service claims them):
  `lsblk` lists the recorded disks of the cloud with their models (a capture of tests/unit/captures/local_nvme/),
  and mdadm, blkid, mkfs.xfs and mount act on them as on blank disks. Only the capture's local disks can join an
  array or take a file system (an OS or data disk is busy: mdadm's and mkfs's refusal); the array's file system,
  mounted, is the machine folder standing for the disks, emptied when the file system is made.
- `mount -t lustre` / `mount -t nfs`: the file system server is a folder of this machine shared by every host of
  the stack; the mount helpers check the source as Lustre's and NFS's do, then bind that folder.
- a Compute Engine GPU host's PCI view (gce_gpu_host_files): every NIC a gVNIC (driver gve in sysfs) at the PCI
  address its predictable name gives, `lspci -nn -D` listing them and, on A3 Mega, an aperture device (1ae0:0084)
  beside each GPU NIC with its resource files; the kernel modules the host image has: `modprobe` loads one (its
  device nodes appear: import_helper's /dev/dmabuf_import_helper) and `lsmod` lists it, any other is not found.
- the NVIDIA driver (`nvidia-smi` answering from a capture of the instance type), the eRDMA driver (`lsmod`,
  `modprobe erdma`, `rdma dev|link show` as iproute2 prints them, one device per ERI on the host's interfaces).
- the GPUs' and the fabric's answers to the node health check (goldenenv-health): healthy evidence for the instance
  type, in the formats nvidia-smi, fi_info and iproute2's rdma print (the recorded p5 in tests/unit/captures/health
  shows them), given to the golden container as the recorded state the check reads instead of running the commands
  (`--gpus` mounts it at /etc/goldenenv/health/recorded, as the toolkit gives the container what the driver has).
- the cloud's instance metadata service (tokens required), answering with the credentials the emulated cloud
  issued for the host's role (tests/nodeboot/emulated_cloud.py). The cloud's APIs themselves (Secrets Manager,
  KMS, NAS: tests/nodeboot/cloud_apis.py) are not on the host: it reaches them by their endpoints' names over
  TLS, with the run's CA among the ones it trusts.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

CONFIG = "/etc/goldenenv-emulated"
"""Per-host facts the stand-ins read: name, rootfs, sharedfs, nvme, erdma."""


@dataclass(frozen=True)
class Disks:
    """A cloud node's disks as recorded (tests/unit/captures/local_nvme/<cloud>_<type>.txt)."""

    lsblk: str
    """`lsblk -dpno NAME,MODEL` as the node prints it: its OS, data and local disks with their models."""
    local: tuple[str, ...]
    """Which of them are the local NVMe disks."""

    @classmethod
    def recorded(cls, capture) -> Disks:
        """The capture's `$ lsblk -dpno NAME,MODEL` and `$ local` sections."""
        sections: dict[str, list[str]] = {}
        current = None
        for line in open(capture).read().splitlines():
            if line.startswith("$ "):
                current = sections.setdefault(line[2:].split()[0], [])
            elif current is not None and line.strip() and not line.startswith("#"):
                current.append(line)
        return cls("".join(f"{line}\n" for line in sections["lsblk"]), tuple(sections.get("local", ())))
HEALTH = CONFIG + "/health"
"""The hardware's healthy answers to the health check's commands (healthy_evidence)."""
RECORDED = "/etc/goldenenv/health/recorded"
"""Where a node's health check takes recorded evidence instead of running its commands (goldenenv-healthcheck)."""
BINDS = "/run/goldenenv-emulated/binds"
"""`<host path> <machine path>` for each bind a stand-in made; /run empties on every boot, as mounts do."""

DOCKER = r'''#!/usr/bin/python3
"""The host's docker: the real CLI on the machine's engine, with what an engine of the host's own would give."""
import os, stat, sys

CONFIG = "%(config)s"
BINDS = "%(binds)s"
HEALTH = "%(health)s"
RECORDED = "%(recorded)s"
NAMED = {"rm", "exec", "stop", "start", "kill", "logs", "inspect", "restart", "wait", "top", "port"}
FLAGS = {"--rm", "--init", "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--read-only", "--privileged"}
"""`docker run` options that take no value"""
VALUED = {"-e", "--env", "-u", "--user", "-w", "--workdir", "--env-file", "-t", "--time", "--signal", "-s",
          "-f", "--format", "--since", "--tail", "-n", "--type"}


def fact(name):
    with open(os.path.join(CONFIG, name)) as f:
        return f.read().strip()


HOST = fact("name")


def scoped(name):
    return name if name.startswith(HOST + "-") else HOST + "-" + name


def mount_of(path):
    """(device, root within it, mount point) of the mount holding path (/proc/self/mountinfo)."""
    best = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and (best is None or len(point) >= len(best[2])):
                best = (fields[2], fields[3], point)
    return best


def bound_path(path):
    """The machine's path of a host path inside a bind a stand-in made (or a bind of one, as scratch binds the
    DLAMI's volume, or of a folder within one, as the TCPXO check binds a PCI function under the aperture devices'
    folder); None where no such bind holds it."""
    path = os.path.realpath(path)
    device, root, point = mount_of(path)
    try:
        with open(BINDS) as f:
            binds = [line.strip().split(" ", 1) for line in f if line.strip()]
    except FileNotFoundError:
        binds = []
    below = path[len(point.rstrip("/")):] if point != "/" else path
    for inside, outside in binds:
        if mount_of(inside)[:2] == (device, root):
            return outside + below
    for inside, outside in binds:
        inside_device, inside_root = mount_of(inside)[:2]
        if inside_device == device and root.startswith(inside_root.rstrip("/") + "/"):
            return outside + root[len(inside_root.rstrip("/")):] + below
    return None


def machine_path(path):
    """The machine's path of a host path: inside a bind a stand-in made, else on the host's root file system."""
    return bound_path(path) or fact("rootfs") + os.path.realpath(path)


def submounts(source, rest):
    """`--mount` options for the binds a stand-in made below a bind source: Docker binds a folder recursively, so the
    container sees what is mounted beneath it (the aperture devices' PCI functions under their folder, whose names
    hold colons, which `--volume` cannot carry)."""
    top = os.path.realpath(source).rstrip("/")
    target, _, options = rest.partition(":")
    out = []
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    for point in sorted(set(points)):
        if point.startswith(top + "/") and (outside := bound_path(point)):
            inner = target.rstrip("/") + point[len(top):]
            readonly = ",readonly" if "ro" in options.split(",") else ""
            out += ["--mount", "type=bind,source=" + outside + ",target=" + inner + readonly]
    return out


def stand_in_devices():
    """The device nodes the host's stand-in kernel modules register (CONFIG/modules: `<module> [<device>...]`)."""
    try:
        with open(os.path.join(CONFIG, "modules")) as f:
            return {device for line in f for device in line.split()[1:]}
    except FileNotFoundError:
        return set()


def is_device(path):
    return os.path.exists(path) and stat.S_ISCHR(os.stat(path).st_mode)


def add_host(entry):
    """--add-host NAME:IP with the host's network: the engine refuses it with a container's network, whose hosts
    file the container shares, so the entry goes there, as an engine of the host's own puts it in the container's."""
    name, _, address = entry.partition(":")
    line = address + " " + name
    with open("/etc/hosts") as f:
        if line in f.read().splitlines():
            return
    with open("/etc/hosts", "a") as f:
        f.write(line + "\n")


def run_args(args):
    """`docker run`'s options, as an engine of the host's own would take them; from the image on, unchanged."""
    out, i, hosts = [], 0, []
    host_network = False
    j = 0
    while j < len(args) and args[j].startswith("-"):
        if args[j] == "--network=host":  # as RxDM's publisher writes it
            args = args[:j] + ["--network", "host"] + args[j + 1:]
        host_network = host_network or args[j:j + 2] == ["--network", "host"]
        j += 1 if args[j] in FLAGS or "=" in args[j] else 2
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):  # the image: what follows is the container's command
            out += args[i:]
            break
        if a == "--add-host" and host_network:
            hosts.append(args[i + 1])
            i += 2
            continue
        if a == "--gpus":  # the NVIDIA toolkit gives the container each GPU's device node
            for index in range(int(fact("gpus") or 0)):
                out += ["--volume", "/dev/null:/dev/nvidia%%d" %% index]
            if os.path.isdir(HEALTH):  # and the hardware's answers to the health check
                out += ["--volume", machine_path(HEALTH) + ":" + RECORDED + ":ro"]
            i += 2
            continue
        if a == "--privileged":  # this machine's engine refuses it; the stand-ins give what it would expose
            i += 1
            continue
        if a == "--device" and i + 1 < len(args):
            source, _, target = args[i + 1].partition(":")
            if source in stand_in_devices():  # a stand-in module's device node is /dev/null's, as the GPUs' are
                if not is_device(source):
                    sys.stderr.write("docker: Error response from daemon: error gathering device information while "
                                     "adding custom device \"%%s\": no such file or directory.\n" %% source)
                    sys.exit(125)
                out += ["--volume", "/dev/null:" + (target.split(":")[0] or source)]
            i += 2
            continue
        if a == "--ulimit" and args[i + 1].startswith("memlock="):
            i += 2  # locked memory is for RDMA buffers; this machine's engine may not raise it (EPERM)
            continue
        if a == "--name":
            out += [a, scoped(args[i + 1])]
            i += 2
            continue
        if a == "--network" and args[i + 1] == "host":
            out += [a, "container:" + HOST]
            i += 2
            continue
        if a in ("--volume", "-v"):
            source, _, rest = args[i + 1].partition(":")
            if source in stand_in_devices() and is_device(source):
                out += [a, "/dev/null:" + rest]
            else:
                out += [a, machine_path(source) + ":" + rest] + submounts(source, rest)
            i += 2
            continue
        if a in FLAGS or "=" in a:
            out.append(a)
            i += 1
        else:
            out += args[i:i + 2]
            i += 2
    for entry in hosts:
        add_host(entry)
    return ["--label", "goldenenv-emulated=" + HOST] + out


def named_args(args):
    out, i, done = [], 0, False
    while i < len(args):
        a = args[i]
        if not done and a in VALUED and i + 1 < len(args):
            out += [a, args[i + 1]]
            i += 2
            continue
        if not done and not a.startswith("-"):
            out.append(scoped(a))
            done = True
        else:
            out.append(a)
        i += 1
    return out


argv = sys.argv[1:]
if argv and argv[0] == "run":
    argv = ["run"] + run_args(argv[1:])
elif argv and argv[0] in NAMED:
    argv = [argv[0]] + named_args(argv[1:])
elif argv[:2] == ["container", "inspect"]:
    argv = argv[:2] + named_args(argv[2:])
os.execv("/usr/bin/docker", ["docker"] + argv)
''' % {"config": CONFIG, "binds": BINDS, "health": HEALTH, "recorded": RECORDED}

BIND = r'''#!/bin/bash
# bind <machine folder> <host mount point>: mount it and record the pair for the host's docker
set -euo pipefail
mkdir -p "$2"
mount --bind "$1" "$2"
mkdir -p "$(dirname %(binds)s)"
echo "$(realpath "$2") $1" >> %(binds)s
''' % {"binds": BINDS}

ENGINE_UNIT = """[Unit]
Description=Docker engine (emulated host: the machine's engine, reached through its socket)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'until docker version >/dev/null 2>&1; do sleep 1; done'
TimeoutStartSec=120
[Install]
WantedBy=multi-user.target
"""

DLAMI_UNIT = """[Unit]
Description=DLAMI instance store (emulated: vg.01/lv_ephemeral at /opt/dlami/nvme)
After=local-fs.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/libexec/emulated/dlami-nvme
[Install]
WantedBy=multi-user.target
"""

DLAMI_SCRIPT = r'''#!/bin/bash
# As the DLAMI's nvme_ephemeral_drives.sh on a stop/start: blank disks, a new striped volume, mounted empty.
set -euo pipefail
volume=$(cat %(config)s/nvme)
find "$volume" -mindepth 1 -delete
/usr/local/libexec/emulated/bind "$volume" /opt/dlami/nvme
echo "dlami-nvme: vg.01/lv_ephemeral mounted at /opt/dlami/nvme"
''' % {"config": CONFIG}

DISKS = CONFIG + "/disks"
"""The bare local disks' facts: `lsblk` (the recorded `lsblk -dpno NAME,MODEL`), `local` (which of them are local)."""
DISK_STATE = "/run/goldenenv-emulated/disks"
"""The array and file system made on the local disks this boot: a stop/start hands back blank disks."""

LOCAL_LSBLK = r'''#!/bin/bash
# lsblk on a host with the recorded disks: their names and models as the cloud's node lists them; a question about one
# of them as a blank disk (or a member of the array made this boot) answers; anything else is util-linux's
set -euo pipefail
disks=%(disks)s; state=%(state)s
[ "$*" = "-dpno NAME,MODEL" ] && exec cat "$disks/lsblk"
last=${!#}
if awk -v d="$last" '$1 == d {found = 1} END {exit !found}' "$disks/lsblk"; then
  member=""; [ -e "$state/members" ] && grep -qx -- "$last" "$state/members" && member=1
  case "$1 $2" in
    "-ndo FSTYPE") [ -n "$member" ] && echo linux_raid_member; exit 0 ;;
    "-ndo MOUNTPOINT") exit 0 ;;
    "-nlo TYPE") echo disk; [ -n "$member" ] && echo raid0; exit 0 ;;
    "-nlo NAME,TYPE"|"-lnpo NAME,TYPE") echo "$last disk"; [ -n "$member" ] && echo "/dev/md0 raid0"; exit 0 ;;
  esac
fi
exec /usr/bin/lsblk "$@"
''' % {"disks": DISKS, "state": DISK_STATE}

LOCAL_MDADM = r'''#!/bin/bash
# mdadm on blank local disks: nothing to assemble after a stop/start; an array only over the local disks
set -euo pipefail
disks=%(disks)s; state=%(state)s
case "${1:-}" in
  --assemble) exit 0 ;;
  --create)
    device=$2; members=()
    for arg in "${@:3}"; do [[ $arg == /dev/* ]] && members+=("$arg"); done
    for member in "${members[@]}"; do
      grep -qx -- "$member" "$disks/local" || { echo "mdadm: cannot open $member: Device or resource busy" >&2; exit 1; }
    done
    mkdir -p "$state" && printf '%%s\n' "${members[@]}" > "$state/members" && echo "$device" > "$state/array"
    echo "mdadm: array $device started." ;;
  *) echo "mdadm (emulated): $*: not emulated" >&2; exit 1 ;;
esac
''' % {"disks": DISKS, "state": DISK_STATE}

LOCAL_DEVICE = r'''is_local() {  # the array made this boot, or a single local disk
  { [ -e %(state)s/array ] && [ "$1" = "$(cat %(state)s/array)" ]; } || grep -qx -- "$1" %(disks)s/local
}
''' % {"disks": DISKS, "state": DISK_STATE}

LOCAL_BLKID = r'''#!/bin/bash
%(is_local)s
if [ $# -eq 1 ] && is_local "$1"; then [ -e %(state)s/filesystem ]; exit; fi
exec /usr/sbin/blkid "$@"
''' % {"is_local": LOCAL_DEVICE, "state": DISK_STATE}

LOCAL_MKFS_XFS = r'''#!/bin/bash
# mkfs.xfs -f DEVICE: a new, empty file system on the local disks (the machine folder that stands for them, emptied)
set -euo pipefail
%(is_local)s
device=${!#}
is_local "$device" || { echo "mkfs.xfs: cannot open $device: Device or resource busy" >&2; exit 1; }
find "$(cat %(config)s/nvme)" -mindepth 1 -delete
mkdir -p %(state)s && touch %(state)s/filesystem
echo "meta-data=$device isize=512 (emulated)"
''' % {"is_local": LOCAL_DEVICE, "state": DISK_STATE, "config": CONFIG}

LOCAL_MOUNT = r'''#!/bin/bash
# mount [-o options] DEVICE DIR: the local disks' file system is the machine folder standing for them, bound at DIR;
# every other mount is util-linux's
%(is_local)s
words=(); skip=""
for arg in "$@"; do
  if [ -n "$skip" ]; then skip=""; continue; fi
  case "$arg" in -o|-t) skip=1 ;; -*) ;; *) words+=("$arg") ;; esac
done
if [ "${#words[@]}" -eq 2 ] && is_local "${words[0]}"; then
  [ -e %(state)s/filesystem ] || { echo "mount: ${words[1]}: wrong fs type, bad option, bad superblock on ${words[0]}" >&2; exit 32; }
  exec /usr/local/libexec/emulated/bind "$(cat %(config)s/nvme)" "${words[1]}"
fi
exec /usr/bin/mount "$@"
''' % {"is_local": LOCAL_DEVICE, "state": DISK_STATE, "config": CONFIG}

MOUNT_LUSTRE = r'''#!/bin/bash
# mount.lustre <mgs nid>@tcp:/<fsname> <dir> [-o options]
set -euo pipefail
if ! [[ $1 =~ ^[A-Za-z0-9.-]+@tcp:/[A-Za-z0-9]+$ ]]; then
  echo "mount.lustre: $1: not a Lustre source (mgsnode@tcp:/fsname)" >&2; exit 22
fi
if [ -e %(config)s/lustre-down ]; then  # the file system is still being created: its MGS does not answer
  echo "mount.lustre: mount $1 at $2 failed: Input/output error" >&2; exit 5
fi
exec /usr/local/libexec/emulated/bind "$(cat %(config)s/sharedfs)" "$2"
''' % {"config": CONFIG}

MOUNT_NFS = r'''#!/bin/bash
# mount.nfs <server>:<export> <dir> [-o options]
set -euo pipefail
if ! [[ $1 =~ ^[A-Za-z0-9.-]+:/.* ]]; then
  echo "mount.nfs: $1: not an NFS source (server:/export)" >&2; exit 32
fi
exec /usr/local/libexec/emulated/bind "$(cat %(config)s/sharedfs)" "$2"
''' % {"config": CONFIG}

MODINFO = r'''#!/bin/bash
# the Lustre client modules come with the DLAMI
[ "${1:-}" = lustre ] && { echo "filename: /lib/modules/$(uname -r)/extra/lustre.ko"; exit 0; }
exec /usr/sbin/modinfo "$@"
'''

LOADED = "/run/goldenenv-emulated/modules"
"""The stand-in kernel modules loaded this boot (a boot unloads them)."""
MODULE_DEVICES = {"import_helper": ("/dev/dmabuf_import_helper",)}
"""The device nodes a module registers once loaded: dmabuf-import-helper's misc device "dmabuf_import_helper"
(google/nccl-plugin-gpudirect-tcpxo, its import-helper kernel module's source)."""

LSMOD = r'''#!/bin/bash
/usr/sbin/lsmod
[ -s %(config)s/erdma ] && echo "erdma                 118784  0"
for module in %(loaded)s/*; do
  [ -e "$module" ] && printf '%%-24s%%8d  0\n' "$(basename "$module")" 16384
done
exit 0
''' % {"config": CONFIG, "loaded": LOADED}

MODPROBE = r'''#!/bin/bash
[ "${1:-}" = erdma ] && [ -s %(config)s/erdma ] && exit 0
# a module the host image has (modules: `<module> [<device>...]`): loaded, its device nodes registered (/dev/null's,
# as every device of the emulated host); any other module is the host's modprobe's (not found)
if [ -n "${1:-}" ] && [ -s %(config)s/modules ]; then
  line=$(awk -v m="$1" '$1 == m' %(config)s/modules)
  if [ -n "$line" ]; then
    read -r module devices <<< "$line"
    mkdir -p %(loaded)s && touch "%(loaded)s/$module"
    for device in $devices; do [ -e "$device" ] || mknod -m 666 "$device" c 1 3; done
    exit 0
  fi
fi
exec /usr/sbin/modprobe "$@"
''' % {"config": CONFIG, "loaded": LOADED}

RDMA = r'''#!/bin/bash
# iproute2's rdma: one erdma device per ERI, each behind one of the host's interfaces (eth0, eth1 ...)
set -euo pipefail
count=$(cat %(config)s/erdma 2>/dev/null || echo 0)
netdevs=($(ls /sys/class/net | grep -v '^lo$' | sort))
case "${1:-} ${2:-}" in
  "dev show"|"dev "|"dev")
    for ((i = 0; i < count; i++)); do
      echo "$i: erdma_$i: node_type ca fw 0.2.0 node_guid 0216:3eff:fe00:000$i sys_image_guid 0216:3eff:fe00:000$i"
    done ;;
  "link show"|"link "|"link")
    for ((i = 0; i < count; i++)); do
      echo "link erdma_$i/1 state ACTIVE physical_state LINK_UP netdev ${netdevs[$i]}"
    done ;;
  *) echo "rdma (emulated): $*: not emulated" >&2; exit 1 ;;
esac
''' % {"config": CONFIG}

NVIDIA_SMI = r'''#!/bin/bash
# the NVIDIA driver: answers from a capture of this instance type
exec cat %(config)s/nvidia-smi.csv
''' % {"config": CONFIG}


def healthy_evidence(expect: dict, gpu_name: str, driver: str) -> dict[str, str]:
    """The evidence a healthy node with these expectations (catalog.health.pool_expectations) gives its health
    check, file by file, in the formats the tools print: every GPU listed without ECC errors or remaps, no XID, every
    NVLink up without errors, the fabric manager active on an NVSwitch board, every EFA device, eRDMA link, HCC RDMA
    bond and InfiniBand port there; on an Ascend node every NPU listed OK and every NPU's RoCE port up."""
    buses = [f"00000000:{0x53 + 0x11 * i:02X}:00.0" for i in range(expect["gpus"])]
    files = {
        "nvidia_smi_gpus.csv": "".join(f"{i}, {bus}, {gpu_name}, {driver}, 0\n" for i, bus in enumerate(buses)),
        "nvidia_smi_remapped_rows.csv": "gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, "
                                        "remapped_rows.pending, remapped_rows.failure\n"
                                        + "".join(f"{bus}, 0, 0, No, No\n" for bus in buses),
        "kernel.log": "",
    }
    links = range(expect["nvlinks_per_gpu"])
    if expect["nvlinks_per_gpu"]:
        heading = [f"GPU {i}: {gpu_name} (UUID: GPU-{i:08x}-0000-0000-0000-000000000000)" for i in range(len(buses))]
        files["nvlink_status.txt"] = "".join(h + "\n" + "".join(f"\t Link {n}: 26.562 GB/s\n" for n in links)
                                             for h in heading)
        files["nvlink_errors.txt"] = "".join(h + "\n" + "".join(
            f"\t Link {n}: {kind} Errors: 0\n" for n in links for kind in ("Replay", "Recovery", "CRC"))
            for h in heading)
    if expect["nvswitch"]:
        files["fabric_manager.txt"] = "active\n"
    devices = range(expect["fabric_devices"])
    if expect["fabric"] == "efa":
        files["fi_info_efa.txt"] = "".join(
            f"provider: efa\n    fabric: efa\n    domain: rdmap{79 + d}s0-rdm\n    version: 201.0\n"
            f"    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n" for d in devices)
        files["rdma_statistic.txt"] = "".join(f"link rdmap{79 + d}s0/1 \n    rx_drops 0 \n"
                                              f"    retrans_timeout_events 0 \n" for d in devices)
    if expect["fabric"] == "erdma":
        files["rdma_link.txt"] = "".join(f"link erdma_{d}/1 state ACTIVE physical_state LINK_UP netdev eth{d}\n"
                                         for d in devices)
    if expect["fabric"] == "hcc":  # Tencent's RDMA bonds as rdma-agent leaves them: mlx5 bonds over the RoCE ports
        files["rdma_link.txt"] = "".join(f"link mlx5_bond_{d}/1 state ACTIVE physical_state LINK_UP netdev bond{d}\n"
                                         for d in devices)
    if expect.get("npus"):  # Ascend: npu-smi's table as the NPU stand-in prints it, every NPU OK
        files["npu_smi_info.txt"] = npu_smi_info(range(expect["npus"]))
    if expect["fabric"] == "hccn":  # the NPUs' RoCE ports as hccn_tool answers each (fabrics/hccn/health.py)
        files["hccn_link.txt"] = "".join(f"npu {d} link status: UP\n" for d in devices)
    if expect["fabric"] == "ib":
        # `ibstat` on an ND VM: one CA per GPU (Azure's persistent names mlx5_ib0..), port 1 Active/LinkUp at the
        # catalog's rate, link layer InfiniBand
        rate = expect.get("fabric_rate_gbps", 400)
        files["ibstat.txt"] = "".join(
            f"CA 'mlx5_ib{d}'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
            f"\t\tPhysical state: LinkUp\n\t\tRate: {rate}\n\t\tLink layer: InfiniBand\n" for d in devices)
    return files


NPU_SMI = Path(__file__).resolve().parent.parent / "images" / "ascend-standin" / "npu-smi"
"""The NPU driver's npu-smi stood in (the emulated Ascend host's, nodeboot/ascend_host.py)."""


def npu_smi_info(npus) -> str:
    """`npu-smi info` as the stand-in prints it with these NPUs present, all healthy."""
    env = {**os.environ, "STANDIN_NPUS": " ".join(str(n) for n in npus)}
    return subprocess.run(["sh", str(NPU_SMI), "info"], capture_output=True, text=True, env=env, check=True).stdout


def files(*, name: str, rootfs: str, sharedfs: str | None, nvme: str | None, erdma: int, gpus: int,
          nvidia_smi: str, health: dict[str, str] | None = None,
          disks: Disks | None = None) -> dict[str, tuple[str, int]]:
    """Path on the host -> (content, mode) of every stand-in and the facts they read; "->target" is a symlink.

    nvme: the machine folder behind the instance store: the DLAMI's volume, or with `disks`, bare local disks."""
    out = {
        "/usr/local/bin/docker": (DOCKER, 0o755),
        "/usr/local/libexec/emulated/bind": (BIND, 0o755),
        "/etc/systemd/system/docker.service": (ENGINE_UNIT, 0o644),
        "/etc/systemd/system/multi-user.target.wants/docker.service": ("->/etc/systemd/system/docker.service", 0),
        "/usr/local/sbin/nvidia-smi": (NVIDIA_SMI, 0o755),
        "/usr/local/sbin/lsmod": (LSMOD, 0o755),
        "/usr/local/sbin/modprobe": (MODPROBE, 0o755),
        "/usr/local/sbin/modinfo": (MODINFO, 0o755),
        "/usr/local/sbin/rdma": (RDMA, 0o755),
        "/usr/sbin/mount.lustre": (MOUNT_LUSTRE, 0o755),
        "/usr/sbin/mount.nfs": (MOUNT_NFS, 0o755),
        f"{CONFIG}/name": (name, 0o644),
        f"{CONFIG}/rootfs": (rootfs, 0o644),
        f"{CONFIG}/erdma": (str(erdma) if erdma else "", 0o644),
        f"{CONFIG}/gpus": (str(gpus), 0o644),
        f"{CONFIG}/nvidia-smi.csv": (nvidia_smi, 0o644),
    }
    for file, text in (health or {}).items():
        out[f"{HEALTH}/{file}"] = (text, 0o644)
    if sharedfs:
        out[f"{CONFIG}/sharedfs"] = (sharedfs, 0o644)
    if nvme and disks:
        out[f"{CONFIG}/nvme"] = (nvme, 0o644)
        out[f"{DISKS}/lsblk"] = (disks.lsblk, 0o644)
        out[f"{DISKS}/local"] = ("".join(f"{disk}\n" for disk in disks.local), 0o644)
        for command, text in (("lsblk", LOCAL_LSBLK), ("mdadm", LOCAL_MDADM), ("blkid", LOCAL_BLKID),
                              ("mkfs.xfs", LOCAL_MKFS_XFS), ("mount", LOCAL_MOUNT)):
            out[f"/usr/local/sbin/{command}"] = (text, 0o755)
    elif nvme:
        out[f"{CONFIG}/nvme"] = (nvme, 0o644)
        out["/usr/local/libexec/emulated/dlami-nvme"] = (DLAMI_SCRIPT, 0o755)
        out["/etc/systemd/system/dlami-nvme.service"] = (DLAMI_UNIT, 0o644)
        out["/etc/systemd/system/multi-user.target.wants/dlami-nvme.service"] = ("->/etc/systemd/system/dlami-nvme.service", 0)
    return out

METADATA_ADDRESSES = {"aws": "169.254.169.254", "alicloud": "100.100.100.200"}
"""Each cloud's instance metadata service; on the host it is bound to the host's own loopback."""
CA_FILE = "/usr/local/share/ca-certificates/goldenenv-emulated-cloud.crt"
"""The run's CA, which signs the cloud APIs' certificates (tests/nodeboot/cloud_apis.py): the host trusts it."""

METADATA = r'''#!/usr/bin/python3
"""The instance metadata service, in the mode the stack asks for (tokens required), answering for this host's role.

AWS (IMDSv2, "Use the Instance Metadata Service to access instance metadata"): PUT /latest/api/token with
X-aws-ec2-metadata-token-ttl-seconds gives a token; a read without a valid X-aws-ec2-metadata-token is 401;
iam/security-credentials/ names the instance profile's role, iam/security-credentials/<role> gives its temporary
credentials. Alibaba (ECS "Instance metadata", hardened mode): PUT /latest/api/token with
X-aliyun-ecs-metadata-token-ttl-seconds, reads need X-aliyun-ecs-metadata-token (else 403),
ram/security-credentials/<role> gives the role's STS credentials. The credentials are the ones the emulated cloud
issued for the role (its APIs check them).
"""
import json, os, secrets, socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONFIG = json.load(open("%(config)s/metadata.json"))
CLOUD, ROLE, CREDENTIALS = CONFIG["cloud"], CONFIG["role"], CONFIG["credentials"]
PREFIX = {"aws": "X-aws-ec2-metadata-token", "alicloud": "X-aliyun-ecs-metadata-token"}[CLOUD]
DENIED = {"aws": (401, "Unauthorized"), "alicloud": (403, "Forbidden")}[CLOUD]
ROLES = {"aws": "/latest/meta-data/iam/security-credentials/",
         "alicloud": "/latest/meta-data/ram/security-credentials/"}[CLOUD]
TOKENS = set()


def answer_of():
    if CLOUD == "aws":
        return {"Code": "Success", "LastUpdated": "2026-01-01T00:00:00Z", "Type": "AWS-HMAC",
                "AccessKeyId": CREDENTIALS["AccessKeyId"], "SecretAccessKey": CREDENTIALS["AccessKeySecret"],
                "Token": CREDENTIALS["SecurityToken"], "Expiration": CREDENTIALS["Expiration"]}
    return CREDENTIALS


class Metadata(BaseHTTPRequestHandler):
    def answer(self, code, body, kind="text/plain"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        if self.path != "/latest/api/token" or not self.headers.get(PREFIX + "-ttl-seconds"):
            return self.answer(400, "Bad Request")
        token = secrets.token_urlsafe(24)
        TOKENS.add(token)
        self.answer(200, token)

    def do_GET(self):
        if self.headers.get(PREFIX) not in TOKENS:
            return self.answer(*DENIED)  # tokens required: no token, no metadata
        if self.path == ROLES:
            return self.answer(200, ROLE)
        if self.path == ROLES + ROLE:
            return self.answer(200, json.dumps(answer_of()), "application/json")
        self.answer(404, "Not Found")

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("%(address)s", 80), Metadata)
if os.environ.get("NOTIFY_SOCKET"):  # Type=notify: the unit is started once the service listens
    path = os.environ["NOTIFY_SOCKET"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.sendto(b"READY=1", "\0" + path[1:] if path.startswith("@") else path)
server.serve_forever()
'''

METADATA_UNIT = """[Unit]
Description=%(cloud)s instance metadata service of this host (emulated, tokens required)
Before=goldenenv-munge.service goldenenv-sharedfs.service network-online.target
[Service]
Type=notify
ExecStartPre=-/usr/sbin/ip addr add %(address)s/32 dev lo
ExecStart=/usr/local/libexec/emulated/metadata
Restart=always
[Install]
WantedBy=multi-user.target
"""


def cloud_files(*, cloud: str, role: str, credentials: dict, ca_pem: str) -> dict[str, tuple[str, int]]:
    """The metadata service for a host of `cloud` with its role's credentials, and the run's CA where
    update-ca-certificates takes a local CA from (the host's bundle gets it at creation: emulated_host.Host)."""
    address = METADATA_ADDRESSES[cloud]
    return {
        "/usr/local/libexec/emulated/metadata": (METADATA % {"config": CONFIG, "address": address}, 0o755),
        "/etc/systemd/system/emulated-metadata.service": (
            METADATA_UNIT % {"cloud": cloud, "address": address}, 0o644),
        "/etc/systemd/system/multi-user.target.wants/emulated-metadata.service":
            ("->/etc/systemd/system/emulated-metadata.service", 0),
        f"{CONFIG}/metadata.json": (json.dumps({"cloud": cloud, "role": role, "credentials": credentials}), 0o600),
        CA_FILE: (ca_pem, 0o644),
    }

GCE_DATASOURCE_PACKAGE = "/usr/local/lib/python3.11/dist-packages/goldenenv_emulated"
"""Where cloud-init finds the GCE datasource of an emulated Google Cloud host (datasource_pkg_list)."""

GCE_DATASOURCE = r'''"""cloud-init's own GCE datasource (cloudinit.sources.DataSourceGCE, Debian 12's 22.4.2) without its platform check.

Its crawl is unchanged: read_md asks the metadata server (datasource.GCE.metadata_url, by default
http://metadata.google.internal/computeMetadata/v1/) with Metadata-Flavor: Google for instance/id, instance/zone,
instance/hostname and instance/attributes/ and project/attributes/ (recursive), and takes the user data from the
`user-data` attribute and the keys from `ssh-keys`. What is off is platform_reports_gce(): it reads the DMI product
name ("Google Compute Engine"), and cloud-init's dmi.read_dmi_data answers None in any container, so no
configuration makes it pass there (22.4.2's _get_data always calls read_md with platform_check=True; upstream's
own `python3 -m cloudinit.sources.DataSourceGCE --no-platform-check` is the same crawl with the check off).
Both stages crawl without a DHCP of their own (upstream's local stage runs dhclient for an ephemeral lease): the
host's network is up before cloud-init runs, so the local stage finds the instance and the network stage keeps it.
"""
from cloudinit import sources
from cloudinit.sources import DataSourceGCE as upstream


class DataSourceGCE(upstream.DataSourceGCE):
    def _get_data(self):
        found = upstream.read_md(address=self.metadata_address, url_params=self.get_url_params(),
                                 platform_check=False)
        if not found["success"]:
            upstream.LOG.warning(found["reason"])
            return False
        self.metadata = found["meta-data"]
        self.userdata_raw = found["user-data"]
        return True


class DataSourceGCELocal(DataSourceGCE):
    perform_dhcp_setup = False


datasources = [(DataSourceGCELocal, (sources.DEP_FILESYSTEM,)),
               (DataSourceGCE, (sources.DEP_FILESYSTEM, sources.DEP_NETWORK))]


def get_datasource_list(depends):
    return sources.list_from_depends(depends, datasources)
'''

GCE_CLOUD_CFG = """\
# An emulated Google Cloud host: cloud-init's GCE datasource, its platform check off (goldenenv_emulated), reading
# the metadata server at its documented name; no NoCloud seed.
datasource_list: [GCE]
datasource_pkg_list: [goldenenv_emulated]
datasource:
  GCE:
    metadata_url: http://metadata.google.internal/computeMetadata/v1/
"""


def gce_files() -> dict[str, tuple[str, int]]:
    """What makes an emulated host a Google Cloud one: cloud-init reads its instance from the metadata server
    (tests/nodeboot/gce_metadata.py, reached as metadata.google.internal) instead of a NoCloud seed."""
    return {
        f"{GCE_DATASOURCE_PACKAGE}/__init__.py": ("", 0o644),
        f"{GCE_DATASOURCE_PACKAGE}/DataSourceGCE.py": (GCE_DATASOURCE, 0o644),
        "/etc/cloud/cloud.cfg.d/95-gce.cfg": (GCE_CLOUD_CFG, 0o644),
    }


GVNIC = "1ae0:0042"
"""Compute Engine's virtual NIC (gVNIC, driver gve) as lspci -nn names it."""
APERTURE = "1ae0:0084"
"""An A3 Mega aperture device (GPUDirect-TCPXO's LLCM), as lspci -nn names it."""

LSPCI = r'''#!/bin/bash
# pciutils' lspci on the instance: its recorded PCI functions, as `lspci -nn -D` prints them
exec cat %(config)s/lspci
''' % {"config": CONFIG}

GCE_PCI_SCRIPT = r'''#!/bin/bash
# The instance's PCI functions as sysfs shows them on Compute Engine, on every boot: each function's folder under
# /sys/bus/pci/devices (its driver link, its resource files: a folder of this machine stands for them), and every NIC
# a gVNIC whose /sys/class/net/<nic>/device is its PCI function (driver gve): the NIC with the default route is the
# first function of %(config)s/nics, the others follow by name. The rest of each NIC's sysfs entries are its own.
set -euo pipefail
folder=$(cat %(config)s/pci)
find "$folder" -mindepth 1 -delete
mkdir -p "$folder/devices" "$folder/drivers"
while read -r bdf driver resources; do
  mkdir -p "$folder/devices/$bdf"
  if [ "$driver" != - ]; then
    mkdir -p "$folder/drivers/$driver" && ln -s "$folder/drivers/$driver" "$folder/devices/$bdf/driver"
  fi
  for ((r = 0; r < resources; r++)); do : > "$folder/devices/$bdf/resource$r"; done
done < %(config)s/pci-functions
/usr/local/libexec/emulated/bind "$folder/devices" /sys/bus/pci/devices
primary=$(ip -o route show default | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
mapfile -t bdfs < %(config)s/nics
mapfile -t nics < <(echo "$primary"; ls /sys/class/net | grep -vx -e lo -e "$primary" | sort -V)
declare -A real
for nic in lo "${nics[@]}"; do real[$nic]=$(readlink -f "/sys/class/net/$nic"); done
mount -t tmpfs -o mode=755 gce-class-net /sys/class/net
ln -s "${real[lo]}" /sys/class/net/lo
for i in "${!nics[@]}"; do
  nic=${nics[$i]}
  mkdir "/sys/class/net/$nic"
  for entry in "${real[$nic]}"/*; do ln -s "$entry" "/sys/class/net/$nic/$(basename "$entry")"; done
  if [ -n "${bdfs[$i]:-}" ]; then ln -s "/sys/bus/pci/devices/${bdfs[$i]}" "/sys/class/net/$nic/device"; fi
done
echo "emulated-gce-pci: ${#nics[@]} gVNIC(s), $(wc -l < %(config)s/pci-functions) PCI function(s)"
''' % {"config": CONFIG}

GCE_PCI_UNIT = """[Unit]
Description=Compute Engine PCI functions and gVNICs in sysfs (emulated)
Before=goldenenv-tcpxo.service goldenenv-container.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/libexec/emulated/gce-pci
[Install]
WantedBy=multi-user.target
"""


def bdf_of(nic: str) -> str:
    """The PCI address of a NIC from its predictable name (systemd's path naming: enp<bus>s<slot>[f<function>])."""
    bus, _, rest = nic.removeprefix("enp").partition("s")
    slot, _, function = rest.partition("f")
    return f"0000:{int(bus):02x}:{int(slot):02x}.{int(function or 0)}"


def gce_gpu_host_files(*, folder: str, primary: str, gpu_nics: list[str], apertures: bool,
                       modules: list[str]) -> dict[str, tuple[str, int]]:
    """What an emulated Compute Engine GPU host has besides gce_files(): its NICs as gVNICs (the primary and one per
    GPU NIC, named as the node names them: their PCI addresses), on an A3 Mega an aperture device beside each GPU
    NIC (function 1 of its NIC's device, lspci [1ae0:0084], two resource files), and the kernel modules its image
    has (modprobe loads them and registers their devices: MODULE_DEVICES). folder: a folder of this machine, shared
    with the host, that stands for the PCI functions' sysfs folders."""
    nics = [bdf_of(nic) for nic in [primary, *gpu_nics]]
    functions = [f"{bdf} gve 1" for bdf in nics]
    listing = [f"{bdf} Ethernet controller [0200]: Google, Inc. Compute Engine Virtual Ethernet [gVNIC] [{GVNIC}]"
               for bdf in nics]
    if apertures:
        for bdf in nics[1:]:
            aperture = bdf[:-1] + "1"
            functions.append(f"{aperture} - 2")
            listing.append(f"{aperture} Unassigned class [ff00]: Google, Inc. Device [{APERTURE}]")
    return {
        "/usr/local/sbin/lspci": (LSPCI, 0o755),
        "/usr/local/libexec/emulated/gce-pci": (GCE_PCI_SCRIPT, 0o755),
        "/etc/systemd/system/emulated-gce-pci.service": (GCE_PCI_UNIT, 0o644),
        "/etc/systemd/system/multi-user.target.wants/emulated-gce-pci.service":
            ("->/etc/systemd/system/emulated-gce-pci.service", 0),
        f"{CONFIG}/pci": (folder, 0o644),
        f"{CONFIG}/pci-functions": ("".join(f"{line}\n" for line in functions), 0o644),
        f"{CONFIG}/nics": ("".join(f"{bdf}\n" for bdf in nics), 0o644),
        f"{CONFIG}/lspci": ("".join(f"{line}\n" for line in sorted(listing)), 0o644),
        f"{CONFIG}/modules": ("".join(" ".join([m, *MODULE_DEVICES.get(m, ())]) + "\n" for m in modules), 0o644),
    }
