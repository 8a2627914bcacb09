"""GPUDirect-TCPXO, Google Cloud's GPU NIC fabric on A3 Mega: its lock section (goldenenv.fabrics.gpudirect), the
image layer that copies the NCCL plugin (templates/image/layer-tcpxo.j2 here, which GPUDirect-TCPX uses too), its boot
check (templates/node/tcpxo-check.sh.j2), what its host must load and expose (the import helper, the aperture
devices), the receive-datapath manager it runs beside the golden container, its env file, and its registry entry. Its
NICs are laid out by Google Cloud's folder; the health judge counts none of them (health `none`)."""

from __future__ import annotations

from goldenenv.fabrics.gpudirect import GPUDIRECT_REGISTRY, GpuDirectTcp, image, tcp_layer
from goldenenv.fabrics.model import EnvFile, Fabric, Plugin, Sidecar

__all__ = ["APERTURE_DEVICES", "IMPORT_HELPER", "RXDM_TCPXO", "TCPXO_HOST_IMAGE", "TCPXO_LIBRARIES"]
"""What goldenenv.fabrics offers under its own name."""

ORDER = 4
"""Where GPUDirect-TCPXO is listed among the fabrics (lock sections, messages): the order they were added."""

TCPXO_LIBRARIES = "/var/lib/tcpxo/lib64"
"""Where Google's installer puts the plugin on a host (blueprints' LD_LIBRARY_PATH); the image layer puts it at the
same path, so a job written for Google's host install finds it in the golden container too."""
APERTURE_DEVICES = "/dev/aperture_devices"
"""Where an A3 Mega host binds its aperture devices (PCI 1ae0:0084), one folder per PCI function: Cluster Toolkit's
a3mega-slurm-blueprint udev rule, and NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY in catalog fabric_env."""
IMPORT_HELPER = "/dev/dmabuf_import_helper"
"""The misc device the dmabuf-import-helper kernel module (import_helper) registers, which RxDM and the TCPXO plugin
open (google/nccl-plugin-gpudirect-tcpxo's import-helper source: miscdevice "dmabuf_import_helper")."""
TCPXO_HOST_IMAGE = ("an image built as Cluster Toolkit's a3mega-slurm-blueprint builds its own (its image group "
                    "installs the dmabuf-import-helper DKMS package from Google's gpudirect-tcpxo-apt repository "
                    "and the aperture devices' udev rule)")
RXDM_TCPXO = Sidecar(
    "rxdm", "GPUDirect-TCPXO receive-datapath manager (RxDM)",
    image(f"{GPUDIRECT_REGISTRY}/gpudirect-tcpxo/tcpgpudmarxd-dev", lambda s: s.rxdm, lambda s: s.rxdm_digest),
    ("--cap-add=NET_ADMIN", "--network=host", "--privileged", "--gpus", "all",
     "--volume", "/var/lib/nvidia/lib64:/usr/local/nvidia/lib64",
     "--volume", f"{IMPORT_HELPER}:{IMPORT_HELPER}", "--env", "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu"),
    ("--num_hops=2", "--num_nics=8"),
    "Buffer manager initialization complete")
"""As Google's Slurm prolog runs it (slurm-gcp tools/prologs-epilogs/receive-data-path-manager-mega, which Cluster
Toolkit's a3mega-slurm-blueprint installs), with the flags of the open-source RxDM from v1.0.18 on
(google/nccl-plugin-gpudirect-tcpxo README: `--num_hops=2 --num_nics=8`; --uid= and --alsologtostderr retired), and
the line the prolog waits for. With --network=host on both, RxDM and the plugin meet on the host's UNIX sockets."""

FABRIC = Fabric(
    "tcpxo", "GPUDirect-TCPXO", "gcp", "image/layer-tcpxo.j2", "tcpxo", GpuDirectTcp,
    ("goldenenv-tcpxo.service", "tcpxo-check.sh"),
    layer_values=tcp_layer(f"{GPUDIRECT_REGISTRY}/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev", TCPXO_LIBRARIES),
    plugin=Plugin("plugin", "plugin", "nccl-plugin-gpudirecttcpx", "tcpxo_plugin"), libraries=TCPXO_LIBRARIES,
    plugin_library=f"{TCPXO_LIBRARIES}/libnccl-net.so",
    labels=lambda s: {"tcpxo-plugin": s.plugin, "tcpxo-rxdm": s.rxdm}, health="none",
    kernel_modules=("import_helper",), devices=(IMPORT_HELPER,), device_dirs=(APERTURE_DEVICES,),
    host_image_hint=TCPXO_HOST_IMAGE, sidecars=(RXDM_TCPXO,),
    env_files=(EnvFile(f"{TCPXO_LIBRARIES}/nccl-env-profile.sh", {"NCCL_LIB_DIR": TCPXO_LIBRARIES}),))
