"""Azure rows of the catalog: literal anchors from Microsoft's size tables and Azure/azurehpc-health-checks, the
Ubuntu HPC image pinned by version, prices and zones for the stacks, and the health judge's InfiniBand check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from goldenenv import catalog, compat, costs, estimate
from goldenenv.estimate import network
from goldenenv.catalog import capacity, health
from goldenenv.health import judge
from goldenenv.images import lock as locks

AZURE = catalog.instance_types("azure")
ROOT = Path(__file__).resolve().parents[2]
CAPTURES = Path(__file__).parent / "captures" / "health"
LINKS = {r["instance_type"]: r for r in catalog.rows("health_links") if r["cloud"] == "azure"}
NO_REGION_SOURCE = {"Standard_ND96isr_H200_v5"}
"""Sizes whose selling regions no source read names (type_zones.csv has no row: plan cannot refuse a region)."""


def stacks() -> dict[str, dict]:
    """The Azure stacks' config, by stack file name."""
    found = {}
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        config = (yaml.safe_load(path.read_text()) or {}).get("config", {})
        if config.get("goldenenv:cloud") == "azure":
            found[path.name] = config
    return found


def pools(config: dict) -> list[dict]:
    nodes = config["goldenenv:nodes"]
    return nodes if isinstance(nodes, list) else [nodes]


def test_the_sizes_of_issue_24_are_listed():
    assert {"Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_ND96amsr_A100_v4",
            "Standard_NC24ads_A100_v4", "Standard_NC4as_T4_v3", "Standard_NC40ads_H100_v5"} <= set(AZURE)


@pytest.mark.parametrize("name, gpu, count, vcpus, memory, rdma, ports, nvme, nvme_total, ethernet_gbps", [
    # Microsoft's size tables (azure-compute-docs sizes/gpu-accelerated) and AzNHC's conf per size
    ("Standard_ND96isr_H100_v5", "H100-80GB", 8, 96, 1900, "ib", 8, 8, 28000, 80),
    ("Standard_ND96isr_H200_v5", "H200-141GB", 8, 96, 1850, "ib", 8, 8, 28000, 80),
    ("Standard_ND96amsr_A100_v4", "A100-80GB", 8, 96, 1900, "ib", 8, 0, 0, 24),
    ("Standard_NC24ads_A100_v4", "A100-80GB", 1, 24, 220, "none", 0, 0, 0, 20),
    ("Standard_NC4as_T4_v3", "T4", 1, 4, 28, "none", 0, 0, 0, 8),
    ("Standard_NC40ads_H100_v5", "H100-NVL-94GB", 1, 40, 320, "none", 0, 0, 0, 40),
])
def test_size_anchors(name, gpu, count, vcpus, memory, rdma, ports, nvme, nvme_total, ethernet_gbps):
    it = catalog.instance_type("azure", name)
    assert (it.gpu.name, it.gpu_count, it.vcpus, it.memory_gib) == (gpu, count, vcpus, memory)
    assert (it.network_cards, it.rdma, it.rdma_interfaces) == (1, rdma, ports)  # one Ethernet NIC, one IB port a GPU
    assert (it.local_nvme_count, it.local_nvme_count * it.local_nvme_gib) == (nvme, nvme_total)
    # the node's network as the other clouds count it: Ethernet plus every InfiniBand port at its rate
    rate = float(LINKS[name]["fabric_rate_gbps"] or 0)
    assert it.network_gbps == ethernet_gbps + ports * rate


def test_every_infiniband_size_records_its_port_rate_and_no_other_does():
    assert {n: LINKS[n]["fabric_rate_gbps"] for n in LINKS if AZURE[n].rdma == "ib"} == {
        "Standard_ND96isr_H100_v5": "400", "Standard_ND96isr_H200_v5": "400", "Standard_ND96amsr_A100_v4": "200"}
    assert all(r["fabric_rate_gbps"] == "" for r in catalog.rows("health_links") if r["instance_type"] not in {
        n for n, it in AZURE.items() if it.rdma == "ib"})
    assert set(LINKS) == set(AZURE)
    assert (LINKS["Standard_ND96isr_H100_v5"]["nvlinks_per_gpu"], LINKS["Standard_ND96isr_H100_v5"]["nvswitch"]) == (
        "18", "yes")


def nd_h100_expectations() -> dict:
    """What a healthy ND H100 v5 node shows, from the catalog: the type's expectations and its IB port rate."""
    name = "Standard_ND96isr_H100_v5"
    return {**health.expectations("azure", name), "fabric_rate_gbps": int(LINKS[name]["fabric_rate_gbps"])}


def judged(ibstat: str | None = None) -> list[judge.Finding]:
    files = judge.read_evidence(str(CAPTURES / "healthy-ib"))
    if ibstat is not None:
        files["ibstat.txt"] = ibstat
    return judge.judge(files, nd_h100_expectations(), health.rules_document(), "gpu-node-0")


def test_an_nd_h100_v5_node_with_eight_active_ndr_ports_is_healthy():
    expect = nd_h100_expectations()
    assert expect == json.loads((CAPTURES / "healthy-ib" / "expect.json").read_text())
    assert (expect["fabric"], expect["fabric_devices"], expect["fabric_rate_gbps"]) == ("ib", 8, 400)
    assert judged() == []


def test_an_nd_h100_v5_port_at_hdr_rate_or_down_takes_the_node_out():
    text = (CAPTURES / "healthy-ib" / "ibstat.txt").read_text()
    blocks = text.split("CA '")
    slow = "CA '".join(b.replace("Rate: 400", "Rate: 200") if b.startswith("mlx5_ib3'") else b for b in blocks)
    assert slow != text
    assert {(f.rule, f.device) for f in judged(slow)} == {("ib_rate_below_expected", "mlx5_ib3 port 1")}
    down = (CAPTURES / "ib-port-down" / "ibstat.txt").read_text()
    assert [f.rule for f in judged(down)] == ["ib_port_not_active"]
    assert judge.worst(judged(down)) in judge.FAILING_ACTIONS


@pytest.mark.parametrize("name", sorted(AZURE))
def test_every_azure_size_has_an_eastus_price_zones_a_layout_and_link_facts(name):
    it = AZURE[name]
    price = catalog.price("azure", name, "eastus")
    assert price is not None and price.region == "eastus" and price.capacity == "on-demand", name
    assert price.currency == "USD" and price.usd_per_hour > 0
    sold = catalog.type_zones("azure", name)
    assert bool(sold) == (name not in NO_REGION_SOURCE), name
    for region, zones in sold.items():
        known = catalog.zones("azure", region)
        assert known is not None and known.complete, (name, region)
        assert zones and set(zones) <= set(known.zones), (name, region, zones)
        assert all(re.fullmatch(rf"{region}-[1-3]", z) for z in zones)
    layout = catalog.node_layout("azure", name)
    assert layout is not None
    assert layout.placement == ("scale-set" if it.has_rdma else "none")
    assert (layout.queue_pairs, layout.jumbo_frames) == (0, False)


def test_zones_are_written_region_dash_logical_zone():
    assert catalog.zones("azure", "eastus").zones == ("eastus-1", "eastus-2", "eastus-3")
    assert {r["region"] for r in catalog.rows("zones") if r["cloud"] == "azure"} == {
        "eastus", "eastus2", "westus3", "swedencentral"}
    assert catalog.type_zones("azure", "Standard_ND96isr_H100_v5")["eastus"][0] == "eastus-1"


def test_every_stack_size_is_priced_and_sold_where_its_stack_runs():
    found = stacks()
    assert {"Pulumi.azure-ndh100-2node.yaml", "Pulumi.azure-nc-dev.yaml"} <= set(found)
    for stack, config in found.items():
        region = config["goldenenv:region"]
        for pool in pools(config):
            name = pool["instanceType"]
            price = catalog.price("azure", name, region)
            assert price is not None and price.region == region, (stack, name)
            assert region in catalog.type_zones("azure", name), (stack, name, region)
        assert catalog.price("azure", "Standard_D2s_v5", region).region == region, stack
    dev = found["Pulumi.azure-nc-dev.yaml"]
    assert pools(dev)[0]["instanceType"] == "Standard_NC4as_T4_v3" and dev["goldenenv:region"] == "eastus"


def test_two_nd_h100_nodes_cost_what_the_retail_api_says_per_hour():
    # Azure Retail Prices API, eastus Consumption meter ND96isrH100v5 (Linux): 98.32 USD an hour
    price = catalog.price("azure", "Standard_ND96isr_H100_v5", "eastus")
    assert price.usd_per_hour == 98.32 and price.verified
    line = costs.run_cost("azure", "Standard_ND96isr_H100_v5", "eastus", "on-demand", 2, 1.0)
    assert line.amount == pytest.approx(196.64) and line.currency == "USD"
    spot = catalog.spot_price("azure", "Standard_ND96isr_H100_v5", "eastus")
    assert spot is not None and spot.usd_per_hour < price.usd_per_hour and not spot.verified


def test_head_type_is_d2s_v5_and_priced():
    head = catalog.head_type("azure", "Standard_D2s_v5")
    assert (head.vcpus, head.memory_gib, head.arch) == (2, 8, "x86_64")
    assert catalog.price("azure", "Standard_D2s_v5", "eastus").usd_per_hour == 0.096


URN = re.compile(r"microsoft-dsvm:ubuntu-hpc:(?P<sku>2204|2404):(?P<version>(?:22|24)\.04\.(?P<date>\d{8})\d{2})")


def test_host_images_are_the_ubuntu_hpc_image_pinned_by_version():
    images = catalog.host_images("azure")
    assert set(images) == {"ubuntu-hpc-2404-24.04.2026072901", "ubuntu-hpc-2204-22.04.2024102301"}
    for image in images.values():
        found = URN.fullmatch(image.image_id)
        assert found, image.image_id
        assert "latest" not in image.image_id.lower()
        assert found["version"].startswith(f"{found['sku'][:2]}.04.")
        assert image.name == f"ubuntu-hpc-{found['sku']}-{found['version']}" and image.ami_name == image.image_id
        assert (image.owner, image.region, image.released) == ("microsoft-dsvm", "*", found["date"])
        assert image.os == f"Ubuntu {found['sku'][:2]}.04"
        assert (image.docker, image.container_toolkit) != ("", "") and "none" not in (
            image.docker, image.container_toolkit)
        # the driver runs the CUDA the image itself ships
        assert compat.driver_support(image.cuda, image.nvidia_driver).level == "full", image.name
    # the newest is the default for a region; azhpc-images tag ubuntu-hpc-2026072901: driver 580.173.02 on 24.04
    default = catalog.host_image("azure", "eastus")
    assert default.name == "ubuntu-hpc-2404-24.04.2026072901" and default.nvidia_driver == "580.173.02"


@pytest.mark.parametrize("lock", ["azure-h100", "azure-t4"])
def test_the_default_host_images_driver_fully_runs_the_azure_locks(lock):
    cuda = locks.load(lock).cuda
    assert compat.driver_support(cuda, catalog.host_image("azure", "eastus").nvidia_driver).level == "full"


@pytest.mark.parametrize("item, tier", [("object-store", "standard"), ("block-volume", ""), ("parallel-fs", "40"),
                                        ("parallel-fs", "125"), ("parallel-fs", "250"), ("parallel-fs", "500")])
def test_storage_prices_the_cost_model_asks_for(item, tier):
    found = catalog.service_price("storage_prices", "azure", item, "eastus", tier)
    assert found is not None and found.region == "eastus" and found.currency == "USD"


def test_managed_lustre_placeholders_say_so():
    for tier in ("40", "125", "250", "500"):
        row = catalog.service_price("storage_prices", "azure", "parallel-fs", "eastus", tier)
        assert not row.verified and "placeholder" in row.source and f"AMLFS-Durable-Premium-{tier}" in row.source


@pytest.mark.parametrize("item", ["nat-gateway", "nat-gateway-data", "internet-egress"])
def test_network_prices_the_cost_model_asks_for(item):
    assert catalog.service_price("network_prices", "azure", item, "eastus") is not None


def test_capacity_errors_cover_azures_allocation_failures():
    codes = capacity.capacity_errors("azure")
    for code in ("AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest",
                 "OverconstrainedZonalAllocationRequest"):
        assert codes[code].klass == "capacity", code
    assert codes["SkuNotAvailable"].klass == "unsupported"
    assert {codes["OperationNotAllowed"].klass, codes["QuotaExceeded"].klass} == {"quota"}


def test_t4_and_h100_nvl_have_their_tables():
    t4, nvl = catalog.gpus()["T4"], catalog.gpus()["H100-NVL-94GB"]
    assert (t4.arch, t4.memory_gib, nvl.arch, nvl.memory_gib) == ("sm_75", 16, "sm_90", 94)
    assert {r["arch"]: r["min_cuda"] for r in catalog.rows("arch_min_cuda")}["sm_75"] == "10.0"
    assert catalog.gpu_usable_mib()["T4"][0] == 15360 and catalog.gpu_usable_mib()["H100-NVL-94GB"][0] == 95830
    assert catalog.gpu_bandwidth()["T4"].pcie_generation == 3
    assert {"T4", "H100-NVL-94GB"} <= set(catalog.gpu_peak_tflops())


def test_estimate_ranks_azure_sizes_with_their_infiniband():
    found = {o.instance_type: o for o in estimate.options(estimate.Request(params=1e9, tokens=1e9))
             if o.cloud == "azure" and o.capacity == "on-demand"}
    assert set(found) == set(AZURE)
    nd = found["Standard_ND96isr_H100_v5"]
    assert nd.fits and nd.cost is not None and nd.currency == "USD"
    links = network.links("azure", "Standard_ND96isr_H100_v5")
    # NCCL's rate is the 8 NDR ports' (8 × 400), not the 3280 of network_gbps, which adds the 80 Gb/s Ethernet NIC
    assert links.rdma and links.inter == "IB 3200 Gbps (8 × 400 Gb/s NDR InfiniBand)"


def test_one_nd_h100_v5_below_aznhcs_all_reduce_figure_fails_the_cluster_check():
    from goldenenv.checks.cluster import busbw_verdict

    (ref,) = [r for r in catalog.busbw_references() if r.instance_type == "Standard_ND96isr_H100_v5"]
    assert (ref.nodes, ref.busbw_gbytes_per_s) == (1, 460)  # AzNHC's check_nccl_allreduce 460.0 at 16G
    assert busbw_verdict(ref.instance_type, 1, 470.0, 0.9, message_bytes=16 << 30)[0]
    ok, why = busbw_verdict(ref.instance_type, 1, 300.0, 0.9, message_bytes=16 << 30)
    assert not ok and "460" in why
