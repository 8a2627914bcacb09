"""Google Cloud (gcp) rows of the catalog: literal anchors from Google's public tables, and cross-table coverage."""

from __future__ import annotations

import re

import pytest

from goldenenv import catalog, compat

GCP = catalog.instance_types("gcp")


def test_the_gpu_types_of_issue_23_are_listed():
    assert {"a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g",
            "a2-ultragpu-1g", "a2-ultragpu-8g", "g2-standard-4", "g2-standard-96"} <= set(GCP)


@pytest.mark.parametrize("name, gpu, count, vcpus, memory, host_nics, rdma, gpu_nics, lssd_gib, gbps", [
    # Google Cloud 'GPU machine types' tables (compute/docs/gpus) and gpu-network-bandwidth
    ("a3-highgpu-8g", "H100-80GB", 8, 208, 1872, 1, "tcpx", 4, 6000, 1000),
    ("a3-megagpu-8g", "H100-80GB", 8, 208, 1872, 1, "tcpxo", 8, 6000, 1800),
    ("a3-ultragpu-8g", "H200-141GB", 8, 224, 2952, 2, "gib", 8, 12000, 3600),
    ("a4-highgpu-8g", "B200", 8, 224, 3968, 2, "gib", 8, 12000, 3600),
    ("a2-ultragpu-1g", "A100-80GB", 1, 12, 170, 1, "none", 0, 375, 24),
    ("a2-ultragpu-8g", "A100-80GB", 8, 96, 1360, 1, "none", 0, 3000, 100),
    ("g2-standard-4", "L4", 1, 4, 16, 1, "none", 0, 0, 10),
    ("g2-standard-48", "L4", 4, 48, 192, 1, "none", 0, 0, 50),
    ("g2-standard-96", "L4", 8, 96, 384, 1, "none", 0, 0, 100),
])
def test_machine_type_anchors(name, gpu, count, vcpus, memory, host_nics, rdma, gpu_nics, lssd_gib, gbps):
    it = catalog.instance_type("gcp", name)
    assert (it.gpu.name, it.gpu_count, it.vcpus, it.memory_gib) == (gpu, count, vcpus, memory)
    assert (it.network_cards, it.rdma, it.rdma_interfaces) == (host_nics, rdma, gpu_nics)
    assert it.local_nvme_count * it.local_nvme_gib == lssd_gib
    assert it.network_gbps == gbps


def test_bundled_local_ssd_is_375_gib_disks():
    for it in GCP.values():
        assert it.local_nvme_gib in (0, 375), it.name
        assert (it.local_nvme_count == 0) == (it.local_nvme_gib == 0), it.name


def test_l4_is_an_ada_gpu_with_its_tables():
    l4 = catalog.gpus()["L4"]
    assert (l4.arch, l4.memory_gib) == ("sm_89", 24)
    assert catalog.gpu_usable_mib()["L4"][0] == 23034
    assert catalog.gpu_peak_tflops()["L4"].bf16_dense_tflops == 121
    assert catalog.gpu_bandwidth()["L4"].nvlink_gbytes_per_s_per_link == 0


@pytest.mark.parametrize("name", sorted(GCP))
def test_every_gcp_type_has_a_price_zones_a_layout_and_link_facts(name):
    price = catalog.price("gcp", name, "us-central1")
    assert price is not None and price.capacity == "on-demand" and price.usd_per_hour > 0, name
    assert price.region == "us-central1" and price.currency == "USD"
    zones = catalog.type_zones("gcp", name)
    assert zones and all(zones.values()), name
    for region, listed in zones.items():
        known = catalog.zones("gcp", region)
        assert known is not None, (name, region)
        assert set(listed) <= set(known.zones), (name, region, listed)
        assert all(z.startswith(f"{region}-") for z in listed)
    layout = catalog.node_layout("gcp", name)
    assert layout is not None, name
    assert layout.placement == ("compact" if catalog.instance_type("gcp", name).has_rdma else "none")
    assert layout.jumbo_frames == catalog.instance_type("gcp", name).has_rdma
    assert any(r["cloud"] == "gcp" and r["instance_type"] == name for r in catalog.rows("health_links"))


def test_type_zones_anchors():
    # SkyPilot's GCP catalog: A3 Ultra sells in us-central1-b; A3 Mega in all three us-central1 GPU zones
    assert catalog.type_zones("gcp", "a3-ultragpu-8g")["us-central1"] == ("us-central1-b",)
    assert catalog.type_zones("gcp", "a3-megagpu-8g")["us-central1"] == ("us-central1-a", "us-central1-b",
                                                                          "us-central1-c")
    assert catalog.type_zones("gcp", "no-such-type") == {}
    assert catalog.zones("gcp", "us-central1").zones == ("us-central1-a", "us-central1-b", "us-central1-c",
                                                         "us-central1-f")


def test_type_zones_rows_are_well_formed():
    for r in catalog.rows("type_zones"):
        assert r["instance_type"] in catalog.instance_types(r["cloud"]), r
        assert re.match(r"^\d{4}-\d{2}-\d{2}$", r["as_of"]), r
        assert r["zones"].split() and r["source"].strip(), r


def test_prices_say_host_plus_gpus_and_spot_lives_in_the_snapshot_table():
    for r in catalog.rows("prices"):
        if r["cloud"] == "gcp" and r["instance_type"] in GCP:
            assert "host" in r["source"] and r["capacity"] == "on-demand", r
    snap = catalog.spot_price("gcp", "a3-megagpu-8g", "us-central1")
    assert snap is not None and snap.capacity == "spot"
    assert snap.usd_per_hour < catalog.price("gcp", "a3-megagpu-8g", "us-central1").usd_per_hour


def test_head_type_is_n2_standard_2_and_priced():
    head = catalog.head_type("gcp", "n2-standard-2")
    assert (head.vcpus, head.memory_gib, head.arch) == (2, 8, "x86_64")
    assert catalog.price("gcp", "n2-standard-2", "us-central1") is not None


def test_host_images_name_google_accelerator_images_with_comparable_drivers():
    images = catalog.host_images("gcp")
    assert set(images) == {"ubuntu-accel-2204-nvidia-570-20260210", "ubuntu-accel-2404-nvidia-580-20260522"}
    for image in images.values():
        assert re.match(r"^[a-z0-9][a-z0-9.-]{0,63}$", image.name)
        assert image.owner == "ubuntu-os-accelerator-images" and image.region == "*"
        assert image.image_id == f"projects/ubuntu-os-accelerator-images/global/images/{image.ami_name}"
        assert image.nvidia_driver.split(".")[0] in image.ami_name
    # the driver columns are lower bounds of their branch: they must compare as at least the branch's CUDA GA floor
    assert compat.driver_support("12.8", images["ubuntu-accel-2204-nvidia-570-20260210"].nvidia_driver).level == "full"
    assert compat.driver_support("13.0", images["ubuntu-accel-2404-nvidia-580-20260522"].nvidia_driver).level == "full"


@pytest.mark.parametrize("item, tier", [("object-store", "standard"), ("block-volume", ""), ("parallel-fs", "125"),
                                        ("parallel-fs", "250"), ("parallel-fs", "500"), ("parallel-fs", "1000")])
def test_storage_prices_the_cost_model_asks_for(item, tier):
    assert catalog.service_price("storage_prices", "gcp", item, "us-central1", tier) is not None


@pytest.mark.parametrize("item", ["nat-gateway", "nat-gateway-data", "internet-egress"])
def test_network_prices_the_cost_model_asks_for(item):
    assert catalog.service_price("network_prices", "gcp", item, "us-central1") is not None


def test_cloud_nat_anchor():
    # cloud.google.com/nat/pricing: $0.0014 per VM-hour capped at $0.044; $0.045 per GiB processed
    assert catalog.service_price("network_prices", "gcp", "nat-gateway", "us-central1").price == 0.044
    assert catalog.service_price("network_prices", "gcp", "nat-gateway-data", "us-central1").price == 0.045


def test_capacity_errors_cover_google_stockouts():
    codes = {r["code"]: r for r in catalog.rows("capacity_errors") if r["cloud"] == "gcp"}
    for code in ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "GCE_STOCKOUT"):
        assert codes[code]["class"] == "capacity", code
    assert codes["QUOTA_EXCEEDED"]["class"] == "quota"
