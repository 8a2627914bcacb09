"""`goldenenv image check-lock / check --instance-type` judge the type on the cloud whose catalog lists it: no cloud
is assumed (the option once defaulted to aws), and a type no cloud or several clouds list asks for --cloud."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from goldenenv import catalog, lifecycle
from goldenenv.cli import app

WIDE = {"COLUMNS": "300"}


def _check_lock(*args: str):
    return CliRunner().invoke(app, ["image", "check-lock", "cpu-dev", *args], env=WIDE)


def test_the_cloud_of_an_instance_type_is_the_one_whose_catalog_lists_it():
    for name in ("g5.xlarge", "Standard_NC24ads_A100_v4"):
        done = _check_lock("--instance-type", name)
        assert done.exit_code == 0, done.output
        assert f"cpu-dev passes on {name}" in done.output


def test_an_instance_type_no_catalog_lists_asks_for_the_cloud():
    done = _check_lock("--instance-type", "p9.huge")
    assert done.exit_code == 2
    assert re.search(r"--instance-type p9\.huge: no cloud's catalog lists it; give --cloud \(one of alicloud, aws, "
                     r"azure, gcp(, [a-z]+)*\) and an instance type that cloud's catalog lists", done.output), done.output
    assert "Traceback" not in done.output


def test_an_instance_type_two_clouds_list_asks_which(tmp_path, monkeypatch):
    folder = tmp_path / "scratch" / "catalog"
    folder.mkdir(parents=True)
    (folder / "instance_types.csv").write_text(
        "instance_type,gpu,gpu_count,vcpus,memory_gib,network_cards,rdma,rdma_interfaces,local_nvme_count,"
        "local_nvme_gib,network_gbps,source\ng5.xlarge,A10G,1,4,16,1,none,0,0,0,10,a test's row\n")
    shipped = catalog.cloud_folders()
    monkeypatch.setattr(catalog.files, "cloud_folders", lambda: {**shipped, "scratch": folder})
    catalog._read.cache_clear()
    catalog._instance_types.cache_clear()
    try:
        done = _check_lock("--instance-type", "g5.xlarge")
    finally:
        catalog._read.cache_clear()
        catalog._instance_types.cache_clear()
    assert done.exit_code == 2
    assert ("--instance-type g5.xlarge: the catalogs of aws and scratch list it; give --cloud aws or --cloud scratch"
            in done.output)


def test_a_given_cloud_is_the_one_judged():
    done = _check_lock("--instance-type", "g5.xlarge", "--cloud", "gcp")
    assert done.exit_code == 1
    assert "g5.xlarge" in done.output and "gcp" in done.output


def test_validating_nodes_of_an_instance_type_needs_its_cloud():
    with pytest.raises(ValueError, match="instance type g5.xlarge needs its cloud"):
        lifecycle.validate_hosts("cpu-dev", ["ssh://node"], instance_type="g5.xlarge")
