"""Lock ↔ catalog ↔ node rules.

Expected versions come from the catalog, never from the function under test, plus a few literal
anchors from public tables (NVIDIA's driver minimums) that catch a wrong catalog row.
"""

from __future__ import annotations

import zipfile

import pytest

from goldenenv import catalog, compat
from goldenenv.catalog import version_tuple
from goldenenv.images.lock import Lock

SHA = "0" * 64


def row(table: str, **match: str) -> dict[str, str]:
    found = [r for r in catalog.rows(table) if all(r[k] == v for k, v in match.items())]
    assert found, f"catalog {table} has no row {match}"
    return found[0]


def torch_row_with(variant: str) -> dict[str, str]:
    """The newest torch build the catalog lists for a CUDA variant (any build for cpu)."""
    rows = [r for r in catalog.rows("torch_builds") if variant == "cpu" or variant in r["cuda_variants"].split()]
    assert rows, f"no torch build for {variant}"
    return max(rows, key=lambda r: version_tuple(r["torch"]))


def variant_cuda(variant: str, update: int = 0) -> str:
    digits = variant.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}.{update}"


def below(version: str) -> str:
    """A version just under a catalog minimum: 2.19 → 2.18.3, 2.18.5 → 2.18.4."""
    parts = list(version_tuple(version)) + [0] * (3 - len(version_tuple(version)))
    if parts[2] > 0:
        parts[2] -= 1
    else:
        parts[1], parts[2] = parts[1] - 1, 3
    return ".".join(map(str, parts))


def gpu_instance(rdma: str, cloud: str = "aws") -> catalog.InstanceType:
    return next(it for it in catalog.instance_types(cloud).values() if it.rdma == rdma and it.has_rdma)


def make_lock(variant: str = "cu126", *, cuda_update: int = 0, torch_row: dict | None = None, **doc) -> Lock:
    """A minimal valid lock for a torch build the catalog lists; keyword args override (camelCase)."""
    torch_row = torch_row or torch_row_with(variant)
    torch = f"{torch_row['torch']}.0+{variant}"
    base = {
        "name": "test",
        "base": {"bootstrap": {"distro": "debian", "release": "bookworm", "mirror": "http://deb.debian.org/debian"}},
        "python": "3.11",
        "torch": torch,
        "torchCuda": variant,
        "packages": {"torch": {"version": torch, "sha256": [SHA], "group": "torch"}},
    }
    if variant != "cpu":
        base |= {"cuda": variant_cuda(variant, cuda_update), "nccl": torch_row["nccl"], "gpuArchs": ["sm_90"]}
    return Lock.model_validate(base | doc)


def efa_section(installer_row: dict[str, str], plugin: str | None = None) -> dict:
    return {"installer": installer_row["efa_installer"], "installerSha256": SHA,
            "awsOfiNccl": plugin or installer_row["aws_ofi_nccl"]}


def erdma_section() -> dict:
    return {"packages": ["rdma-core", "ibverbs-providers"]}


def checked_installer() -> dict[str, str]:
    """The newest EFA installer whose plugin has its own aws_ofi_nccl row with a minimum NCCL."""
    exact = {r["aws_ofi_nccl"] for r in catalog.rows("aws_ofi_nccl") if r["min_nccl"]}
    rows = [r for r in catalog.rows("efa_installer") if r["aws_ofi_nccl"] in exact]
    assert rows, "no EFA installer whose plugin the catalog can check"
    return max(rows, key=lambda r: version_tuple(r["efa_installer"]))


def rules(conflicts: list[compat.Conflict], severity: str | None = None) -> set[str]:
    return {c.rule for c in conflicts if severity is None or c.severity == severity}


def errors(conflicts: list[compat.Conflict]) -> list[compat.Conflict]:
    return [c for c in conflicts if c.severity == "error"]


# --- drivers ---------------------------------------------------------------------------------------

def test_min_driver_reads_the_release_row_and_clamps_later_updates_to_the_last_listed():
    for r in catalog.rows("cuda_min_driver"):
        update = 0 if r["release"] == "GA" else int(r["release"][1:])
        assert compat.min_driver(f"{r['cuda']}.{update}") == r["min_driver"]
    minor = "12.6"
    last = max((r for r in catalog.rows("cuda_min_driver") if r["cuda"] == minor),
               key=lambda r: 0 if r["release"] == "GA" else int(r["release"][1:]))
    assert compat.min_driver(f"{minor}.99") == last["min_driver"]


@pytest.mark.parametrize("cuda, driver", [
    # NVIDIA CUDA Toolkit Release Notes, table 3 (FACTS.md)
    ("12.8.0", "570.26"),
    ("12.6.3", "560.35.05"),
    ("13.0.0", "580.65.06"),
    ("12.0.0", "525.60.13"),
])
def test_min_driver_matches_nvidias_table(cuda, driver):
    assert compat.min_driver(cuda) == driver


def test_an_update_newer_than_the_table_takes_the_last_listed_minimum():
    assert compat.min_driver("12.6.4") == "560.35.05"


def test_min_driver_of_an_unknown_minor_raises_a_clear_key_error():
    known = {r["cuda"] for r in catalog.rows("cuda_min_driver")}
    unknown = next(f"12.{n}" for n in range(100) if f"12.{n}" not in known)
    with pytest.raises(KeyError, match=unknown.replace(".", r"\.")):
        compat.min_driver(f"{unknown}.0")


@pytest.mark.parametrize("cuda_row", [r for r in catalog.rows("cuda_min_driver") if r["cuda"].startswith("12.")],
                         ids=lambda r: f"{r['cuda']}-{r['release']}")
def test_driver_support_distinguishes_full_minor_version_and_unsupported(cuda_row):
    update = 0 if cuda_row["release"] == "GA" else int(cuda_row["release"][1:])
    cuda = f"{cuda_row['cuda']}.{update}"
    floor = row("minor_compat", cuda_major="12")["min_driver"]
    full = compat.driver_support(cuda, cuda_row["min_driver"])
    assert (full.level, full.full_minimum, full.compat_minimum) == ("full", cuda_row["min_driver"], floor)
    assert compat.driver_support(cuda, floor).level == ("full" if floor == cuda_row["min_driver"] else "minor-version")
    assert compat.driver_support(cuda, below(floor)).level == "unsupported"
    older = [r["min_driver"] for r in catalog.rows("cuda_min_driver")
             if version_tuple(floor) <= version_tuple(r["min_driver"]) < version_tuple(cuda_row["min_driver"])]
    for driver in older:
        assert compat.driver_support(cuda, driver).level == "minor-version", driver


def test_driver_support_levels_against_public_anchors():
    """CUDA 12.8 GA needs 570.26 for full support; CUDA 12.x runs minor-version compatible from 525.60.13."""
    assert compat.driver_support("12.8.0", "570.26") == compat.DriverSupport("full", "570.26", "525.60.13")
    assert compat.driver_support("12.8.0", "560.35.05").level == "minor-version"
    assert compat.driver_support("12.8.0", "525.60.13").level == "minor-version"
    assert compat.driver_support("12.8.0", "525.60.12").level == "unsupported"
    assert compat.driver_support("12.6.3", "560.35.05").level == "full"
    assert compat.driver_support("12.6.3", "560.35.03").level == "minor-version"
    assert compat.driver_support("13.0.0", "580.65.06").level == "full"
    assert compat.driver_support("13.0.0", "575.57.08").level == "unsupported"


# --- acceptance: CUDA 12.8 on a 550 driver; eRDMA with NCCL 2.18 -----------------------------------

def test_cuda_12_8_lock_on_a_550_driver_is_refused_naming_cuda_the_driver_and_the_minimum():
    driver = "550.54.15"  # CUDA 12.4 U1's minimum: a released 550-series driver
    minimum = "570.26"  # CUDA 12.8 GA (NVIDIA table 3)
    arch_12_8 = row("arch_min_cuda", min_cuda="12.8")["arch"]
    node = next(it for it in catalog.instance_types("aws").values() if it.gpu.arch == arch_12_8)
    lock = make_lock("cu128", gpuArchs=[arch_12_8])
    assert compat.check_lock(lock) == []
    refused = errors(compat.can_run(lock, "aws", node.name, driver))
    assert [c.rule for c in refused] == ["cuda-driver"]
    message = refused[0].message
    assert "12.8" in message and driver in message and minimum in message
    assert refused[0].pins == (f"cuda={lock.cuda}", f"driver={driver}")


def test_cuda_12_8_on_a_550_driver_is_refused_as_only_minor_version_compatible():
    driver, minimum = "550.54.15", "570.26"
    node = catalog.instance_type("aws", "p5.48xlarge")
    lock = make_lock("cu128", gpuArchs=[node.gpu.arch], fabric="efa",
                     efa=efa_section(checked_installer()))
    found = [c for c in compat.can_run(lock, "aws", node.name, driver) if c.rule == "cuda-driver"]
    assert [c.severity for c in found] == ["error"]
    assert minimum in found[0].message and driver in found[0].message and "12.8" in found[0].message
    assert "minor-version compatible" in found[0].message


def test_a_driver_below_the_minor_version_floor_is_an_error():
    floor = "525.60.13"  # CUDA 12.x minor-version compatibility (NVIDIA CUDA compatibility guide)
    lock = make_lock("cu126")
    found = [c for c in compat.can_run(lock, "aws", "p5.48xlarge", below(floor)) if c.rule == "cuda-driver"]
    assert [c.severity for c in found] == ["error"] and below(floor) in found[0].message


def test_an_erdma_lock_with_nccl_2_18_is_refused_naming_nccl_and_the_minimum():
    minimum = row("fabric_min_nccl", fabric="erdma", instance_type="*")["min_nccl"]
    old_nccl = below(minimum)
    lock = make_lock("cu126", nccl=old_nccl, fabric="erdma", erdma=erdma_section())
    found = [c for c in compat.check_lock(lock) if c.rule == "fabric-nccl"]
    assert [c.severity for c in found] == ["error"]
    assert "NCCL" in found[0].message and old_nccl in found[0].message and minimum in found[0].message
    assert version_tuple(old_nccl) < version_tuple(minimum)
    node = gpu_instance("erdma", "alicloud")
    assert "fabric-nccl" in rules(errors(compat.can_run(lock, "alicloud", node.name)))


def test_an_erdma_lock_below_the_fabrics_cuda_floor_is_refused():
    minimum = row("fabric_min_cuda", fabric="erdma")["min_cuda"]
    assert minimum == "12.1"  # Alibaba PAI eRDMA doc (FACTS.md): eRDMA needs CUDA >= 12.1
    lock = make_lock("cu118", fabric="erdma", erdma=erdma_section())
    found = [c for c in compat.check_lock(lock) if c.rule == "fabric-cuda"]
    assert [c.severity for c in found] == ["error"]
    assert f"cuda={lock.cuda}" in found[0].message and minimum in found[0].message
    assert not [c for c in compat.check_lock(make_lock("cu126", fabric="erdma", erdma=erdma_section()))
                if c.rule == "fabric-cuda"]


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


# --- lock rules ------------------------------------------------------------------------------------

def test_a_consistent_lock_has_no_conflict():
    assert compat.check_lock(make_lock("cu126")) == []
    assert compat.check_lock(make_lock("cpu")) == []


def test_torch_variant_the_build_does_not_have_is_refused():
    variants = {v for r in catalog.rows("torch_builds") for v in r["cuda_variants"].split()}
    torch_row, variant = next((r, v) for r in catalog.rows("torch_builds") for v in sorted(variants)
                              if v not in r["cuda_variants"].split())
    found = compat.check_lock(make_lock(variant, torch_row=torch_row))
    assert "torch-cuda" in rules(errors(found))
    assert any(f"torchCuda={variant}" in c.pins for c in found if c.rule == "torch-cuda")


def test_cuda_toolkit_that_differs_from_the_torch_variant_is_refused():
    torch_row = torch_row_with("cu126")
    other = next(v for v in torch_row["cuda_variants"].split() if v != "cu126")
    lock = make_lock("cu126", cuda=variant_cuda(other))
    found = [c for c in compat.check_lock(lock) if c.rule == "torch-cuda"]
    assert len(found) == 1 and found[0].pins == ("torchCuda=cu126", f"cuda={lock.cuda}")
    assert "torchCuda=cu126" in found[0].message and f"cuda={lock.cuda}" in found[0].message


def test_unknown_torch_minor_is_an_unknown_pin_naming_the_known_ones():
    known = [r["torch"] for r in catalog.rows("torch_builds")]
    major, minor = version_tuple(max(known, key=version_tuple))
    unknown = {"torch": f"{major}.{minor + 1}", "nccl": catalog.rows("torch_builds")[-1]["nccl"]}
    lock = make_lock("cu126", torch_row=unknown)
    found = [c for c in compat.check_lock(lock) if c.rule == "unknown-pin"]
    assert [c.severity for c in found] == ["error"] and all(v in found[0].message for v in known)
    cpu = make_lock("cpu", torch_row={"torch": f"{major}.{minor + 1}"})
    assert [(c.rule, c.severity) for c in compat.check_lock(cpu)] == [("unknown-pin", "warning")]


def test_nccl_other_than_the_one_torch_loads_is_refused():
    torch_row = torch_row_with("cu126")
    other = next(r["nccl"] for r in catalog.rows("torch_builds") if r["nccl"] != torch_row["nccl"])
    found = [c for c in compat.check_lock(make_lock("cu126", nccl=other)) if c.rule == "torch-nccl"]
    assert [c.severity for c in found] == ["error"]
    assert other in found[0].message and torch_row["nccl"] in found[0].message


def _fake_wheel(folder, filename: str, nccl: str) -> None:
    dist = filename.split("-")[1].replace("%2B", "+")
    with zipfile.ZipFile(folder / filename, "w") as whl:
        whl.writestr(f"torch-{dist}.dist-info/METADATA",
                     "Metadata-Version: 2.1\nName: torch\nRequires-Dist: filelock\n"
                     f"Requires-Dist: nvidia-nccl-cu12=={nccl}; platform_system == \"Linux\" and "
                     "platform_machine == \"x86_64\"\n")


@pytest.mark.parametrize("plus", ["+", "%2B"])
def test_the_wheel_metadata_wins_over_the_catalog(tmp_path, plus):
    lock = make_lock("cu126")
    catalog_nccl = torch_row_with("cu126")["nccl"]
    wheel_nccl = next(r["nccl"] for r in catalog.rows("torch_builds") if r["nccl"] != catalog_nccl)
    _fake_wheel(tmp_path, f"torch-{lock.torch.replace('+', plus)}-cp311-cp311-linux_x86_64.whl", wheel_nccl)
    assert compat.torch_nccl(lock)[0] == catalog_nccl
    version, source = compat.torch_nccl(lock, tmp_path)
    assert version == wheel_nccl and "Requires-Dist" in source
    found = [c for c in compat.check_lock(lock, tmp_path) if c.rule == "torch-nccl"]
    assert len(found) == 1 and wheel_nccl in found[0].message
    assert compat.check_lock(make_lock("cu126", nccl=wheel_nccl), tmp_path) == []


def test_a_wheel_of_another_torch_version_is_ignored(tmp_path):
    lock = make_lock("cu126")
    catalog_nccl = torch_row_with("cu126")["nccl"]
    _fake_wheel(tmp_path, f"torch-{lock.torch_version}1+cu126-cp311-cp311-linux_x86_64.whl", "9.9.9")
    assert compat.torch_nccl(lock, tmp_path)[0] == catalog_nccl


def test_cpu_torch_has_no_nccl():
    assert compat.torch_nccl(make_lock("cpu")) == (None, "cpu build has no NCCL")


def test_cuda_release_the_catalog_does_not_know_is_refused():
    known = {r["cuda"] for r in catalog.rows("cuda_min_driver")}
    lock = make_lock("cu126")
    unknown = next(f"{m}.{n}" for m in (12, 13) for n in range(10) if f"{m}.{n}" not in known)
    doc = lock.model_dump(by_alias=True) | {"cuda": f"{unknown}.0"}
    found = compat.check_lock(Lock.model_validate(doc))
    assert any(c.rule == "cuda-driver" and c.severity == "error" and unknown in c.message for c in found)


def test_gpu_arch_newer_than_the_cuda_pin_is_refused():
    arch = max(catalog.rows("arch_min_cuda"), key=lambda r: version_tuple(r["min_cuda"]))
    older = next(r for r in catalog.rows("torch_builds") for v in r["cuda_variants"].split()
                 if version_tuple(variant_cuda(v)) < version_tuple(arch["min_cuda"]))
    variant = next(v for v in older["cuda_variants"].split()
                   if version_tuple(variant_cuda(v)) < version_tuple(arch["min_cuda"]))
    found = [c for c in compat.check_lock(make_lock(variant, torch_row=older, gpuArchs=[arch["arch"]]))
             if c.rule == "arch-cuda"]
    assert len(found) == 1 and arch["min_cuda"] in found[0].message and arch["arch"] in found[0].message


# --- EFA -------------------------------------------------------------------------------------------

def test_efa_plugin_other_than_the_installer_bundles_is_refused():
    installers = catalog.rows("efa_installer")
    pinned = checked_installer()
    other = next(r for r in installers if r["aws_ofi_nccl"] != pinned["aws_ofi_nccl"])
    lock = make_lock("cu126", fabric="efa", efa=efa_section(pinned, other["aws_ofi_nccl"]))
    found = [c for c in compat.check_lock(lock) if c.rule == "efa-installer"]
    assert [c.severity for c in found] == ["error"]
    assert pinned["aws_ofi_nccl"] in found[0].message and other["aws_ofi_nccl"] in found[0].message
    assert compat.check_lock(make_lock("cu126", fabric="efa", efa=efa_section(pinned))) == []


def test_nccl_older_than_the_plugin_supports_is_refused():
    installer = checked_installer()
    ofi = row("aws_ofi_nccl", aws_ofi_nccl=installer["aws_ofi_nccl"])
    old = below(ofi["min_nccl"])
    lock = make_lock("cu126", nccl=old, fabric="efa", efa=efa_section(installer))
    found = [c for c in compat.check_lock(lock) if c.rule == "ofi-nccl"]
    assert [c.severity for c in found] == ["error"] and old in found[0].message and ofi["min_nccl"] in found[0].message


def test_a_plugin_the_catalog_does_not_list_is_a_warning():
    listed = {r["aws_ofi_nccl"] for r in catalog.rows("aws_ofi_nccl")}
    newest = max(listed, key=version_tuple)
    major, minor = version_tuple(newest)[:2]
    unlisted = f"{major}.{minor + 1}.0"
    assert unlisted not in listed and f"{major}.{minor + 1}" not in listed
    lock = make_lock("cu126", fabric="efa", efa=efa_section(checked_installer(), unlisted))
    found = [c for c in compat.check_lock(lock) if c.rule == "ofi-nccl"]
    assert [c.severity for c in found] == ["warning"] and "has no row" in found[0].message


def test_a_plugin_whose_release_notes_give_no_minimum_nccl_is_a_warning():
    unstated = {r["aws_ofi_nccl"] for r in catalog.rows("aws_ofi_nccl") if not r["min_nccl"]}
    installer = next(r for r in catalog.rows("efa_installer") if r["aws_ofi_nccl"] in unstated)
    found = compat.check_lock(make_lock("cu126", fabric="efa", efa=efa_section(installer)))
    assert rules(found) == {"ofi-nccl"} and rules(found, "error") == set()
    assert "gives no minimum NCCL" in found[0].message


def test_an_installer_without_its_sha256_is_flagged():
    efa = efa_section(checked_installer())
    del efa["installerSha256"]
    unverified = make_lock("cu126", fabric="efa", efa=efa)
    found = [c for c in compat.check_lock(unverified) if c.rule == "efa-installer-unverified"]
    assert [c.severity for c in found] == ["warning"]


# --- can_run ---------------------------------------------------------------------------------------

def test_instance_gpu_arch_missing_from_the_lock_is_refused():
    node = catalog.instance_type("aws", "p5.48xlarge")
    other = next(r["arch"] for r in catalog.rows("arch_min_cuda") if r["arch"] != node.gpu.arch)
    lock = make_lock("cu126", gpuArchs=[other], fabric="efa", efa=efa_section(checked_installer()))
    found = [c for c in compat.can_run(lock, "aws", node.name) if c.rule == "gpu-arch-missing"]
    assert [c.severity for c in found] == ["error"]
    assert node.gpu.arch in found[0].message and "no kernel image is available" in found[0].message
    fixed = make_lock("cu126", gpuArchs=[node.gpu.arch], fabric="efa", efa=efa_section(checked_installer()))
    assert compat.can_run(fixed, "aws", node.name) == []


def test_cpu_torch_on_a_gpu_instance_is_a_warning():
    found = compat.can_run(make_lock("cpu"), "aws", "g5.xlarge")
    assert [(c.rule, c.severity) for c in found] == [("gpu-arch-missing", "warning")]


def test_fabric_mismatches():
    efa_node, erdma_node = gpu_instance("efa"), gpu_instance("erdma", "alicloud")
    plain = next(it for it in catalog.instance_types("aws").values() if not it.has_rdma)
    efa_lock = make_lock("cu126", fabric="efa", efa=efa_section(checked_installer()),
                         gpuArchs=sorted({efa_node.gpu.arch, erdma_node.gpu.arch, plain.gpu.arch}))
    none_lock = make_lock("cu126", gpuArchs=efa_lock.gpu_archs)

    def mismatch(lock, cloud, node):
        return [(c.severity) for c in compat.can_run(lock, cloud, node.name) if c.rule == "fabric-mismatch"]

    assert mismatch(none_lock, "aws", efa_node) == ["warning"]
    assert mismatch(efa_lock, "alicloud", erdma_node) == ["error"]
    assert mismatch(efa_lock, "aws", plain) == ["warning"]
    assert mismatch(efa_lock, "aws", efa_node) == []


def test_instance_specific_nccl_and_plugin_minimums_apply():
    need = next(r for r in catalog.rows("fabric_min_nccl")
                if r["fabric"] == "efa" and r["instance_type"] != "*" and r["min_plugin"])
    node = catalog.instance_type("aws", need["instance_type"])
    old_plugin = below(need["min_plugin"])
    installer = checked_installer()
    lock = make_lock("cu126", nccl=below(need["min_nccl"]), gpuArchs=[node.gpu.arch], fabric="efa",
                     efa={"installer": installer["efa_installer"], "installerSha256": SHA, "awsOfiNccl": old_plugin})
    assert "fabric-nccl" not in rules(compat.check_lock(lock))
    found = [c for c in compat.can_run(lock, "aws", node.name) if c.rule == "fabric-nccl"]
    assert len(found) == 2 and all(c.severity == "error" and node.name in c.message for c in found)
    assert any(need["min_nccl"] in c.message for c in found)
    assert any(need["min_plugin"] in c.message and "efa.awsOfiNccl=" in c.message for c in found)


def test_unknown_instance_type_suggests_the_closest():
    found = compat.can_run(make_lock("cu126"), "aws", "p5.48xlarg")
    assert [c.rule for c in found] == ["unknown-pin"] and "p5.48xlarge" in found[0].message


@pytest.mark.parametrize("key", sorted((r["cloud"], r["instance_type"]) for r in catalog.rows("instance_types")
                                if catalog.instance_type(r["cloud"], r["instance_type"]).gpu.arch.startswith("sm_")),
                         ids=lambda k: k[1])  # NVIDIA types: a CUDA lock's gpuArchs is an sm_ arch (an NPU's is not)
def test_every_catalog_instance_type_can_be_checked_with_any_listed_driver(key):
    cloud, name = key
    lock = make_lock("cu126", gpuArchs=[catalog.instance_type(cloud, name).gpu.arch])
    for r in catalog.rows("cuda_min_driver"):
        found = compat.can_run(lock, cloud, name, r["min_driver"])
        assert all(c.rule != "unknown-pin" for c in found), found
