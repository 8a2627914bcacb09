"""gIB, Google Cloud's RDMA-over-Ethernet fabric on A3 Ultra and A4: its lock section (the nccl-gib package), the
image layer that installs it (templates/image/layer-gib.j2 here), its boot check (templates/node/gib-check.sh.j2), its
env file, and its registry entry. Google Cloud's folder lays out its NICs; the health judge counts none
of them (health `none`: ibstat lists the RoCE ports with link layer Ethernet)."""

from __future__ import annotations

from goldenenv.fabrics.model import EnvFile, Fabric, PackageVersion, Plugin
from goldenenv.spec import Model

__all__ = ["GIB_ENV_FILE", "GIB_LIBRARIES", "Gib"]
"""What goldenenv.fabrics offers under its own name."""

ORDER = 5
"""Where gIB is listed among the fabrics (lock sections, messages): the order they were added."""

GIB_LIBRARIES = "/usr/local/gib/lib64"
"""Where the nccl-gib package installs (Google's docs: all NCCL/gIB content is installed under /usr/local/gib)."""
GIB_ENV_FILE = "/usr/local/gib/scripts/set_nccl_env.sh"
"""gIB's NCCL tuning, from the nccl-gib package (Google's 'Run NCCL on Compute Engine instances': source it)."""


class Gib(Model):
    plugin: PackageVersion
    """The nccl-gib package (gIB NCCL plugin with its own NCCL, under /usr/local/gib), from Google's apt repo."""


FABRIC = Fabric(
    "gib", "gIB", "gcp", "image/layer-gib.j2", "gib", Gib,
    ("goldenenv-gib.service", "gib-check.sh"), layer_values=lambda s: {"plugin": s.plugin},
    plugin=Plugin("plugin", "plugin", "nccl-gib", "nccl_gib"), libraries=GIB_LIBRARIES,
    plugin_library=f"{GIB_LIBRARIES}/libnccl-net.so", labels=lambda s: {"nccl-gib": s.plugin}, health="none",
    env_files=(EnvFile(GIB_ENV_FILE),))
