"""Azure's InfiniBand fabric (`ib`) through the registry: the catalog rows it reads, the lock section that pins its
image layer, the Azure locks, the host files the golden container reads, and the boot check, run under bash against
a fake root (sysfs, /etc/nccl.conf, /opt/microsoft) as an ND node would show them."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from goldenenv import catalog, compat, fabrics, nodeboot, stackconfig
from goldenenv.catalog import health
from goldenenv.checks.expectations import expectations
from goldenenv.health import judge
from goldenenv.images import dockerfile
from goldenenv.images.lock import IMAGES, Lock, load
from goldenenv.nodeboot import CONTAINER_UNIT, NodeBoot
from goldenenv.plan import stack_file
from goldenenv.spec import ConfigError

ND_H100 = "Standard_ND96isr_H100_v5"
NC_T4 = "Standard_NC4as_T4_v3"
IB_UNIT = "goldenenv-ib.service"
DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE_REF = f"goldenenvexample.azurecr.io/goldenenv/azure-h100@{DIGEST}"
HEALTH_CAPTURES = Path(__file__).parent / "captures" / "health"
NCCL_CONF = ("NCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml\n"
             "NCCL_IGNORE_CPU_AFFINITY=1\n")
"""/etc/nccl.conf as Azure's HPC images write it on an ND H100 v5 (azhpc-images components/customizations/ndv5.sh)."""


def load_stack(name: str, **nodes):
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(name)))
    config["goldenenv:nodes"].update(nodes)
    values, extra = stackconfig.namespaced(config)
    return stackconfig.load(name, values, extra)


def node_boot(spec, image_ref: str | None = IMAGE_REF) -> NodeBoot:
    """The first pool's boot with the fabric and instance store the catalog gives its type."""
    pool = spec.nodes[0]
    it = catalog.instance_type(spec.cloud, pool.instance_type)
    return NodeBoot(spec, pool.name, fabric=it.rdma if it.has_rdma and pool.rdma is not False else "none",
                    local_nvme=it.local_nvme_count > 0, image_ref=image_ref)


def units(spec, image_ref: str | None = IMAGE_REF) -> dict[str, nodeboot.BootUnit]:
    return {u.name: u for u in node_boot(spec, image_ref).units(None)}


def container_volumes(spec) -> list[str]:
    script = units(spec)[CONTAINER_UNIT].script.content
    return [line.split()[1] for line in script.splitlines() if line.strip().startswith("--volume ")]


@pytest.fixture(scope="module")
def nd_h100():
    """azure-ndh100-2node: two ND H100 v5 VMs on InfiniBand."""
    return load_stack("azure-ndh100-2node")


@pytest.fixture(autouse=True)
def ready_dir(tmp_path, monkeypatch) -> Path:
    """Where the rendered units leave their ready markers in these tests (on a node: /run/goldenenv)."""
    path = tmp_path / "run" / "goldenenv"
    monkeypatch.setattr(nodeboot, "READY_DIR", str(path), raising=False)
    return path


def write_lock(folder: Path, doc: dict) -> str:
    shutil.copytree(IMAGES / "h100-torch", folder / "h100-torch", dirs_exist_ok=True)
    (folder / doc["name"]).mkdir(parents=True, exist_ok=True)
    (folder / doc["name"] / "lock.yaml").write_text(yaml.safe_dump(doc))
    return doc["name"]


# ---------------------------------------------------------------- the registry entry and its catalog rows


def test_ib_resolves_with_its_env_mtu_and_floor_from_the_catalog():
    fabric = fabrics.get("ib")
    assert fabric.cloud == "azure" and fabric.label == "InfiniBand" == fabrics.label("ib")
    assert fabric.env() == catalog.fabric_env("ib") and fabric.env()
    assert fabric.min_nccl("*") and fabric.min_cuda() is None
    assert fabric.mtu("azure", ND_H100) == catalog.fabric_mtu("ib", False)
    assert fabric.health_fabric == "ib" and fabric.plugin is None and fabric.libraries == ""
    assert fabric.lock_section == "ib" and "ib" in fabrics.sections()


def test_ib_anchors_from_public_sources():
    fabric = fabrics.get("ib")
    # Azure's NCCL runs pin the bootstrap to eth0 (azurehpc-health-checks, azhpc-images tests); IB MTU 4096
    assert fabric.env()["NCCL_SOCKET_IFNAME"] == "eth0"
    assert fabric.mtu("azure", ND_H100).mtu == 4096 and fabric.mtu("azure", ND_H100).nccl_proto == ""
    # the Ubuntu HPC images' first NCCL with the ND v5 customization (azhpc-images, April 2023)
    assert fabric.min_nccl("*")[0]["min_nccl"] == "2.17.1"
    assert fabric.host_mounts == ("/etc/nccl.conf", "/opt/microsoft")


def test_the_host_images_nccl_conf_is_read_from_the_host_never_copied_into_the_env():
    """One fact, one place: what /etc/nccl.conf sets (per VM size, per host image) is not in the catalog's env."""
    written = {line.split("=", 1)[0] for line in NCCL_CONF.splitlines()}
    assert not written & set(fabrics.get("ib").env())
    assert "/etc/nccl.conf" in fabrics.get("ib").host_mounts


def test_the_nd_types_name_ib_with_one_port_per_gpu():
    nd = [t for t in catalog.instance_types("azure").values() if t.rdma == "ib"]
    assert ND_H100 in {t.name for t in nd}
    for node in nd:
        assert node.has_rdma and node.rdma_interfaces == node.gpu_count, node.name
        assert fabrics.get("ib").mtu("azure", node.name) is not None, node.name
    assert catalog.instance_type("azure", ND_H100).rdma_interfaces == 8  # MicrosoftDocs ndh100v5-series: 8 x NDR
    assert catalog.instance_type("azure", NC_T4).rdma == "none"


def test_the_health_judge_counts_the_nd_ports_and_skips_the_accelerated_networking_port():
    """catalog.health's expectations for the ND H100 v5, judged on an ibstat recording of eight mlx5_ib ports and
    the Ethernet mlx5_an0: healthy as it is; one port fewer, or one down, drains."""
    expect = health.expectations("azure", ND_H100)
    assert (expect["fabric"], expect["fabric_devices"]) == ("ib", 8)
    files = judge.read_evidence(str(HEALTH_CAPTURES / "healthy-ib"))
    rules = health.rules_document()
    assert judge.judge(files, expect, rules, "nd-0") == []
    text = files["ibstat.txt"]
    one_fewer = text[:text.index("CA 'mlx5_ib7'")]
    found = judge.judge({**files, "ibstat.txt": one_fewer}, expect, rules, "nd-0")
    assert [f.rule for f in found] == ["ib_devices_below_expected"]
    assert health.thresholds()["ib_devices_below_expected"].action in {f.action for f in found}
    down = judge.read_evidence(str(HEALTH_CAPTURES / "ib-port-down"))
    assert [f.rule for f in judge.judge(down, expect, rules, "nd-0")] == ["ib_port_not_active"]


# ---------------------------------------------------------------- the lock section and the image layer


def test_azure_h100_is_the_stem_plus_the_ib_layer_with_its_pinned_packages():
    lock, stem = load("azure-h100"), load("h100-torch")
    assert lock.extends == "h100-torch" and lock.fabric == "ib" and lock.packages == stem.packages
    image = dockerfile.dockerfile(lock, "base:ref").split("FROM os AS image", 1)[1]
    install = f"install -y --no-install-recommends {' '.join(lock.ib.packages)} "
    layer = next(line for line in image.splitlines() if install in line)
    assert image.index(layer) > image.rindex("COPY --from=layer-")  # last: the stem's layers stay shared
    assert {"ibverbs-providers", "infiniband-diags"} <= set(lock.ib.packages)  # mlx5 provider; the judge's ibstat
    assert 'NCCL_SOCKET_IFNAME="eth0"' in image and "NCCL_TOPO_FILE" not in image
    assert dockerfile.labels(lock)["dev.goldenenv.fabric"] == "ib"


@pytest.mark.parametrize("packages, key", [(["libibverbs1", "perftest; curl x|sh"], "ib.packages.1"),
                                           (["$(id)"], "ib.packages.0")])
def test_a_package_that_is_no_debian_name_is_refused_naming_its_key(tmp_path, packages, key):
    name = write_lock(tmp_path, {"name": "mine", "extends": "h100-torch", "fabric": "ib", "ib": {"packages": packages}})
    with pytest.raises(ConfigError) as caught:
        load(name, tmp_path)
    assert any(str(p).startswith(f"mine/lock.yaml: {key}: ") and "write a Debian package name" in str(p)
               for p in caught.value.problems)


@pytest.mark.parametrize("doc, words", [
    ({"fabric": "ib", "ib": {"packages": []}}, "ib.packages: has 0 items; list at least 1 item"),
    ({"fabric": "ib"}, "fabric ib needs exactly its own section (ib) but the lock writes none"),
    ({"fabric": "erdma", "ib": {"packages": ["libibverbs1"]}}, "writes ib;"),
])
def test_the_ib_section_goes_with_the_ib_fabric_and_lists_packages(tmp_path, doc, words):
    name = write_lock(tmp_path, {"name": "mine", "extends": "h100-torch", **doc})
    with pytest.raises(ConfigError) as caught:
        load(name, tmp_path)
    assert words in " ".join(str(p) for p in caught.value.problems)


def test_the_erdma_section_keeps_its_shape_and_alicloud_h100_its_tag():
    """ib and erdma share one model (RdmaPackages): the eRDMA lock's key and identity stay as they were."""
    assert issubclass(fabrics.Erdma, fabrics.RdmaPackages) and issubclass(fabrics.Ib, fabrics.RdmaPackages)
    assert load("alicloud-h100").content_hash == "a81e041ef472"  # since the locks pinned MariaDB (issue 41)


def test_the_image_checks_want_the_mlx5_provider_and_every_package_of_the_section():
    lock = load("azure-h100")
    found = {e.id: e for e in expectations(lock)}
    installed = {name: "56.1-1" for name in lock.ib.packages}
    good = {"mlx5_provider": ["/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so"], "os_packages": installed}
    assert found["ib-provider"].verify(good) is None
    assert "mlx5" in found["ib-provider"].verify({**good, "mlx5_provider": []})
    for name in lock.ib.packages:
        assert found[f"ib-deb-{name}"].verify(good) is None
    missing = {k: v for k, v in installed.items() if k != "infiniband-diags"}
    assert "infiniband-diags: not installed" in found["ib-deb-infiniband-diags"].verify({"os_packages": missing})
    assert not any(e.startswith("ib-") for e in {e.id for e in expectations(load("alicloud-h100"))})


def test_a_pinned_package_version_is_checked_too():
    lock = Lock.model_validate(load("azure-h100").model_dump(by_alias=True) | {"ib": {"packages": ["perftest=25.01"]}})
    check = next(e for e in expectations(lock) if e.id == "ib-deb-perftest")
    assert check.verify({"os_packages": {"perftest": "25.01"}}) is None
    assert "lock pins 25.01, host has 24.0" in check.verify({"os_packages": {"perftest": "24.0"}})


# ---------------------------------------------------------------- the Azure locks against the catalog


@pytest.mark.parametrize("name", ["azure-h100", "azure-t4"])
def test_the_azure_locks_pass_their_own_checks(name):
    lock = load(name)
    assert lock.unpinned() == []
    assert [c.message for c in compat.check_lock(lock) if c.severity == "error"] == []


@pytest.mark.parametrize("name, instance_type, other", [("azure-h100", ND_H100, NC_T4), ("azure-t4", NC_T4, ND_H100)])
def test_each_azure_lock_runs_on_its_size_and_is_refused_on_the_other(name, instance_type, other):
    lock = load(name)
    assert [c for c in compat.can_run(lock, "azure", instance_type) if c.severity == "error"] == []
    refused = {c.rule for c in compat.can_run(lock, "azure", other) if c.severity == "error"}
    assert "gpu-arch-missing" in refused  # sm_90 on a T4, sm_75 on an H100


def test_azure_t4_is_the_l4_pins_built_for_turing():
    t4, l4 = load("azure-t4"), load("gcp-l4")
    assert t4.gpu_archs == ["sm_75"] and catalog.instance_type("azure", NC_T4).gpu.arch == "sm_75"
    assert t4.fabric == "none" and t4.packages == l4.packages and t4.slurm == l4.slurm and t4.base == l4.base


def test_an_ib_lock_with_nccl_below_the_floor_is_refused_naming_the_key():
    floor = fabrics.get("ib").min_nccl("*")[0]["min_nccl"]
    doc = load("azure-h100").model_dump(by_alias=True, exclude={"packages"})
    lock = Lock.model_validate(doc | {"nccl": "2.16.5"})
    found = [c for c in compat.check_lock(lock) if c.rule == "fabric-nccl"]
    assert len(found) == 1 and found[0].severity == "error"
    assert found[0].pins == ("fabric=ib", "nccl=2.16.5") and f">= {floor}" in found[0].message
    assert "InfiniBand" in found[0].message


# ---------------------------------------------------------------- the golden container reads the host's NCCL setup


def test_the_golden_container_gets_nccl_conf_and_opt_microsoft_read_only(nd_h100):
    volumes = container_volumes(nd_h100)
    assert "/etc/nccl.conf:/etc/nccl.conf:ro" in volumes and "/opt/microsoft:/opt/microsoft:ro" in volumes
    script = units(nd_h100)[CONTAINER_UNIT].script.content
    assert nodeboot.ready_marker(IB_UNIT) in script  # it starts only once the check found them there


def test_an_nd_pool_with_rdma_off_gets_no_ib_check_and_no_host_mounts():
    spec = load_stack("azure-ndh100-2node", rdma=False)
    found = units(spec)
    assert IB_UNIT not in found
    assert not any(v.startswith(("/etc/nccl.conf", "/opt/microsoft")) for v in container_volumes(spec))


@pytest.mark.parametrize("stack", ["aws-p5-2node", "alicloud-ebmgn8v-2node", "gcp-a3mega-2node", "gcp-g2-dev",
                                   "azure-nc-dev"])
def test_every_other_fabrics_container_keeps_its_volumes(stack):
    spec = load_stack(stack)
    pool = spec.nodes[0]
    it = catalog.instance_type(spec.cloud, pool.instance_type)
    fabric = fabrics.get(it.rdma)
    assert fabric is None or fabric.host_mounts == ()
    read_only = [v for v in container_volumes(spec) if v.endswith(":ro")]
    env_file = f":{nodeboot.ENV_FILE}:ro"  # the container's environment file, where a job's tasks read it
    assert all(v.startswith((nodeboot.HOST_HEALTH_DIR, nodeboot.MUNGE_KEY_FILE)) or v.endswith(env_file)
               for v in read_only), read_only


def test_only_ib_names_host_mounts():
    assert {name for name, f in fabrics.FABRICS.items() if f.host_mounts} == {"ib"}


# ---------------------------------------------------------------- the boot check, on a fake ND node


def test_the_ib_unit_runs_after_the_hpc_images_own_steps_and_before_the_container(nd_h100):
    unit = units(nd_h100)[IB_UNIT]
    text = unit.unit.content
    after = next(line for line in text.splitlines() if line.startswith("After=")).split("=", 1)[1].split()
    assert {"openibd.service", "sku-customizations.service"} <= set(after)
    assert f"Before={CONTAINER_UNIT}\n" in text and f"ExecStart={unit.script.path}\n" in text
    assert "Restart=on-failure" in text
    expected = catalog.instance_type("azure", ND_H100).rdma_interfaces
    assert f"expected={expected}\n" in unit.script.content
    assert subprocess.run(["bash", "-n"], input=unit.script.content, text=True).returncode == 0


def port(root: Path, device: str, link_layer: str = "InfiniBand", state: str = "4: ACTIVE",
         rate: str = "400 Gb/sec (4X NDR)") -> None:
    folder = root / "sys" / "class" / "infiniband" / device / "ports" / "1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "link_layer").write_text(link_layer + "\n")
    (folder / "state").write_text(state + "\n")
    (folder / "rate").write_text(rate + "\n")


def nd_node(root: Path, ports: int = 8) -> Path:
    """A fake root as an ND H100 v5 shows it after the HPC image's boot (kernel sysfs formats, Linux ABI
    sysfs-class-infiniband; device names by azhpc-images' azure_persistent_rdma_naming)."""
    for i in range(ports):
        port(root, f"mlx5_ib{i}")
    port(root, "mlx5_an0", link_layer="Ethernet", rate="100 Gb/sec (2X EDR)")  # accelerated networking: not IB
    (root / "sys" / "module" / "nvidia_peermem").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "nccl.conf").write_text(NCCL_CONF)
    topology = root / "opt" / "microsoft"
    (topology / "ndv5").mkdir(parents=True)
    (topology / "ndv5-topo.xml").write_text("<system version=\"1\"></system>\n")
    (topology / "ndv5" / "topo.xml").symlink_to("../ndv5-topo.xml")  # the image links it (absolute there)
    return root


def run_check(spec, root: Path, tmp_path: Path, modprobe: str = "exit 1") -> tuple[subprocess.CompletedProcess,
                                                                                   list[str]]:
    """The rendered check under bash, reading `root`; modprobe is a stub that logs its arguments."""
    script = tmp_path / "ib-check.sh"
    script.write_text(units(spec)[IB_UNIT].script.content)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    log.write_text("")
    stub = bin_dir / "modprobe"
    stub.write_text(f'#!/bin/bash\necho "modprobe $*" >> "$STUB_LOG"\n{modprobe}\n')
    stub.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(script), str(root)], env=env, capture_output=True, text=True, timeout=60)
    return result, log.read_text().splitlines()


def ready(ready_dir: Path) -> bool:
    return (ready_dir / "goldenenv-ib.ready").exists()


def test_a_healthy_nd_node_passes_and_leaves_its_ready_marker(nd_h100, tmp_path, ready_dir):
    result, calls = run_check(nd_h100, nd_node(tmp_path / "root"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ready(ready_dir) and calls == []
    assert "mlx5_ib7 port 1: ACTIVE, 400 Gb/sec (4X NDR)" in result.stdout and "mlx5_an0" not in result.stdout
    assert "NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml" in result.stdout


def test_fewer_active_ports_than_gpus_fail_naming_the_count(nd_h100, tmp_path, ready_dir):
    result, _ = run_check(nd_h100, nd_node(tmp_path / "root", ports=7), tmp_path)
    assert result.returncode != 0 and not ready(ready_dir)
    assert "7 ACTIVE InfiniBand port(s)" in result.stdout and "expected 8" in result.stdout
    assert "scale set" in result.stdout


@pytest.mark.parametrize("state", ["1: DOWN", "2: INIT"])
def test_a_port_that_is_not_active_fails_naming_it(nd_h100, tmp_path, ready_dir, state):
    root = nd_node(tmp_path / "root")
    port(root, "mlx5_ib5", state=state)
    result, _ = run_check(nd_h100, root, tmp_path)
    assert result.returncode != 0 and not ready(ready_dir)
    assert f"mlx5_ib5 ({state})" in result.stdout


def test_without_nvidia_peermem_the_check_loads_it_or_fails_naming_it(nd_h100, tmp_path, ready_dir):
    root = nd_node(tmp_path / "root")
    shutil.rmtree(root / "sys" / "module" / "nvidia_peermem")
    result, calls = run_check(nd_h100, root, tmp_path)
    assert result.returncode != 0 and not ready(ready_dir)
    assert calls == ["modprobe nvidia-peermem"] and "nvidia_peermem" in result.stdout
    loads = f'mkdir -p {root / "sys" / "module" / "nvidia_peermem"}'
    result, calls = run_check(nd_h100, root, tmp_path, modprobe=loads)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ready(ready_dir)


@pytest.mark.parametrize("broken, words", [
    ("no-conf", "/etc/nccl.conf is missing on the host"),
    ("empty-conf", "/etc/nccl.conf is empty"),
    ("no-opt-microsoft", "/opt/microsoft is missing on the host"),
    ("no-topology", "NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml, which does not exist"),
    ("topology-elsewhere", "outside what the golden container gets"),
])
def test_the_host_images_nccl_setup_must_be_there_before_the_container_binds_it(nd_h100, tmp_path, ready_dir,
                                                                                  broken, words):
    root = nd_node(tmp_path / "root")
    conf = root / "etc" / "nccl.conf"
    if broken == "no-conf":
        conf.unlink()
    elif broken == "empty-conf":
        conf.write_text("")  # what remove_sku_customizations.sh leaves when the service stops
    elif broken == "no-opt-microsoft":
        shutil.rmtree(root / "opt" / "microsoft")
    elif broken == "no-topology":
        (root / "opt" / "microsoft" / "ndv5-topo.xml").unlink()
    else:
        conf.write_text(NCCL_CONF.replace("/opt/microsoft/ndv5/topo.xml", "/etc/topo.xml"))
        (root / "etc" / "topo.xml").write_text("<system/>\n")
    result, _ = run_check(nd_h100, root, tmp_path)
    assert result.returncode != 0 and not ready(ready_dir)
    assert words in result.stdout, result.stdout
