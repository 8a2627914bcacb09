"""HCC RDMA, Tencent Cloud's RDMA network for its high-performance computing cluster (HCC) GPU instances: RoCE over
bonded Mellanox NICs, one primary NIC and 8 RDMA bond NICs per node (https://cloud.tencent.com/document/product/457/
116719), which Tencent's rdma-agent service configures on the host ("THCC GPU instances with Linux Public Image
supporting RDMA network will install the rdma-agent component by default during instance startup. If your instance
uses a Tencent Cloud shared Custom Image, it may not have the rdma-agent component installed":
https://www.tencentcloud.com/document/product/1236/77056). The CVM API has no RDMA or NIC field: an HCC instance joins
an HPC cluster (Tencent's cloud folder plans it) and its bonds come with it.

Its lock section pins rdma-core's userspace (the mlx5 verbs provider NCCL's IB transport opens over RoCE), the image
layer installs it (templates/image/layer-hcc.j2), and its boot check (templates/node/hcc-check.sh.j2) proves the
bonds ACTIVE before the golden container starts; the node health judge counts them again on a live node (health.py
here, by the rule of catalog/health_thresholds.csv here). Tencent's TCCL NCCL plugin (nccl-rdma-sharp-plugins, a .deb on
Tencent's COS bucket with no published checksum) is not installed: NCCL's own IB transport runs over the bonds.
"""

from __future__ import annotations

from goldenenv.fabrics.model import Fabric, RdmaPackages

__all__ = ["HCC_HOST_IMAGE", "Hcc"]
"""What goldenenv.fabrics offers under its own name."""

ORDER = 7
"""Where HCC RDMA is listed among the fabrics (lock sections, messages): the order they were added."""

HCC_HOST_IMAGE = ("a Tencent public Linux image that supports the RDMA network (rdma-agent is installed at startup), "
                  "or an image of yours built from one with rdma-agent installed")


class Hcc(RdmaPackages):
    """HCC RDMA: the mlx5 verbs provider (ibverbs-providers) NCCL opens over the RoCE bonds, and the tools the node
    health judge and the boot check read (rdma, from iproute2 on the host)."""


FABRIC = Fabric(
    "hcc", "HCC RDMA", "tencent", "image/layer-hcc.j2", "hcc", Hcc, ("goldenenv-hcc.service", "hcc-check.sh"),
    layer_values=lambda s: {"packages": s.packages}, host_image_hint=HCC_HOST_IMAGE)
