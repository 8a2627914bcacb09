"""Where an HCC node's RDMA interfaces go: nowhere the program says. The CVM API and tencentcloud-iac-pulumi 0.2.3's
Instance have no RDMA or NIC field; an HCC instance joins an HPC cluster (cvm.HpcCluster, one zone) and Tencent's
rdma-agent sets its 8 RDMA bonds up on the host (goldenenv/fabrics/hcc)."""

from __future__ import annotations

from typing import Any


def bond_layout(*_: Any, **__: Any) -> list:
    """HCC RDMA declares no interface: the HPC cluster wires its instances (the fabric's layout)."""
    return []
