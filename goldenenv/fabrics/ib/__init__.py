"""InfiniBand on Azure's ND VMs: its lock section (rdma-core packages), the image layer that installs them
(templates/image/layer-ib.j2 here), its boot check (templates/node/ib-check.sh.j2), the host files the golden container
reads, and its registry entry. Azure declares no interface for it (the platform wires a scale set's VMs); the node
health judge counts its ports with health.py beside this file, by the rules of catalog/health_thresholds.csv here."""

from __future__ import annotations

from goldenenv.fabrics.model import Fabric, RdmaPackages

__all__ = ["AZURE_HPC_NCCL", "Ib"]
"""What goldenenv.fabrics offers under its own name."""

ORDER = 6
"""Where InfiniBand is listed among the fabrics (lock sections, messages): the order they were added."""

AZURE_HPC_NCCL = ("/etc/nccl.conf", "/opt/microsoft")
"""What Azure's Ubuntu HPC images write for NCCL on every boot of an ND VM (azhpc-images setup_sku_customizations.sh,
components/customizations/ndv4.sh and ndv5.sh): /etc/nccl.conf with NCCL_IB_PCI_RELAXED_ORDERING=1,
NCCL_IGNORE_CPU_AFFINITY=1 and NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml (ndv4/topo.xml on ND A100 v4), a link to
the topology file beside it. The golden container reads the host's, so the values follow the pinned host image and
the VM size, and are written nowhere else."""


class Ib(RdmaPackages):
    """InfiniBand on Azure's ND VMs: the mlx5 verbs provider (ibverbs-providers) for NCCL's IB transport, and ibstat
    (infiniband-diags) and ib_write_bw (perftest), which the node health judge runs for this fabric. NCCL, the
    driver and the topology file are the host image's: the golden container reads them from host_mounts."""


FABRIC = Fabric(
    "ib", "InfiniBand", "azure", "image/layer-ib.j2", "ib", Ib,
    ("goldenenv-ib.service", "ib-check.sh"), layer_values=lambda s: {"packages": s.packages},
    host_mounts=AZURE_HPC_NCCL)
