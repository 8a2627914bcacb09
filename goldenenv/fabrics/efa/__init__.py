"""EFA, AWS's Elastic Fabric Adapter: its lock section (the installer and the aws-ofi-nccl plugin it bundles), the
image layer that installs it (templates/image/layer-efa.j2 here), and its registry entry. AWS's folder lays out its
interfaces on a node's network cards; the node health judge counts its devices with health.py beside this file, by the
rules of catalog/health_thresholds.csv here."""

from __future__ import annotations

from goldenenv.fabrics.model import Fabric, Plugin, Sha256, Version
from goldenenv.spec import Model

__all__ = ["Efa"]
"""What goldenenv.fabrics offers under its own name."""

ORDER = 1
"""Where EFA is listed among the fabrics (lock sections, messages): the order they were added."""


class Efa(Model):
    installer: Version
    installer_sha256: Sha256 | None = None
    """sha256 of aws-efa-installer-<installer>.tar.gz; the build refuses a tarball it cannot verify."""
    aws_ofi_nccl: Version
    """The plugin the installer bundles; must match the catalog's efa_installer table."""


FABRIC = Fabric(
    "efa", "EFA", "aws", "image/layer-efa.j2", "efa", Efa,
    layer_values=lambda s: {"installer": s.installer, "sha256": s.installer_sha256},
    plugin=Plugin("aws_ofi_nccl", "awsOfiNccl", "aws-ofi-nccl", "aws_ofi_nccl"),
    libraries="/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib",
    labels=lambda s: {"efa-installer": s.installer, "aws-ofi-nccl": s.aws_ofi_nccl})
