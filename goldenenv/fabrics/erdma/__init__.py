"""eRDMA, Alibaba Cloud's elastic RDMA: its lock section (rdma-core packages), the image layer that installs them
(templates/image/layer-erdma.j2 here), its boot check (templates/node/erdma-check.sh.j2), the kernel module its host
must load, and its registry entry. Alibaba Cloud's folder lays out its interfaces (ERIs) on a node's network cards; the
node health judge counts its devices with health.py beside this file, by the rule of catalog/health_thresholds.csv
here."""

from __future__ import annotations

from goldenenv.fabrics.model import Fabric, RdmaPackages

__all__ = ["ERDMA_HOST_IMAGE", "Erdma"]
"""What goldenenv.fabrics offers under its own name."""

ORDER = 2
"""Where eRDMA is listed among the fabrics (lock sections, messages): the order they were added."""

ERDMA_HOST_IMAGE = ("an image of yours with Alibaba's eRDMA driver (its erdma_installer, or the public image's "
                    "automatic eRDMA install at creation): Alibaba publishes it as an installer script, with no signed "
                    "apt repository or checksum a host lock could pin")


class Erdma(RdmaPackages):
    """eRDMA: the erdma verbs provider is in ibverbs-providers since rdma-core 42."""


FABRIC = Fabric(
    "erdma", "eRDMA", "alicloud", "image/layer-erdma.j2", "erdma", Erdma, ("goldenenv-erdma.service", "erdma-check.sh"),
    layer_values=lambda s: {"packages": s.packages},
    kernel_modules=("erdma",), host_image_hint=ERDMA_HOST_IMAGE)
