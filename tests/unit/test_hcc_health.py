"""The node health judge on an HCC node (Tencent Cloud's RDMA bonds): `rdma link show` must list as many ACTIVE
mlx5_bond devices as the catalog gives the type (instance_types.csv rdma_interfaces: 8, "one primary NIC and 8 RDMA
bond NICs per node"), else the node drains under the rule of fabrics/hcc/catalog/health_thresholds.csv."""

from __future__ import annotations

from goldenenv.catalog import health
from goldenenv.health import judge

HCC_TYPE = "HCCPNV4ane.58XLARGE1929"


def links(active: int, down: int = 0) -> str:
    """`rdma link show` as iproute2 prints it for bonded mlx5 ports."""
    return "".join(f"link mlx5_bond_{i}/1 state {'ACTIVE' if i < active else 'DOWN'} physical_state "
                   f"{'LINK_UP' if i < active else 'DISABLED'} netdev bond{i}\n" for i in range(active + down))


def findings(text: str) -> list:
    expect = {**health.expectations("tencent", HCC_TYPE), "fabric": "hcc"}
    return [f for f in judge.judge({"rdma_link.txt": text}, expect, health.rules_document(), "gpu-0")
            if f.rule.startswith("hcc_")]


def test_the_catalog_expects_eight_bonds_on_an_hcc_node():
    assert health.expectations("tencent", HCC_TYPE)["fabric_devices"] == 8


def test_every_bond_active_is_healthy_and_one_down_drains_naming_the_bonds():
    assert findings(links(8)) == []
    short = findings(links(7, down=1))
    assert [(f.rule, f.action) for f in short] == [("hcc_bonds_below_expected", "drain")]
    assert "lists 7 ACTIVE RDMA bond devices" in short[0].message and "mlx5_bond_6" in short[0].message
    assert "mlx5_bond_7" not in short[0].message.split("(")[1], "the DOWN bond is not listed as active"
