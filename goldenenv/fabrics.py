"""RDMA fabrics by name: what each one is, wherever goldenenv needs to know.

A fabric (EFA on AWS, eRDMA on Alibaba Cloud) brings four things: how its interfaces sit on a node's network cards
(the cloud's layout function), the layer a golden image adds for it (a template under templates/image/ and the lock
section that pins it), the environment NCCL needs on a node (catalog fabric_env), and the rules a lock must meet
(catalog fabric_min_nccl and fabric_min_cuda, plus any fabric-specific check in compat). Code asks this registry, never `if fabric ==`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from goldenenv import catalog


@dataclass(frozen=True)
class Fabric:
    name: str
    """As the catalog and locks write it: efa | erdma."""
    label: str
    """As people write it: EFA | eRDMA."""
    cloud: str
    layout: str
    """`module:function` laying out (network_cards, interfaces) -> interface slots on a node."""
    image_layer: str
    """The image layer's template under templates/image/."""
    lock_section: str
    """The lock's section that pins the fabric's software (efa: installer + plugin; erdma: packages)."""
    boot_check: tuple[str, str] | None = None
    """(systemd unit, script) under templates/node/ that checks the fabric on every boot before the golden
    container starts (driver, one device per interface, MTU); None: the host image's own setup is trusted."""

    def env(self) -> dict[str, str]:
        """What NCCL needs on a node of this fabric (catalog fabric_env, each value sourced)."""
        return catalog.fabric_env(self.name)

    def min_nccl(self, instance_type: str = "*") -> list[dict[str, str]]:
        """The catalog's NCCL (and plugin) floors for this fabric: `*` rows hold for every instance type."""
        return [r for r in catalog.rows("fabric_min_nccl")
                if r["fabric"] == self.name and r["instance_type"] == instance_type]

    def min_cuda(self) -> str | None:
        """The fabric's CUDA floor (catalog fabric_min_cuda), or None when it has none."""
        return next((r["min_cuda"] for r in catalog.rows("fabric_min_cuda") if r["fabric"] == self.name), None)

    def mtu(self, cloud: str, instance_type: str) -> catalog.FabricMtu | None:
        """The interfaces' MTU (and the NCCL protocols it allows) for this type: catalog fabric_mtu, by whether
        catalog node_layout says the type runs jumbo frames; None when the fabric sets no MTU."""
        layout = catalog.node_layout(cloud, instance_type)
        return catalog.fabric_mtu(self.name, bool(layout and layout.jumbo_frames))

    def layout_function(self) -> Callable[..., list[Any]]:
        module, _, function = self.layout.partition(":")
        return getattr(importlib.import_module(module), function)

    def image_values(self, section: Any) -> dict[str, Any]:
        """The image layer's template and the values it renders from the lock's fabric section."""
        values = {"template": self.image_layer}
        if self.name == "efa":
            values.update(installer=section.installer, sha256=section.installer_sha256)
        else:
            values.update(packages=section.packages)
        return values


FABRICS: dict[str, Fabric] = {
    "efa": Fabric("efa", "EFA", "aws", "goldenenv.clouds.aws.efa:interface_layout", "image/layer-efa.j2", "efa"),
    "erdma": Fabric("erdma", "eRDMA", "alicloud", "goldenenv.clouds.alicloud.erdma:eri_layout",
                    "image/layer-erdma.j2", "erdma", ("goldenenv-erdma.service", "erdma-check.sh")),
}


def get(name: str) -> Fabric | None:
    """The fabric of that name; None for `none` (no RDMA)."""
    return FABRICS.get(name)


def label(name: str) -> str:
    fabric = FABRICS.get(name)
    return fabric.label if fabric else name
