"""The catalog's files agree with each other, and every fact says where it comes from."""

from __future__ import annotations

import re

import pytest

from goldenenv import catalog, clouds, fabrics

NUMERIC = {
    "gpus": ("memory_gib",),
    "instance_types": ("gpu_count", "vcpus", "memory_gib", "network_cards", "rdma_interfaces",
                       "local_nvme_count", "local_nvme_gib", "network_gbps"),
    "prices": ("usd_per_hour",),
    "head_types": ("vcpus", "memory_gib"),
    "busbw_refs": ("nodes", "message_bytes", "busbw_gbytes_per_s"),
}
VERSION = re.compile(r"^\d+(\.\d+)*$")
VERSION_COLUMNS = {"cuda", "min_driver", "torch", "nccl", "min_cuda", "aws_ofi_nccl", "target_nccl",
                   "efa_installer", "cuda_major"}


@pytest.mark.parametrize("table", sorted(catalog.tables()))
def test_every_row_has_a_source_and_no_blank_required_field(table):
    rows = catalog.rows(table)
    assert rows, f"{table}.csv is empty"
    for row in rows:
        assert row["source"].strip(), f"{table}: a row without a source: {row}"
        for column in NUMERIC.get(table, ()):
            assert float(row[column]) >= 0, f"{table}.{column}: {row[column]!r}"
        for column in VERSION_COLUMNS & row.keys():
            if not row[column]:
                assert catalog.UNVERIFIED in row["source"], (
                    f"{table}.{column} is blank but its source is not marked {catalog.UNVERIFIED}: {row}")
                continue
            assert VERSION.match(row[column]), f"{table}.{column}: {row[column]!r} is not a version"


def test_the_instance_types_the_project_promises_are_listed():
    promised = {"g5.xlarge", "g5.48xlarge", "g6e.48xlarge", "p4d.24xlarge", "p4de.24xlarge",
                "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"}
    assert promised <= set(catalog.instance_types("aws"))


def test_instance_types_name_known_gpus_and_fit_their_fabric():
    gpus = catalog.gpus()
    for row in catalog.rows("instance_types"):
        assert row["gpu"] in gpus, f"{row['instance_type']}: unknown GPU {row['gpu']}"
        assert row["rdma"] == "none" or fabrics.get(row["rdma"]) is not None, row["instance_type"]
        assert row["rdma"] == "none" or fabrics.get(row["rdma"]).cloud == row["cloud"], row["instance_type"]
        assert (row["rdma"] == "none") == (int(row["rdma_interfaces"]) == 0), row["instance_type"]
        if row["cloud"] == "aws":
            assert int(row["rdma_interfaces"]) <= int(row["network_cards"]), row["instance_type"]


def test_every_aws_instance_type_has_a_price_and_prices_name_listed_types():
    listed = {(r["cloud"], r["instance_type"]) for r in catalog.rows("instance_types")}
    heads = {(r["cloud"], r["instance_type"]) for r in catalog.rows("head_types")}
    priced = {(r["cloud"], r["instance_type"]) for r in catalog.rows("prices")}
    assert priced <= listed | heads
    assert {k for k in listed | heads if k[0] == "aws"} <= priced
    for r in catalog.rows("prices"):
        assert re.match(r"^\d{4}-\d{2}-\d{2}$", r["as_of"]), r


def test_head_types_are_cpu_types_the_golden_image_runs_on_and_no_gpu_node_type():
    for row in catalog.rows("head_types"):
        assert row["arch"] in ("x86_64", "aarch64"), row  # linux/amd64 images, and linux/arm64 ones (Ascend)
        assert (row["cloud"], row["instance_type"]) not in {(r["cloud"], r["instance_type"])
                                                            for r in catalog.rows("instance_types")}
    # literal anchor: m7i.large is 2 vCPU / 8 GiB (AWS's M7i table)
    head = catalog.head_type("aws", "m7i.large")
    assert (head.vcpus, head.memory_gib) == (2, 8)


def test_every_clouds_default_head_type_is_in_the_catalog():
    from goldenenv import clouds

    for name in clouds.names():
        default = getattr(clouds.get(name), "head_instance_type", None)
        if default:
            assert catalog.head_type(name, default) is not None, (name, default)


def test_gpu_architectures_have_a_minimum_cuda():
    """Every NVIDIA GPU's architecture (an NPU's is no CUDA architecture: its family's tables hold it)."""
    archs = {r["arch"] for r in catalog.rows("arch_min_cuda")}
    assert {r["arch"] for r in catalog.rows("gpus") if r["vendor"] == "nvidia"} <= archs


def test_torch_builds_name_cuda_releases_with_a_driver_minimum():
    cuda = {r["cuda"] for r in catalog.rows("cuda_min_driver")}
    for row in catalog.rows("torch_builds"):
        for variant in row["cuda_variants"].split():
            digits = variant.removeprefix("cu")
            assert f"{digits[:-1]}.{digits[-1]}" in cuda, f"torch {row['torch']}: {variant} has no driver row"


def test_driver_minimums_rise_with_cuda():
    rows = catalog.rows("cuda_min_driver")
    order = {"GA": 0, "U1": 1, "U2": 2, "U3": 3}
    ranked = sorted(rows, key=lambda r: (catalog.version_tuple(r["cuda"]), order[r["release"]]))
    drivers = [catalog.version_tuple(r["min_driver"]) for r in ranked]
    assert drivers == sorted(drivers)


def test_every_efa_installers_bundled_plugin_has_an_aws_ofi_nccl_row():
    plugins = {r["aws_ofi_nccl"] for r in catalog.rows("aws_ofi_nccl")}
    missing = {r["efa_installer"]: r["aws_ofi_nccl"] for r in catalog.rows("efa_installer")
               if r["aws_ofi_nccl"] not in plugins}
    assert not missing, f"EFA installer -> plugin without an aws_ofi_nccl row: {missing}"


@pytest.mark.parametrize("plugin, target, minimum", [
    # aws/aws-ofi-nccl RELEASENOTES.md: "supports NCCL X while maintaining backward compatibility ... v2.17.1 and later"
    ("1.15.0", "2.26.6", "2.17.1"),
    ("1.16.2", "2.27.6", "2.17.1"),
    ("1.16.3", "2.27.7", "2.17.1"),
])
def test_plugin_rows_match_the_release_notes(plugin, target, minimum):
    [row] = [r for r in catalog.rows("aws_ofi_nccl") if r["aws_ofi_nccl"] == plugin]
    assert (row["target_nccl"], row["min_nccl"]) == (target, minimum)


def test_busbw_and_fabric_rows_name_listed_types():
    listed = set(catalog.instance_types("aws")) | {"*"}
    every = {name for cloud in clouds.names() for name in catalog.instance_types(cloud)}
    assert {r.instance_type for r in catalog.busbw_references()} <= listed | every
    assert {r["instance_type"] for r in catalog.rows("fabric_min_nccl")} <= listed | set(
        catalog.instance_types("alicloud"))
    assert {r.kind for r in catalog.busbw_references()} <= {"reference", "floor"}


def test_busbw_references_grow_with_message_size():
    """The verdict uses a smaller-size reference as a lower bar; that is sound only while busbw rises with size."""
    series: dict[tuple[str, int], list[catalog.BusbwReference]] = {}
    for ref in catalog.busbw_references():
        if ref.kind == "reference":
            series.setdefault((ref.instance_type, ref.nodes), []).append(ref)
    for refs in series.values():
        figures = [r.busbw_gbytes_per_s for r in sorted(refs, key=lambda r: r.message_bytes)]
        assert figures == sorted(figures), refs


def test_fabric_env_conditions_are_readable_and_select_by_version():
    for row in catalog.rows("fabric_env"):
        catalog.condition_holds(row["condition"], {})  # raises on a clause it cannot read
    old = catalog.fabric_env("efa", {"aws_ofi_nccl": "1.5.0", "libfabric": "1.17"})
    new = catalog.fabric_env("efa", {"aws_ofi_nccl": "1.14.2", "libfabric": "1.22"})
    assert set(catalog.fabric_env("efa")) <= set(new) < set(old)


def test_condition_grammar():
    assert catalog.condition_holds("always", {})
    assert catalog.condition_holds("nccl<2.19 or libfabric>=1.18", {"libfabric": "1.18.0"})
    assert not catalog.condition_holds("nccl<2.19", {"nccl": "2.19.3"})
    assert not catalog.condition_holds("nccl<2.19", {})
    with pytest.raises(ValueError, match="unreadable condition"):
        catalog.condition_holds("nccl is old", {})


def test_a_price_is_the_regions_own_and_another_regions_is_only_a_hint():
    it = next(iter(catalog.instance_types("aws")))
    assert catalog.price("aws", it, "us-east-1").region == "us-east-1"
    assert catalog.price("aws", it, "ap-south-2") is None
    hint = catalog.price_elsewhere("aws", it, "ap-south-2")
    assert hint is not None and hint.region != "ap-south-2"
    assert catalog.price("aws", "no-such-type", "us-east-1") is None
