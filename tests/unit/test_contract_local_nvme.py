"""Local NVMe is found by each cloud's own device identity (catalog local_nvme_devices.csv), on every cloud.

A node's scratch unit stripes its local NVMe disks into /scratch. Each cloud names them its own way: EC2 instance
store reports the model 'Amazon EC2 NVMe Instance Storage', Google's Local SSD 'nvme_card' or 'nvme_cardN' (and
/dev/disk/by-id/google-local-nvme-ssd-N), Azure's 'Microsoft NVMe Direct Disk'. Picked by another cloud's name, no
disk is found and /scratch lands on the OS disk beside Docker's images; picked too widely, the array is built over
the OS or a data disk. So the rendered nvme-raid0 script runs here, with lsblk and the by-id folder answering as a
recorded node of that cloud answers (tests/unit/captures/local_nvme/, each file saying its source), and must select
exactly the disks the capture marks local: for every registered cloud and every catalog type with local NVMe.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from goldenenv import catalog, clouds, nodeboot
from goldenenv.clouds.base import Capability
from goldenenv.render import render

CAPTURES = Path(__file__).resolve().parent / "captures" / "local_nvme"
LSBLK = r'''#!/bin/bash
# lsblk as the recorded node answers: its disks and models, a by-id link's disk, and no partition, mount or array on
# any disk (blank local disks, as a first boot or a stop/start leaves them)
case "$1 $2" in
  "-dpno NAME,MODEL") exec cat "$VIEW/lsblk" ;;
  "-dpno NAME")
    path=$3
    while [ -L "$path" ]; do
      target=$(readlink "$path")
      case "$target" in /dev/disk/by-id/*) path="$VIEW/by-id/${target##*/}" ;; *) path="/dev/${target##*/}" ;; esac
    done
    echo "$path" ;;
  "-nlo TYPE") echo disk ;;
  "-nlo NAME,TYPE"|"-lnpo NAME,TYPE") echo "$3 disk" ;;
esac
'''
RECORD = '#!/bin/bash\necho "$(basename "$0") $*" >> "$VIEW/calls"\n'
STUBS = {"lsblk": LSBLK, "mdadm": RECORD, "mkfs.xfs": RECORD, "mount": RECORD,
         "blkid": "#!/bin/bash\nexit 2\n", "mountpoint": "#!/bin/bash\nexit 1\n", "chown": "#!/bin/bash\n"}
"""The commands the script runs on the disks, recorded instead of run; blkid: no file system yet."""


def parse(capture: Path) -> dict[str, list[str]]:
    """The capture's sections: `$ lsblk -dpno NAME,MODEL`, `$ ls /dev/disk/by-id` (name -> target), `$ local`."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in capture.read_text().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("$ "):
            current = sections.setdefault(line[2:].split()[0], [])
        elif current is not None and line.strip():
            current.append(line)
    return sections


def captures(cloud: str) -> list[Path]:
    return sorted(CAPTURES.glob(f"{cloud}_*.txt"))


def local_types(cloud: str) -> list[str]:
    return sorted(name for name, it in catalog.instance_types(cloud).items() if it.local_nvme_count)


CASES = [pytest.param(cloud, kind, capture, id=f"{kind}-on-{capture.stem}")
         for cloud in clouds.names() for kind in local_types(cloud) for capture in captures(cloud)]


def selected(script: str, capture: Path, tmp_path: Path) -> set[str]:
    """The disks the script stripes (mdadm --create) or formats alone (mkfs.xfs) on the recorded node."""
    view, bin_dir = tmp_path / "view", tmp_path / "bin"
    (view / "by-id").mkdir(parents=True)
    bin_dir.mkdir()
    sections = parse(capture)
    (view / "lsblk").write_text("".join(line + "\n" for line in sections["lsblk"]))
    for link in sections.get("ls", []):
        name, target = (part.strip() for part in link.split("->"))
        (view / "by-id" / name).symlink_to(target)
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "scratch.sh").write_text(script)
    result = subprocess.run(["bash", str(tmp_path / "scratch.sh")], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VIEW": str(view)})
    assert result.returncode == 0, result.stdout + result.stderr
    calls = (view / "calls").read_text().splitlines() if (view / "calls").exists() else []
    for call in calls:
        words = call.split()
        if words[:2] == ["mdadm", "--create"]:
            return set(words[words.index(next(w for w in words if w.startswith("--raid-devices="))) + 1:])
    return {call.split()[-1] for call in calls if call.startswith("mkfs.xfs ")}


def rendered(cloud: str, kind: str, tmp_path: Path) -> str:
    """nvme-raid0.sh as nodeboot renders it for this type, its paths moved under tmp_path."""
    disks = nodeboot.local_disks(cloud, kind)
    assert disks, f"catalog local_nvme_devices.csv knows no local NVMe identity for {cloud} {kind}"
    return render("node/nvme-raid0.sh.j2", mount_point=str(tmp_path / "scratch"), ready=str(tmp_path / "ready"),
                  owner=os.getuid(), **{**disks, "by_id_dir": str(tmp_path / "view" / "by-id")})


@pytest.mark.parametrize(("cloud", "kind", "capture"), CASES)
def test_the_scratch_unit_stripes_exactly_the_local_nvme_disks(cloud, kind, capture, tmp_path):
    local = set(parse(capture)["local"])
    found = selected(rendered(cloud, kind, tmp_path), capture, tmp_path)
    assert found == local, (f"{kind} on {capture.name}: striped {sorted(found)}, the local disks are "
                            f"{sorted(local)}; never an OS or data disk: {sorted(found - local)}")


@pytest.mark.parametrize("cloud", clouds.names())
def test_every_cloud_with_local_nvme_has_its_identity_and_a_recorded_node(cloud):
    """A cloud that offers local NVMe has an identity row with a source (a fifth cloud without one fails), and a
    cloud with a catalog type that has local NVMe has a verified identity and a recorded node to prove it on."""
    if Capability.LOCAL_NVME not in clouds.get(cloud).capabilities:
        return
    rows = [r for r in catalog.rows("local_nvme_devices") if r["cloud"] == cloud]
    assert rows and all(r["source"].strip() for r in rows), (
        f"catalog local_nvme_devices.csv has no row for {cloud}, which declares {Capability.LOCAL_NVME.value}")
    for kind in local_types(cloud):
        device = catalog.local_nvme_device(cloud, kind)
        assert device and device.known and catalog.UNVERIFIED not in device.source, (cloud, kind)
    if local_types(cloud):
        assert captures(cloud), f"no recorded {cloud} node under {CAPTURES}"


@pytest.mark.parametrize("cloud", clouds.names())
def test_no_disk_is_striped_where_the_identity_is_unknown(cloud, tmp_path):
    """Where the catalog knows no identity (Alibaba's local NVMe model is unrecorded), scratch stays on the root
    volume rather than guess; where it does, the recorded OS and data disks are never matched."""
    for capture in captures(cloud):
        local = set(parse(capture)["local"])
        if nodeboot.local_disks(cloud, "*") is None:
            assert not local, f"{capture.name} has local disks the catalog cannot name"
            continue
        assert selected(rendered(cloud, "*", tmp_path / capture.stem), capture, tmp_path / capture.stem) == local


def test_the_models_are_anchored_literals_from_the_sources():
    """Literal anchors: each cloud's local model matches what its sources print, and the OS/data disk models do
    not (a pattern that matches a substring would take GCP's nvme_card-pd boot disk)."""
    import re

    cases = {"aws": (["Amazon EC2 NVMe Instance Storage"], ["Amazon Elastic Block Store"]),
             "gcp": (["nvme_card", "nvme_card0", "nvme_card15"], ["nvme_card-pd", "PersistentDisk"]),
             "azure": (["Microsoft NVMe Direct Disk", "Microsoft NVMe Direct Disk v2"],
                       ["Virtual Disk", "Virtual_Disk", "MSFT NVMe Accelerator v1.0"])}
    for cloud, (local, other) in cases.items():
        pattern = re.compile(catalog.local_nvme_device(cloud, "*").lsblk_model)
        assert all(pattern.search(m) for m in local) and not any(pattern.search(m) for m in other), cloud
