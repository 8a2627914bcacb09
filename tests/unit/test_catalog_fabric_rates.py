"""NCCL's rate between nodes is the RDMA fabric's ports × their rate (catalog fabric_rates.csv), the Ethernet
front-end NIC apart: every catalog type with a fabric has one, the estimator's network model uses it, and `plan`
prints it for every pool on such a type in every shipped stack."""

from __future__ import annotations

import pytest

from goldenenv import catalog
from goldenenv.estimate import network
from tests.unit import shipped

TYPES = {(r["cloud"], r["instance_type"]): r for r in catalog.rows("instance_types")}
RATES = {(r["cloud"], r["instance_type"]): r for r in catalog.rows("fabric_rates")}
WITH_FABRIC = sorted(k for k, r in TYPES.items() if r["rdma"] != "none")
PORT_RATES = {(r["cloud"], r["instance_type"]): r["fabric_rate_gbps"] for r in catalog.rows("health_links")
              if r["fabric_rate_gbps"]}


@pytest.mark.parametrize("key", WITH_FABRIC, ids=lambda k: f"{k[0]}:{k[1]}")
def test_every_type_with_a_fabric_has_its_rate_as_ports_times_rate(key):
    assert key in RATES, f"fabric_rates.csv has no row for {key}: add its ports' rate and source"
    row, it = RATES[key], TYPES[key]
    assert float(row["nccl_gbps"]) == int(it["rdma_interfaces"]) * float(row["port_gbps"])
    assert float(row["nccl_gbps"]) <= float(it["network_gbps"]), "NCCL cannot use more than the node's network"
    assert row["link"].strip() and row["source"].strip()
    if key in PORT_RATES:  # the health judge's expected port rate is the same fact
        assert float(row["port_gbps"]) == float(PORT_RATES[key])


def test_every_rate_row_names_a_catalog_type_with_a_fabric():
    assert set(RATES) <= set(WITH_FABRIC)


@pytest.mark.parametrize(("cloud", "instance_type", "ports", "port_gbps", "nccl_gbps"), [
    # Azure's ND pages and azurehpc-health-checks: 8 HDR ports at 200, 8 NDR ports at 400; not 1624 / 3280, which
    # add the Ethernet front-end NIC
    ("azure", "Standard_ND96amsr_A100_v4", 8, 200, 1600),
    ("azure", "Standard_ND96isr_H100_v5", 8, 400, 3200),
    ("azure", "Standard_ND96isr_H200_v5", 8, 400, 3200),
    # AWS: p5 32 EFA at 100 (3200 Gbps EFAv2), p5en 16 at 200 (EFAv3), p4d 4 at 100 (400 Gbps EFA)
    ("aws", "p5.48xlarge", 32, 100, 3200),
    ("aws", "p5en.48xlarge", 16, 200, 3200),
    ("aws", "p4d.24xlarge", 4, 100, 400),
    # Google: A3 High 4 GPU gVNICs, A3 Mega 8, at 200 Gbps (the host gVNIC apart); A3 Ultra 8 CX-7 at 400
    ("gcp", "a3-highgpu-8g", 4, 200, 800),
    ("gcp", "a3-megagpu-8g", 8, 200, 1600),
    ("gcp", "a3-ultragpu-8g", 8, 400, 3200),
    # Alibaba ebmgn8v: 170 (85 x 2) Gbit/s, ERI up to 160
    ("alicloud", "ecs.ebmgn8v.48xlarge", 2, 80, 160),
])
def test_literal_anchors_from_the_public_tables(cloud, instance_type, ports, port_gbps, nccl_gbps):
    rate = catalog.fabric_rate(cloud, instance_type)
    assert (rate.ports, rate.port_gbps, rate.nccl_gbps) == (ports, port_gbps, nccl_gbps)


@pytest.mark.parametrize("key", WITH_FABRIC, ids=lambda k: f"{k[0]}:{k[1]}")
def test_the_estimators_network_model_uses_the_fabric_rate(key):
    links = network.links(*key)
    assert links.rdma and links.inter_gbytes_per_s * 8 == float(RATES[key]["nccl_gbps"])
    assert f"{float(RATES[key]['nccl_gbps']):g} Gbps" in links.inter


def test_nd_a100_v4_is_modelled_at_1600_not_1624():
    links = network.links("azure", "Standard_ND96amsr_A100_v4")
    assert links.inter_gbytes_per_s == 200.0 and links.inter.startswith("IB 1600 Gbps (8 × 200 Gb/s HDR InfiniBand")


def test_a_type_without_a_fabric_keeps_its_tcp_rate():
    links = network.links("aws", "g5.xlarge")
    assert not links.rdma and links.inter == "TCP 10 Gbps" and links.inter_gbytes_per_s == 10 / 8


def _expected_fabrics(planned) -> list[dict]:
    """Each pool on a type with a fabric that the pool does not turn off, with the CSV's ports × rate."""
    spec = planned.spec
    found = []
    for pool in spec.nodes:
        row = TYPES.get((spec.cloud, pool.instance_type))
        if row is None or row["rdma"] == "none" or pool.rdma is False:
            continue
        rate = RATES[(spec.cloud, pool.instance_type)]
        found.append({"pool": pool.name, "instanceType": pool.instance_type, "ports": int(row["rdma_interfaces"]),
                      "portGbps": float(rate["port_gbps"]), "link": rate["link"],
                      "ncclGbps": float(rate["nccl_gbps"])})
    return found


@pytest.mark.parametrize(("cloud", "stack"), shipped.pulumi_stacks(), ids=lambda v: v)
def test_plan_prints_each_pools_fabric_rate(cloud, stack, capsys):
    from goldenenv.cli.stack import show_plan

    planned = shipped.plan_of(stack)
    expected = _expected_fabrics(planned)
    assert planned.to_json()["fabrics"] == expected
    show_plan(planned)
    text = " ".join(capsys.readouterr().out.split())
    for f in expected:
        assert (f"fabric {f['pool']} ({f['instanceType']}): {f['ports']} × {f['portGbps']:g} Gb/s {f['link']} = "
                f"{f['ncclGbps']:g} Gb/s between nodes for NCCL") in text
    if not expected:
        assert "between nodes for NCCL" not in text


def test_the_azure_plan_names_the_infiniband_generation_and_rate(capsys):
    from goldenenv.cli.stack import show_plan

    show_plan(shipped.plan_of("azure-ndh100-2node"))
    text = " ".join(capsys.readouterr().out.split())
    assert "8 × 400 Gb/s NDR InfiniBand = 3200 Gb/s" in text
    assert "8 InfiniBand ports" not in text
