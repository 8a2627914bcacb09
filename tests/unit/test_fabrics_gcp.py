"""Google Cloud's GPU fabrics (GPUDirect-TCPX, GPUDirect-TCPXO, gIB) through the registry: the catalog rows they read,
the lock sections that pin them, the compat refusals, the image layer and the boot checks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from goldenenv import catalog, compat, fabrics
from goldenenv.checks.expectations import expectations
from goldenenv.images import dockerfile
from goldenenv.images.lock import IMAGES, Lock, load
from goldenenv.nodeboot import CONTAINER_UNIT, boot_unit, fabric_host_values
from goldenenv.spec import ConfigError

GCP = ("tcpx", "tcpxo", "gib")
SHA = "0" * 64
PAIR = {"plugin": "1.0.12", "rxdm": "1.0.18"}
"""The TCPXO plugin and RxDM Google released together (container-engine-accelerators gpudirect-tcpxo, Aug 2025)."""


def gpu_lock(**doc) -> Lock:
    """A torch 2.7 cu126 lock (NCCL 2.26.2, the catalog's torch_builds row), overridden by doc (camelCase)."""
    torch = next(r for r in catalog.rows("torch_builds") if r["torch"] == "2.7")
    base = {"name": "test", "python": "3.13", "cuda": "12.6.3", "nccl": torch["nccl"], "torch": "2.7.0",
            "torchCuda": "cu126", "gpuArchs": ["sm_90"],
            "base": {"bootstrap": {"distro": "debian", "release": "trixie", "mirror": "http://deb.debian.org/debian"}},
            "packages": {"torch": {"version": "2.7.0", "sha256": [SHA], "group": "torch"}}}
    return Lock.model_validate(base | doc)


def write_lock(folder: Path, doc: dict) -> str:
    shutil.copytree(IMAGES / "h100-torch", folder / "h100-torch", dirs_exist_ok=True)
    (folder / doc["name"]).mkdir(parents=True, exist_ok=True)
    (folder / doc["name"] / "lock.yaml").write_text(yaml.safe_dump(doc))
    return doc["name"]


@pytest.mark.parametrize("name", GCP)
def test_each_gcp_fabric_resolves_with_its_env_mtu_and_floor_from_the_catalog(name):
    fabric = fabrics.get(name)
    assert fabric.name == name and fabric.cloud == "gcp" and fabrics.label(name) == fabric.label
    assert fabric.env() == catalog.fabric_env(name) and fabric.env()
    assert fabric.env()["LD_LIBRARY_PATH"] == fabric.libraries  # the image puts the plugin where the node looks
    assert catalog.fabric_mtu(name, True) is not None and fabric.min_nccl("*")
    assert fabric.lock_section == name and fabric.section.model_fields


def test_gcp_fabric_anchors_from_public_sources():
    # VPC MTUs of Google's blueprints (8244 on A3 High and Mega) and the RoCE profile's default (8896)
    assert {n: catalog.fabric_mtu(n, True).mtu for n in GCP} == {"tcpx": 8244, "tcpxo": 8244, "gib": 8896}
    # every TCPXO release names NCCL >= 2.21.5 (gpudirect-tcpxo/README.md); gIB's plugin is selected as NCCL_NET=gIB
    assert fabrics.get("tcpxo").min_nccl("*")[0]["min_nccl"] == "2.21.5"
    assert fabrics.get("gib").env()["NCCL_NET"] == "gIB"
    assert fabrics.get("tcpxo").env()["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] == "/dev/aperture_devices"
    assert fabrics.get("tcpxo").env()["LD_LIBRARY_PATH"] == "/var/lib/tcpxo/lib64"


@pytest.mark.parametrize("instance_type, fabric, mtu", [
    ("a3-highgpu-8g", "tcpx", 8244), ("a3-megagpu-8g", "tcpxo", 8244), ("a3-ultragpu-8g", "gib", 8896)])
def test_the_catalog_types_name_their_fabric_and_run_its_mtu(instance_type, fabric, mtu):
    node = catalog.instance_type("gcp", instance_type)
    assert node.rdma == fabric and node.has_rdma
    assert fabrics.get(fabric).mtu("gcp", instance_type).mtu == mtu  # node_layout says jumbo frames


def test_a_tcpxo_lock_with_nccl_below_the_floor_is_refused_naming_the_key():
    floor = fabrics.get("tcpxo").min_nccl("*")[0]["min_nccl"]
    lock = gpu_lock(nccl="2.20.5", fabric="tcpxo", tcpxo=PAIR)
    found = [c for c in compat.check_lock(lock) if c.rule == "fabric-nccl"]
    assert len(found) == 1 and found[0].severity == "error"
    assert found[0].pins == ("fabric=tcpxo", "nccl=2.20.5")
    assert "GPUDirect-TCPXO" in found[0].message and f">= {floor}" in found[0].message
    on_node = [c for c in compat.can_run(lock, "gcp", "a3-megagpu-8g") if c.rule == "fabric-nccl"]
    assert on_node == found  # the `*` row holds on every type, reported once


def test_a_tcpxo_plugin_below_the_catalog_floor_is_refused_naming_its_key():
    row = fabrics.get("tcpxo").min_nccl("*")[0]
    lock = gpu_lock(fabric="tcpxo", tcpxo={"plugin": "1.0.8-1", "rxdm": "1.0.14"})
    found = [c for c in compat.check_lock(lock) if c.rule == "fabric-nccl"]
    assert [c.pins for c in found] == [("fabric=tcpxo", "tcpxo.plugin=1.0.8-1")]
    assert f"tcpxo.plugin to {row['min_plugin']} or newer" in found[0].message
    assert [c for c in compat.check_lock(gpu_lock(fabric="tcpxo", tcpxo=PAIR)) if c.severity == "error"] == []


@pytest.mark.parametrize("lock_name, instance_type", [("gcp-h100", "a3-megagpu-8g"), ("gcp-h200", "a3-ultragpu-8g")])
def test_the_gcp_locks_run_on_their_types_and_refuse_a_driver_too_old(lock_name, instance_type):
    lock = load(lock_name)
    for host in catalog.host_images("gcp").values():  # Google's accelerator images: drivers 570 / 580
        found = compat.can_run(lock, "gcp", instance_type, host.nvidia_driver)
        assert [c for c in found if c.severity == "error"] == [], host.name
    old = [c for c in compat.can_run(lock, "gcp", instance_type, "470.57.02") if c.rule == "cuda-driver"]
    assert old and old[0].severity == "error" and "driver=470.57.02" in old[0].pins
    other = "a3-ultragpu-8g" if instance_type == "a3-megagpu-8g" else "a3-megagpu-8g"
    mismatch = [c for c in compat.can_run(lock, "gcp", other) if c.rule == "fabric-mismatch"]
    assert mismatch and mismatch[0].severity == "error"


def test_gcp_h100_renders_the_stem_plus_its_tcpxo_layer():
    lock = load("gcp-h100")
    assert lock.extends == "h100-torch" and lock.fabric == "tcpxo" and lock.packages == load("h100-torch").packages
    image = dockerfile.dockerfile(lock, "base:ref").split("FROM os AS image", 1)[1]
    layer = (f"COPY --from=us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:"
             f"v{lock.tcpxo.plugin} /plugins/ /var/lib/tcpxo/lib64/")
    assert layer in image.splitlines()
    assert image.index(layer) > image.rindex("COPY --from=layer-")  # the fabric comes last: the stem stays shared
    assert 'LD_LIBRARY_PATH="/var/lib/tcpxo/lib64"' in image and 'NCCL_FASTRAK_CTRL_DEV="enp0s12"' in image
    labels = dockerfile.labels(lock)
    assert labels["dev.goldenenv.tcpxo-plugin"] == lock.tcpxo.plugin
    assert labels["dev.goldenenv.tcpxo-rxdm"] == lock.tcpxo.rxdm


def test_gcp_h200_installs_nccl_gib_at_the_locked_version():
    lock = load("gcp-h200")
    image = dockerfile.dockerfile(lock, "base:ref").split("FROM os AS image", 1)[1]
    assert f"install -y --no-install-recommends nccl-gib={lock.gib.plugin} libibverbs1 ibverbs-providers" in image
    assert "https://packages.cloud.google.com/apt gpudirect-gib-apt main" in image
    assert 'NCCL_NET="gIB"' in image and 'LD_LIBRARY_PATH="/usr/local/gib/lib64"' in image


@pytest.mark.parametrize("name", ["gcp-h100", "gcp-h200"])
def test_the_checks_expect_the_plugin_where_the_layer_puts_it(name):
    lock = load(name)
    fabric = fabrics.get(lock.fabric)
    check = next(e for e in expectations(lock) if e.id == "fabric-plugin")
    assert check.verify({"library_files": {"libnccl-net": [fabric.plugin_library]}}) is None
    missing = check.verify({"library_files": {"libnccl-net": ["/opt/venv/lib/libnccl-net.so"]}})
    assert fabric.plugin_library in missing
    assert "fabric-plugin" not in {e.id for e in expectations(load("h100-torch"))}


def test_an_unknown_fabric_names_the_valid_ones(tmp_path):
    name = write_lock(tmp_path, {"name": "mine", "extends": "h100-torch", "fabric": "tcpxoo"})
    with pytest.raises(ConfigError) as caught:
        load(name, tmp_path)
    [problem] = [str(p) for p in caught.value.problems]
    assert problem.startswith("mine/lock.yaml: fabric:") and "'tcpxoo'" in problem
    for valid in ("none", *fabrics.FABRICS):
        assert f"'{valid}'" in problem


@pytest.mark.parametrize("doc, written", [
    ({"fabric": "tcpxo", "gib": {"plugin": "1.1.0"}}, "gib"),
    ({"fabric": "tcpxo"}, "none"),
    ({"fabric": "none", "tcpxo": PAIR}, "tcpxo"),
    ({"fabric": "gib", "gib": {"plugin": "1.1.0"}, "efa": {"installer": "1.40.0", "awsOfiNccl": "1.14.2"}}, "efa, gib"),
])
def test_a_fabric_takes_exactly_its_own_section(tmp_path, doc, written):
    name = write_lock(tmp_path, {"name": "mine", "extends": "h100-torch", **doc})
    with pytest.raises(ConfigError) as caught:
        load(name, tmp_path)
    message = " ".join(str(p) for p in caught.value.problems)
    assert f"fabric {doc['fabric']} needs exactly its own section" in message and f"writes {written};" in message


@pytest.mark.parametrize("section, value", [("tcpxo.plugin", "1.0.12; curl x|sh"), ("tcpxo.rxdm", "$(id)"),
                                            ("gib.plugin", "1.1.0 evil")])
def test_every_gcp_section_value_has_a_pattern(tmp_path, section, value):
    fabric, key = section.split(".")
    values = {"tcpxo": dict(PAIR), "gib": {"plugin": "1.1.0"}}[fabric] | {key: value}
    name = write_lock(tmp_path, {"name": "mine", "extends": "h100-torch", "fabric": fabric, fabric: values})
    with pytest.raises(ConfigError) as caught:
        load(name, tmp_path)
    assert any(str(p).startswith(f"mine/lock.yaml: {section}: ") and "; write " in str(p)
               for p in caught.value.problems)


def test_new_fabric_sections_leave_every_other_locks_tag_alone():
    # the lock hashes before the gcp fabrics existed, as the locks pinned MariaDB for Slurm accounting since
    # (issue 41; the captured probes' GOLDENENV_LOCK say the same)
    assert {n: load(n).content_hash for n in ("aws-h100", "alicloud-h100", "h100-torch", "cpu-dev")} == {
        "aws-h100": "52b6cc4d8899", "alicloud-h100": "a81e041ef472", "h100-torch": "54f9e2c570cd",
        "cpu-dev": "0ef0bbb8e0f6"}


@pytest.mark.parametrize("name", [n for n in GCP if fabrics.get(n).boot_check])
def test_the_boot_checks_render_with_the_values_nodeboot_passes(name):
    fabric = fabrics.get(name)
    unit, script = fabric.boot_check
    node = next(t for t in catalog.instance_types("gcp").values() if t.rdma == name)
    mtu = fabric.mtu("gcp", node.name).mtu
    rendered = boot_unit(unit, script, {"mtu": mtu, "interfaces": node.rdma_interfaces,
                                        **fabric_host_values(fabric)})
    text = rendered.script.content
    assert f"mtu={mtu}\n" in text and f"expected={node.rdma_interfaces}\n" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    unit_text = rendered.unit.content
    assert f"Before={CONTAINER_UNIT}\n" in unit_text and f"ExecStart={rendered.script.path}\n" in unit_text
