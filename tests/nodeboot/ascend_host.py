"""An Ascend NPU server's hardware as an emulated host has it instead, the way stand_ins.py gives a GPU node its GPUs:
what the NPU driver leaves on a booted Atlas 800T A2 (a ModelArts Lite Server's Snt9B), from the sources in
docs/research/huawei.md §4:

- the device nodes (§4.6, the Ascend docker runtime's and MindIE's lists): /dev/davinci0 ... /dev/davinci<n-1>, one
  per NPU, and the management devices /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc, made at every boot
  (a boot empties /dev) as the driver's udev rules make them; each is /dev/null's character device, as every
  device of the emulated host, and registered as a stand-in module's devices (stand_ins.py CONFIG/modules), so the
  host's docker adapter gives a container `--device /dev/davinci<n>` as /dev/null's, as it gives GPUs;
- the driver's /usr/local/Ascend/driver/version.info (§4.3: Version= and package_version= of the driver the lock
  names), the driver's tool npu-smi at /usr/local/bin/npu-smi (the stand-in of tests/images/ascend-standin/npu-smi:
  `npu-smi info` prints eight healthy 910B3 as npu-smi 24.1 does), and /usr/local/dcmi (the DCMI library's folder,
  empty here), the host paths the Ascend accelerator mounts into the golden container (host_mounts);
- the driver's hccn_tool (§4.5, /usr/local/Ascend/driver/tools/hccn_tool): each NPU's RoCE port UP, what the hccn
  fabric's boot check asks (`-i <n> -link -g`).

The module name that registers the devices (drv_davinci_intf) is this stand-in's: which kernel module registers
which node is unverified. What only a real Ascend host proves: that the NPUs compute, their health beyond
`npu-smi info`, HCCL over RoCE.
"""

from __future__ import annotations

from pathlib import Path

import stand_ins

NPU_SMI = Path(__file__).resolve().parent.parent / "images" / "ascend-standin" / "npu-smi"
DRIVER_INFO = "/usr/local/Ascend/driver/version.info"
MANAGEMENT = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
MODULE = "drv_davinci_intf"

HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
HCCN_TOOL_SCRIPT = r"""#!/bin/bash
# Stand-in for the NPU driver's hccn_tool (docs/research/huawei.md §4.5) on an emulated NPU server: `hccn_tool -i <n>
# -link -g` answers "link status: UP" for each of the server's %(npus)d NPUs' RoCE ports (the words Ascend's
# npu-exporter parses; their exact form on a Snt9B is unverified); an NPU the server lacks, or any other command,
# is refused as the tool refuses what it does not know.
if [ "$#" -eq 4 ] && [ "$1" = -i ] && [ "$3" = -link ] && [ "$4" = -g ] && [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -lt %(npus)d ]; then
  echo "link status: UP"
  exit 0
fi
echo "hccn_tool (stand-in): only '-i <0..%(last)d> -link -g' is stood in for" >&2
exit 1
"""

DEVICES_UNIT = """[Unit]
Description=Ascend NPU device nodes (emulated: what the NPU driver makes at boot)
DefaultDependencies=no
Before=docker.service cloud-init.service sysinit.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for d in %(devices)s; do [ -e "$d" ] || mknod -m 666 "$d" c 1 3; done'
[Install]
WantedBy=sysinit.target
"""


def devices(npus: int) -> list[str]:
    """The NPU server's device nodes: one per NPU, then the management devices."""
    return [f"/dev/davinci{n}" for n in range(npus)] + list(MANAGEMENT)


def files(*, npus: int, driver: str) -> dict[str, tuple[str | bytes, int]]:
    """Path on the host -> (content, mode) of an NPU server's stand-in hardware with `npus` NPUs and the NPU driver
    `driver` (its version.info); "->target" is a symlink."""
    unit = "/etc/systemd/system/emulated-ascend-devices.service"
    return {
        f"{stand_ins.CONFIG}/modules": (f"{MODULE} {' '.join(devices(npus))}\n", 0o644),
        unit: (DEVICES_UNIT % {"devices": " ".join(devices(npus))}, 0o644),
        "/etc/systemd/system/sysinit.target.wants/emulated-ascend-devices.service": (f"->{unit}", 0),
        DRIVER_INFO: (f"Version={driver}\npackage_version={driver}\n", 0o644),
        "/usr/local/bin/npu-smi": (NPU_SMI.read_bytes(), 0o755),
        HCCN_TOOL: (HCCN_TOOL_SCRIPT % {"npus": npus, "last": npus - 1}, 0o555),
        "/usr/local/dcmi/.emulated": ("the DCMI library's folder (none here)\n", 0o644),
    }
