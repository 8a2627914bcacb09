"""A cloud's catalog rows live in its own folder (goldenenv/clouds/<cloud>/catalog/<table>.csv), with `cloud` filled
from the folder's name, and a fabric's in its own (goldenenv/fabrics/<fabric>/catalog/<table>.csv), with `fabric`
filled, so a new cloud or fabric adds its rows without editing a shared file."""

from __future__ import annotations

import ast
import csv
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from goldenenv import catalog, clouds, fabrics
from goldenenv.catalog import health
from goldenenv.health import judge

SHARED = Path(catalog.__file__).parent / "data"


def _forget():
    """Drop every table the catalog has read, so the next question reads the folders again."""
    for value in vars(catalog).values():
        if hasattr(value, "cache_clear"):
            value.cache_clear()


def _scratch_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finder: str, name: str) -> Iterator[Path]:
    """A throw-away owner of catalog rows, `name`, whose catalog folder the reader's `finder` (cloud_folders or
    fabric_folders) finds beside the shipped owners' folders, for one test."""
    folder = tmp_path / name / "catalog"
    folder.mkdir(parents=True)
    shipped = getattr(catalog.files, finder)()
    monkeypatch.setattr(catalog.files, finder, lambda: {**shipped, name: folder})
    _forget()
    yield folder
    _forget()


@pytest.fixture
def scratch_cloud(tmp_path, monkeypatch):
    """A throw-away cloud `scratch` whose catalog folder is found beside the shipped clouds' folders."""
    yield from _scratch_folder(tmp_path, monkeypatch, "cloud_folders", "scratch")


@pytest.fixture
def scratch_fabric(tmp_path, monkeypatch):
    """A throw-away fabric `scratchnet` whose catalog folder is found beside the shipped fabrics' folders."""
    yield from _scratch_folder(tmp_path, monkeypatch, "fabric_folders", "scratchnet")


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def test_a_new_clouds_folder_rows_are_read_with_their_cloud_filled_in(scratch_cloud):
    _write(scratch_cloud / "instance_types.csv",
           "instance_type,gpu,gpu_count,vcpus,memory_gib,network_cards,rdma,rdma_interfaces,local_nvme_count,"
           "local_nvme_gib,network_gbps,source\n"
           "sx.8gpu,H100-80GB,8,192,2048,1,none,0,0,0,200,a test's row\n")
    _write(scratch_cloud / "prices.csv", "instance_type,region,capacity,usd_per_hour,as_of,source,currency\n"
                                         "sx.8gpu,moon-1,on-demand,12.5,2026-12-07,a test's row,USD\n")

    read = catalog.rows("instance_types")
    assert [(r["cloud"], r["instance_type"]) for r in read if r["cloud"] == "scratch"] == [("scratch", "sx.8gpu")]
    assert read[-1]["cloud"] == "scratch", "a cloud's rows follow the shared file's and the clouds before it by name"
    node = catalog.instance_type("scratch", "sx.8gpu")
    assert (node.cloud, node.gpu.name, node.gpu_count) == ("scratch", "H100-80GB", 8)
    assert catalog.price("scratch", "sx.8gpu", "moon-1").usd_per_hour == 12.5
    assert "scratch" not in {it.cloud for it in catalog.instance_types("aws").values()}


def test_a_new_clouds_own_table_is_listed_for_the_source_checks(scratch_cloud):
    _write(scratch_cloud / "scratch_quotas.csv", "quota,source\nGPUs,a test's row\n")
    assert "scratch_quotas" in catalog.tables()
    assert catalog.rows("scratch_quotas") == [{"cloud": "scratch", "quota": "GPUs", "source": "a test's row"}]


def test_a_cloud_file_that_names_its_cloud_again_is_refused(scratch_cloud):
    _write(scratch_cloud / "head_types.csv", "cloud,instance_type,vcpus,memory_gib,arch,source\n"
                                             "scratch,sx.small,2,8,x86_64,a test's row\n")
    with pytest.raises(ValueError, match=r"goldenenv/clouds/scratch/catalog/head_types.csv has a cloud column: its "
                                         r"folder names the cloud, so drop the column"):
        catalog.rows("head_types")


def test_a_cloud_file_with_other_columns_than_the_tables_is_refused(scratch_cloud):
    _write(scratch_cloud / "head_types.csv", "instance_type,vcpus,arch,source\nsx.small,2,x86_64,a test's row\n")
    with pytest.raises(ValueError, match=r"scratch/catalog/head_types.csv has the columns cloud, instance_type, "
                                         r"vcpus, arch, source; goldenenv/clouds/\w+/catalog/head_types.csv has "
                                         r"cloud, instance_type, vcpus, memory_gib, arch, source"):
        catalog.rows("head_types")


def test_an_unknown_table_names_where_it_was_looked_for():
    with pytest.raises(FileNotFoundError, match="no goldenenv/catalog/data/no_such_table.csv and no "
                                                "goldenenv/clouds/<cloud>/catalog/no_such_table.csv or "
                                                "goldenenv/fabrics/<fabric>/catalog/no_such_table.csv"):
        catalog.rows("no_such_table")


def test_every_shipped_cloud_folder_is_found():
    found = catalog.cloud_folders()
    for name in clouds.names():
        folder = resources.files("goldenenv").joinpath("clouds", name, "catalog")
        assert (name in found) == folder.is_dir(), name


OWNERS = {"cloud": ("goldenenv/clouds", lambda: set(clouds.names()), catalog.cloud_folders),
          "fabric": ("goldenenv/fabrics", lambda: set(fabrics.FABRICS), catalog.fabric_folders)}
"""What owns catalog rows in a folder of its own: the column the reader fills, the folders' parent, the owners' names
and their catalog folders."""


@pytest.mark.parametrize("column, table", [(c, p.stem) for c in OWNERS for p in sorted(SHARED.glob("*.csv"))])
def test_no_shared_file_holds_a_row_of_a_cloud_or_fabric_with_a_folder(column, table):
    """A cloud's or fabric's rows belong in its folder's catalog/, where they are read with its name filled in; the
    shared file keeps rows of no cloud or fabric (or of every cloud: `*`)."""
    parent, names, _ = OWNERS[column]
    with open(SHARED / f"{table}.csv", newline="", encoding="utf-8") as f:
        named = {row[column] for row in csv.DictReader(f) if column in row} & names()
    assert not named, (f"goldenenv/catalog/data/{table}.csv holds rows of {sorted(named)}: move them to "
                       f"{parent}/<{column}>/catalog/{table}.csv without the {column} column")


@pytest.mark.parametrize("column, owner", [(c, o) for c in OWNERS for o in sorted(OWNERS[c][2]())])
def test_an_owners_rows_carry_its_name_and_a_source(column, owner):
    folder = OWNERS[column][2]()[owner]
    for entry in folder.iterdir():
        if entry.name.endswith(".csv"):
            table = entry.name.removesuffix(".csv")
            with entry.open(newline="", encoding="utf-8") as f:
                written = list(csv.DictReader(f))
            assert written, f"{owner}/catalog/{entry.name} is empty"
            assert all(r["source"].strip() for r in written), f"{owner}/catalog/{entry.name}: a row without a source"
            # another kind of owner's column (a table both fabrics and accelerator families hold) is blank here, and
            # so is a column another file of the table adds at the end (Huawei's host images' npu_driver)
            header = set(written[0])
            read = [{k: v for k, v in r.items()
                     if k == column or v or (k not in catalog.files.PACKAGES and k in header)}
                    for r in catalog.rows(table) if r[column] == owner]
            assert read == [{column: owner, **r} for r in written]


@pytest.mark.parametrize("cloud", clouds.names())
def test_the_boot_volume_tier_a_cloud_lists_is_one_it_prices(cloud):
    """costs prices the nodes' and head's boot disks at the cloud's boot_volumes.csv tier (AWS: gp3)."""
    priced = {r["tier"] for r in catalog.rows("storage_prices") if (r["cloud"], r["item"]) == (cloud, "block-volume")}
    assert not priced or catalog.boot_volume_tier(cloud) in priced, (
        f"{cloud}'s boot volume tier {catalog.boot_volume_tier(cloud)!r} has no block-volume row in its "
        f"storage_prices.csv (tiers priced: {sorted(priced)})")


def test_aws_nodes_boot_disks_are_priced_as_gp3():
    assert catalog.boot_volume_tier("aws") == "gp3"
    assert catalog.boot_volume_tier("gcp") == ""


def test_a_new_fabrics_folder_rows_are_read_with_their_fabric_filled_in(scratch_fabric):
    _write(scratch_fabric / "fabric_env.csv", "variable,value,condition,source\n"
                                              "NCCL_SOCKET_IFNAME,sn0,always,a test's row\n")
    _write(scratch_fabric / "fabric_min_nccl.csv", "instance_type,min_nccl,min_plugin,source\n"
                                                   "*,2.99.1,,a test's row\n")
    _write(scratch_fabric / "fabric_mtu.csv", "jumbo_frames,mtu,nccl_proto,source\nyes,9000,,a test's row\n")

    assert catalog.fabric_env("scratchnet") == {"NCCL_SOCKET_IFNAME": "sn0"}
    assert [r for r in catalog.rows("fabric_min_nccl") if r["fabric"] == "scratchnet"] == [
        {"fabric": "scratchnet", "instance_type": "*", "min_nccl": "2.99.1", "min_plugin": "",
         "source": "a test's row"}]
    assert catalog.fabric_mtu("scratchnet", jumbo_frames=True).mtu == 9000
    assert catalog.fabric_mtu("scratchnet", jumbo_frames=False) is None
    assert "NCCL_SOCKET_IFNAME" not in catalog.fabric_env("efa"), "a fabric's rows are its own, not its neighbours'"


def test_a_fabric_file_that_names_its_fabric_again_is_refused(scratch_fabric):
    _write(scratch_fabric / "fabric_min_cuda.csv", "fabric,min_cuda,source\nscratchnet,12.4,a test's row\n")
    with pytest.raises(ValueError, match=r"goldenenv/fabrics/scratchnet/catalog/fabric_min_cuda.csv has a fabric "
                                         r"column: its folder names the fabric, so drop the column"):
        catalog.rows("fabric_min_cuda")


def _strings(path: Path) -> set[str]:
    """Every string a module writes (its check names among them)."""
    return {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


@pytest.fixture
def fresh_health_rules():
    """The health rules read again from the folders, before the test and after it."""
    health.thresholds.cache_clear()
    yield
    health.thresholds.cache_clear()


@pytest.mark.parametrize("fabric", sorted(judge.fabric_judge_files()))
def test_a_fabrics_health_rules_live_in_its_folder_not_the_shared_file(fabric):
    """A rule a fabric's health.py judges by (a check it names) is a row of its own folder's health_thresholds.csv,
    so a new fabric with a rule of its own edits no shared file."""
    with open(SHARED / "health_thresholds.csv", newline="", encoding="utf-8") as f:
        shared = {row["check"] for row in csv.DictReader(f)}
    named = _strings(judge.fabric_judge_files()[fabric])
    assert not named & shared, (f"goldenenv/catalog/data/health_thresholds.csv holds {sorted(named & shared)}, which "
                                f"{fabric}'s health.py judges by: move them to goldenenv/fabrics/{fabric}/catalog/")
    checks = {row["check"] for row in catalog.rows("health_thresholds")}
    own = {row["check"] for row in catalog.rows("health_thresholds") if row["fabric"] == fabric}
    assert named & checks <= own


def test_each_rdma_fabrics_device_rule_is_read_from_its_folder():
    """Literal anchors: EFA's, eRDMA's and InfiniBand's device counts drain a node (awsome-distributed-training's
    2-efa-enumeration.sh, Azure's check_hw_ib), and the shared rules are read as no fabric's."""
    read = {row["check"]: row["fabric"] for row in catalog.rows("health_thresholds")}
    assert {c: read[c] for c in ("efa_devices_below_expected", "erdma_devices_below_expected",
                                 "ib_devices_below_expected", "gpu_count_below_expected")} == {
        "efa_devices_below_expected": "efa", "erdma_devices_below_expected": "erdma",
        "ib_devices_below_expected": "ib", "gpu_count_below_expected": ""}
    assert all(health.thresholds()[c].action == "drain" for c in read if c.endswith("_devices_below_expected"))


def test_a_new_fabrics_health_rule_reaches_the_node_judges_rules(scratch_fabric, fresh_health_rules):
    _write(scratch_fabric / "health_thresholds.csv", "check,limit,unit,action,source\n"
                                                     "scratchnet_ports_down,0,ports down,drain,a test's row\n")
    assert health.rules_document()["thresholds"]["scratchnet_ports_down"] == {
        "limit": 0, "unit": "ports down", "action": "drain"}
    assert "gpu_count_below_expected" in health.rules_document()["thresholds"], "the shared rules stay"


def test_a_new_fabrics_row_in_a_table_no_fabric_had_rows_of_is_read_with_the_shared_ones(scratch_fabric):
    """The shared file has no fabric column: its rows are read as no fabric's, and the fabric edits no shared file."""
    _write(scratch_fabric / "health_xid.csv", "xid,name,nvidia_bucket,action,source\n"
                                              "9999,SCRATCH_FAULT,RESTART_APP,drain,a test's row\n")
    read = catalog.rows("health_xid")
    assert read[-1] == {"fabric": "scratchnet", "xid": "9999", "name": "SCRATCH_FAULT",
                        "nvidia_bucket": "RESTART_APP", "action": "drain", "source": "a test's row"}
    assert {row["fabric"] for row in read[:-1]} == {""}


def test_two_fabrics_naming_one_health_rule_with_different_limits_are_refused(scratch_fabric, fresh_health_rules):
    _write(scratch_fabric / "health_thresholds.csv", "check,limit,unit,action,source\n"
                                                     "erdma_devices_below_expected,1,eRDMA devices missing,drain,"
                                                     "a test's row\n")
    with pytest.raises(ValueError, match=r"erdma_devices_below_expected of fabric erdma and of fabric scratchnet "
                                         r"differ in limit, unit or action"):
        health.thresholds()


def test_every_shipped_fabric_folder_is_found():
    found = catalog.fabric_folders()
    for name in fabrics.FABRICS:
        folder = resources.files("goldenenv").joinpath("fabrics", name, "catalog")
        assert (name in found) == folder.is_dir(), name
    assert set(found) <= set(fabrics.FABRICS), "a catalog folder under goldenenv/fabrics/ belongs to no fabric"




def test_the_efa_installers_plugin_table_is_efas():
    """EFA's installer and aws-ofi-nccl tables sit in EFA's folder: every row is EFA's, and compat still finds the
    plugin an installer bundles (1.43.0 bundles aws-ofi-nccl 1.16.1, AWS's EFA release notes)."""
    assert {r["fabric"] for r in catalog.rows("efa_installer")} == {"efa"}
    assert {r["fabric"] for r in catalog.rows("aws_ofi_nccl")} == {"efa"}
    assert next(r["aws_ofi_nccl"] for r in catalog.rows("efa_installer") if r["efa_installer"] == "1.43.0") == "1.16.1"
