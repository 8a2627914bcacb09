"""GPUDirect-TCPX, Google Cloud's GPU NIC fabric on A3 High: its lock section (goldenenv.fabrics.gpudirect), the image
layer that copies the NCCL plugin (image/layer-tcpxo.j2, which it shares with GPUDirect-TCPXO: in
goldenenv/fabrics/tcpxo/templates/), and its registry entry. Its NICs are laid out by Google Cloud's folder; the
health judge counts none of them (health `none`)."""

from __future__ import annotations

from goldenenv.fabrics.gpudirect import GPUDIRECT_REGISTRY, GpuDirectTcp, tcp_layer
from goldenenv.fabrics.model import Fabric, Plugin

__all__ = ["TCPX_LIBRARIES"]
"""What goldenenv.fabrics offers under its own name."""

ORDER = 3
"""Where GPUDirect-TCPX is listed among the fabrics (lock sections, messages): the order they were added."""

TCPX_LIBRARIES = "/var/lib/tcpx/lib64"
"""Where Google's installer puts the plugin on a host (blueprints' LD_LIBRARY_PATH); the image layer puts it at the
same path, so a job written for Google's host install finds it in the golden container too."""

FABRIC = Fabric(
    "tcpx", "GPUDirect-TCPX", "gcp", "image/layer-tcpxo.j2", "tcpx", GpuDirectTcp,
    layer_values=tcp_layer(f"{GPUDIRECT_REGISTRY}/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev", TCPX_LIBRARIES),
    plugin=Plugin("plugin", "plugin", "nccl-plugin-gpudirecttcpx", "tcpx_plugin"), libraries=TCPX_LIBRARIES,
    plugin_library=f"{TCPX_LIBRARIES}/libnccl-net.so",
    labels=lambda s: {"tcpx-plugin": s.plugin, "tcpx-rxdm": s.rxdm}, health="none")
