"""GPU-host checks on captured nvidia-smi, torch and nccl-tests output (tests/unit/captures/README.md).

Expected GPU counts and models come from the catalog, driver minimums and archs from an image lock.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goldenenv import catalog, compat
from goldenenv.checks import gpu
from goldenenv.images import lock as image_lock

CAPTURES = Path(__file__).parent / "captures"
LOCK = image_lock.load("aws-h100")
MIN_DRIVER = "560.35.05"
"""CUDA 12.6 U3's minimum driver (NVIDIA CUDA Toolkit Release Notes, table 3): the aws-h100 lock pins CUDA 12.6.3
and the captures' drivers were picked against it (captures/README.md)."""
P5 = catalog.instance_type("aws", "p5.48xlarge")
P4D = catalog.instance_type("aws", "p4d.24xlarge")
G5 = catalog.instance_type("aws", "g5.xlarge")


def capture(name: str) -> str:
    return (CAPTURES / name).read_text(encoding="utf-8")


def smi(name: str) -> list[gpu.GpuInfo]:
    return gpu.parse_nvidia_smi(capture(name))


def by_check(findings: list[gpu.HostFinding]) -> dict[str, gpu.HostFinding]:
    return {f.check: f for f in findings}


def failed(findings: list[gpu.HostFinding]) -> set[str]:
    return {f.check for f in findings if not f.ok}


# nvidia-smi

@pytest.mark.parametrize("name, instance", [
    ("nvidia_smi_p5.48xlarge.csv", P5),
    ("nvidia_smi_p4d.24xlarge.csv", P4D),
    ("nvidia_smi_g5.xlarge.csv", G5),
])
def test_each_capture_parses_to_the_catalog_gpus_of_its_instance_type(name, instance):
    gpus = smi(name)
    assert [g.index for g in gpus] == list(range(instance.gpu_count))
    assert {gpu.catalog_gpu(g) for g in gpus} == {instance.gpu.name}
    assert {"sm_" + g.compute_cap.replace(".", "") for g in gpus} == {instance.gpu.arch}


def test_a_line_reads_into_typed_fields():
    first = smi("nvidia_smi_p5.48xlarge.csv")[0]
    assert first == gpu.GpuInfo(0, "NVIDIA H100 80GB HBM3", "570.86.15", 81559, "9.0")


def test_the_driver_failure_message_is_an_error_not_an_empty_host():
    with pytest.raises(ValueError, match="nvidia-smi failed on this host.*couldn't communicate with the NVIDIA driver"):
        smi("nvidia_smi_driver_failure.txt")


@pytest.mark.parametrize("stdout, complaint", [
    ("", "printed nothing"),
    ("No devices were found\n", "nvidia-smi failed"),
    ("index, name, driver_version, memory.total [MiB], compute_cap\n", "index is unreadable"),
    ("0, NVIDIA H100 80GB HBM3, 570.86.15, 81559\n", "expected 5 comma-separated fields"),
    ("0, NVIDIA H100 80GB HBM3, 570.86.15, 81559, [N/A]\n", "compute_cap is unreadable"),
    ("0, NVIDIA A10G, 550.144.03, 23028, 8.6\n0, NVIDIA A10G, 550.144.03, 23028, 8.6\n", "more than once"),
])
def test_garbage_is_refused_with_a_message_that_says_what_is_wrong(stdout, complaint):
    with pytest.raises(ValueError, match=complaint):
        gpu.parse_nvidia_smi(stdout)


@pytest.mark.parametrize("name, memory_mib, cap, model", [
    # nvidia-smi memory.total values as documented (captures/README.md), keyed by the model word of the catalog key
    ("NVIDIA H100 80GB HBM3", 81559, "9.0", "H100"),
    ("NVIDIA A100-SXM4-40GB", 40960, "8.0", "A100"),
    ("NVIDIA A10G", 23028, "8.6", "A10G"),
    ("NVIDIA L40S", 46068, "8.9", "L40S"),
    ("NVIDIA A10", 23028, "8.6", "A10"),
    ("NVIDIA H200", 143771, "9.0", "H200"),
    ("NVIDIA B200", 183359, "10.0", "B200"),
])
def test_marketing_names_map_to_the_catalog_row_of_that_model_arch_and_size(name, memory_mib, cap, model):
    key = gpu.catalog_gpu(gpu.GpuInfo(0, name, "570.86.15", memory_mib, cap))
    assert key is not None and key.split("-")[0] == model
    row = catalog.gpus()[key]
    assert row.arch == "sm_" + cap.replace(".", "")
    reported_gib, reported_gb = memory_mib / 1024, memory_mib * 2**20 / 1e9
    assert reported_gib * (1 - gpu.MEMORY_SLACK) <= row.memory_gib <= reported_gb * (1 + gpu.MEMORY_SLACK)


def test_the_a100_sizes_are_told_apart_by_memory():
    forty = gpu.catalog_gpu(gpu.GpuInfo(0, "NVIDIA A100-SXM4-40GB", "535.183.01", 40960, "8.0"))
    eighty = gpu.catalog_gpu(gpu.GpuInfo(0, "NVIDIA A100-SXM4-80GB", "535.183.01", 81920, "8.0"))
    assert forty == P4D.gpu.name
    assert eighty == catalog.instance_type("aws", "p4de.24xlarge").gpu.name


@pytest.mark.parametrize("info, listed", [
    (gpu.GpuInfo(0, "NVIDIA H100 NVL", "570.86.15", 95830, "9.0"), "H100-NVL-94GB"),
    (gpu.GpuInfo(0, "Tesla T4", "570.86.15", 15360, "7.5"), "T4"),
])
def test_azure_nc_gpus_map_to_their_catalog_rows(info, listed):
    # the Azure NC sizes' GPUs (catalog instance_types.csv): as nvidia-smi names them
    assert gpu.catalog_gpu(info) == listed


@pytest.mark.parametrize("info", [
    gpu.GpuInfo(0, "NVIDIA GH200 480GB", "570.86.15", 97871, "9.0"),  # H20's size and arch, but not an H20
    gpu.GpuInfo(0, "NVIDIA RTX 6000 Ada Generation", "570.86.15", 49140, "8.9"),
    gpu.GpuInfo(0, "NVIDIA A30", "570.86.15", 24576, "8.0"),
    gpu.GpuInfo(0, "NVIDIA H100 80GB HBM3", "570.86.15", 81559, "8.0"),
])
def test_gpus_the_catalog_does_not_list_map_to_none(info):
    assert gpu.catalog_gpu(info) is None


def test_every_catalog_gpu_is_reachable_from_a_name_nvidia_would_print():
    nvidia = {r["gpu"] for r in catalog.rows("gpus") if r["vendor"] == "nvidia"}  # an NPU is no nvidia-smi's
    for key, row in catalog.gpus().items():
        if key not in nvidia:
            continue
        cap = row.arch.removeprefix("sm_")
        compute_cap = f"{cap[:-1]}.{cap[-1]}"
        info = gpu.GpuInfo(0, f"NVIDIA {key.split('-')[0]}", "570.86.15", row.memory_gib * 1024, compute_cap)
        assert gpu.catalog_gpu(info) == key


# check_gpus

def test_the_lock_the_captures_were_picked_against_still_needs_their_minimum():
    assert compat.min_driver(LOCK.cuda) == MIN_DRIVER


def test_the_right_host_passes_every_check():
    findings = gpu.check_gpus(smi("nvidia_smi_p5.48xlarge.csv"), "aws", "p5.48xlarge", MIN_DRIVER)
    assert [f.check for f in findings] == ["gpu-count", "gpu-model", "driver-minimum", "driver-uniform"]
    assert failed(findings) == set(), [f.message for f in findings]
    assert f"{P5.gpu_count} x {P5.gpu.name} (catalog, p5.48xlarge)" in by_check(findings)["gpu-count"].message


def test_a_driver_below_the_lock_minimum_fails_naming_both_versions():
    gpus = smi("nvidia_smi_p4d.24xlarge.csv")
    findings = gpu.check_gpus(gpus, "aws", "p4d.24xlarge", MIN_DRIVER)
    assert failed(findings) == {"driver-minimum"}
    message = by_check(findings)["driver-minimum"].message
    assert gpus[0].driver in message and MIN_DRIVER in message and "below the lock minimum" in message


def test_a_missing_gpu_fails_the_count_naming_expected_and_found():
    gpus = smi("nvidia_smi_p5.48xlarge_gpu_missing.csv")
    findings = gpu.check_gpus(gpus, "aws", "p5.48xlarge", MIN_DRIVER)
    assert failed(findings) == {"gpu-count"}
    assert by_check(findings)["gpu-count"].message == (
        f"expected {P5.gpu_count} x {P5.gpu.name} (catalog, p5.48xlarge), found {P5.gpu_count - 1} x {gpus[0].name}")


def test_a_g5_checked_as_a_p5_fails_count_and_model():
    findings = gpu.check_gpus(smi("nvidia_smi_g5.xlarge.csv"), "aws", "p5.48xlarge", MIN_DRIVER)
    assert {"gpu-count", "gpu-model"} <= failed(findings)
    model = by_check(findings)["gpu-model"].message
    assert P5.gpu.name in model and f"NVIDIA A10G ({G5.gpu.name})" in model and "p5.48xlarge" in model


def test_mixed_drivers_fail_uniformity_and_name_the_odd_gpu():
    gpus = smi("nvidia_smi_p5.48xlarge_mixed_drivers.csv")
    odd = next(g for g in gpus if g.driver != gpus[0].driver)
    findings = gpu.check_gpus(gpus, "aws", "p5.48xlarge", MIN_DRIVER)
    assert "driver-uniform" in failed(findings)
    assert f"{odd.driver} on GPU {odd.index}" in by_check(findings)["driver-uniform"].message
    minimum = by_check(findings)["driver-minimum"].message
    assert f"{odd.driver} on GPU {odd.index} is below the lock minimum {MIN_DRIVER}" in minimum


def test_drivers_compare_as_versions_not_strings():
    gpus = [gpu.GpuInfo(0, "NVIDIA A10G", "1000.1", 23028, "8.6")]
    assert by_check(gpu.check_gpus(gpus, "aws", "g5.xlarge", "999.99.99"))["driver-minimum"].ok
    assert by_check(gpu.check_gpus(gpus, "aws", "g5.xlarge", "1000.1.0"))["driver-minimum"].ok
    assert not by_check(gpu.check_gpus(gpus, "aws", "g5.xlarge", "1000.1.1"))["driver-minimum"].ok


def test_no_gpu_at_all_fails_every_check():
    assert failed(gpu.check_gpus([], "aws", "p5.48xlarge", MIN_DRIVER)) == {
        "gpu-count", "gpu-model", "driver-minimum", "driver-uniform"}


def test_an_instance_type_the_catalog_lacks_is_one_failing_finding():
    [finding] = gpu.check_gpus(smi("nvidia_smi_p5.48xlarge.csv"), "aws", "p5.96xlarge", MIN_DRIVER)
    assert not finding.ok and "p5.96xlarge" in finding.message and "p5.48xlarge" in finding.message


def test_messages_are_one_line():
    for name in ("nvidia_smi_p5.48xlarge_mixed_drivers.csv", "nvidia_smi_g5.xlarge.csv"):
        for finding in gpu.check_gpus(smi(name), "aws", "p5.48xlarge", MIN_DRIVER):
            assert "\n" not in finding.message


# host-image driver pin

P5_DRIVER = "570.86.15"
"""The driver every GPU of nvidia_smi_p5.48xlarge.csv reports (captures/README.md)."""


def test_a_node_on_its_host_image_driver_passes():
    finding = gpu.check_host_driver(smi("nvidia_smi_p5.48xlarge.csv"), "node-0", P5_DRIVER)
    assert finding.ok and finding.check == "host-driver", finding.message


def test_a_gpu_on_another_driver_fails_naming_node_gpu_and_both_drivers():
    finding = gpu.check_host_driver(smi("nvidia_smi_p5.48xlarge_mixed_drivers.csv"), "ip-10-0-1-17", P5_DRIVER)
    assert not finding.ok
    assert finding.message == ("node ip-10-0-1-17 drifted from its host image: driver 550.127.08 on GPU 2, "
                               "the image pins 570.86.15")


def test_a_whole_node_on_another_driver_names_every_gpu():
    finding = gpu.check_host_driver(smi("nvidia_smi_p5.48xlarge.csv"), "node-1", "550.127.08")
    assert not finding.ok
    assert "node node-1 drifted from its host image" in finding.message
    assert "driver 570.86.15 on GPU 0,1,2,3,4,5,6,7" in finding.message and "pins 550.127.08" in finding.message


def test_the_host_driver_pin_compares_versions_not_strings():
    assert gpu.check_host_driver(smi("nvidia_smi_p5.48xlarge.csv"), "node-0", "570.86.15.0").ok
    assert not gpu.check_host_driver(smi("nvidia_smi_p5.48xlarge.csv"), "node-0", "570.86.1").ok


def test_no_gpu_fails_the_host_driver_check():
    finding = gpu.check_host_driver([], "node-0", P5_DRIVER)
    assert not finding.ok and "found no GPU" in finding.message and P5_DRIVER in finding.message


# torch probe

def test_the_torch_probe_is_a_valid_program_printing_the_keys_the_parser_wants():
    compile(gpu.TORCH_PROBE, "<TORCH_PROBE>", "exec")
    for key in ("torch", "cuda", "cuda_available", "device_count", "arch_list", "nccl", "cudnn"):
        assert f'"{key}"' in gpu.TORCH_PROBE


def test_torch_probe_captures_parse():
    gpu_build = gpu.parse_torch_probe(capture("torch_probe_p5.48xlarge_torch2.7.0_cu126.json"))
    assert gpu_build["torch"] == f"{LOCK.torch}+{LOCK.torch_cuda}"
    cpu_build = gpu.parse_torch_probe(capture("torch_probe_cpu_torch2.13.0.json"))
    assert cpu_build["cuda"] is None and cpu_build["nccl"] is None and cpu_build["arch_list"] == []


def test_torch_probe_parser_skips_log_lines_and_refuses_a_traceback():
    line = capture("torch_probe_cpu_torch2.13.0.json")
    assert gpu.parse_torch_probe("UserWarning: something\n" + line)["torch"].endswith("+cpu")
    with pytest.raises(ValueError, match="No module named 'torch'"):
        gpu.parse_torch_probe("Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n")
    with pytest.raises(ValueError, match="lacks arch_list"):
        gpu.parse_torch_probe(json.dumps({"torch": "2.7.0", "cuda": "12.6", "cuda_available": True,
                                          "device_count": 8, "nccl": None, "cudnn": None}))


def test_torch_on_the_right_host_sees_every_gpu_and_the_lock_archs():
    probe = gpu.parse_torch_probe(capture("torch_probe_p5.48xlarge_torch2.7.0_cu126.json"))
    findings = gpu.check_torch_gpu(probe, P5.gpu_count, LOCK.gpu_archs)
    assert [f.check for f in findings] == ["torch-gpus"] + [f"torch-arch-{a}" for a in LOCK.gpu_archs]
    assert failed(findings) == set(), [f.message for f in findings]


def test_a_lock_arch_missing_from_the_wheel_fails_with_no_kernel_image():
    probe = gpu.parse_torch_probe(capture("torch_probe_p5.48xlarge_torch2.7.0_cu126.json"))
    blackwell = catalog.instance_type("aws", "p6-b200.48xlarge").gpu.arch
    assert blackwell not in probe["arch_list"]
    findings = gpu.check_torch_gpu(probe, P5.gpu_count, [*LOCK.gpu_archs, blackwell])
    assert failed(findings) == {f"torch-arch-{blackwell}"}
    message = by_check(findings)[f"torch-arch-{blackwell}"].message
    assert blackwell in message and "no kernel image is available" in message and "pytorch/pytorch#90761" in message


def test_a_cpu_build_sees_no_gpu_and_no_arch():
    probe = gpu.parse_torch_probe(capture("torch_probe_cpu_torch2.13.0.json"))
    findings = gpu.check_torch_gpu(probe, P5.gpu_count, LOCK.gpu_archs)
    assert failed(findings) == {"torch-gpus"} | {f"torch-arch-{a}" for a in LOCK.gpu_archs}
    assert f"expected torch to see {P5.gpu_count} GPUs" in by_check(findings)["torch-gpus"].message


def test_torch_seeing_fewer_gpus_than_the_instance_has_fails():
    probe = dict(gpu.parse_torch_probe(capture("torch_probe_p5.48xlarge_torch2.7.0_cu126.json")),
                 device_count=P5.gpu_count - 1)
    assert failed(gpu.check_torch_gpu(probe, P5.gpu_count, LOCK.gpu_archs)) == {"torch-gpus"}


def test_gpus_listed_while_cuda_is_unavailable_do_not_count():
    probe = dict(gpu.parse_torch_probe(capture("torch_probe_p5.48xlarge_torch2.7.0_cu126.json")),
                 cuda_available=False)
    findings = gpu.check_torch_gpu(probe, P5.gpu_count, LOCK.gpu_archs)
    assert failed(findings) == {"torch-gpus"}
    assert "is_available() is False" in by_check(findings)["torch-gpus"].message


def test_an_arch_specific_cubin_counts_for_its_arch():
    probe = dict(gpu.parse_torch_probe(capture("torch_probe_p5.48xlarge_torch2.7.0_cu126.json")),
                 arch_list=["sm_80", "sm_90a"])
    assert failed(gpu.check_torch_gpu(probe, P5.gpu_count, ["sm_90"])) == set()
    assert failed(gpu.check_torch_gpu(probe, P5.gpu_count, ["sm_9"])) == {"torch-arch-sm_9"}


# all-reduce probe

def test_the_allreduce_probe_is_a_valid_program():
    compile(gpu.ALLREDUCE_PROBE, "<ALLREDUCE_PROBE>", "exec")
    assert '"nccl"' in gpu.ALLREDUCE_PROBE and "init_process_group" in gpu.ALLREDUCE_PROBE


def test_a_real_probe_run_parses_and_its_busbw_follows_the_nccl_tests_formula():
    result = gpu.parse_allreduce(capture("allreduce_gloo_cpu_4ranks.json"))
    assert result["ok"] and result["world_size"] == 4
    n = result["world_size"]
    assert result["busbw_gbps"] == pytest.approx(result["bytes"] / result["seconds"] / 1e9 * 2 * (n - 1) / n)


def test_the_probe_on_a_host_without_gpus_reports_not_ok():
    result = gpu.parse_allreduce(capture("allreduce_no_gpu.json"))
    assert result["ok"] is False and result["world_size"] == 0 and "no CUDA device" in result["error"]


def test_a_busbw_that_disagrees_with_its_timing_is_refused():
    result = json.loads(capture("allreduce_gloo_cpu_4ranks.json"))
    result["busbw_gbps"] = result["algbw_gbps"]  # the 2(n-1)/n factor forgotten
    with pytest.raises(ValueError, match="nccl-tests formula"):
        gpu.parse_allreduce(json.dumps(result))
    with pytest.raises(ValueError, match="printed no JSON"):
        gpu.parse_allreduce("")


def test_the_busbw_formula_reproduces_nccl_tests_own_numbers():
    result = gpu.parse_nccl_tests(capture("nccl_tests_all_reduce_2x8_h100_a3mega.txt"))
    large = [row for row in result if row["out_of_place"]["time_us"] >= 1000]
    assert large
    for row in large:
        perf = row["out_of_place"]
        expected = gpu.allreduce_busbw(row["size_bytes"], perf["time_us"] / 1e6, result.ranks)
        assert expected == pytest.approx(perf["busbw_gbps"], rel=0.005)


# nccl-tests

def test_nccl_tests_rows_ranks_and_average_busbw():
    result = gpu.parse_nccl_tests(capture("nccl_tests_all_reduce_2x8_h100_a3mega.txt"))
    assert result.avg_busbw_gbps == pytest.approx(70.742)
    assert result.ranks == 16
    assert [row["size_bytes"] for row in result] == [8 * 2**i for i in range(31)]
    last = result[-1]
    assert last == {
        "size_bytes": 8589934592, "count": 2147483648, "type": "float", "redop": "sum", "root": -1,
        "out_of_place": {"time_us": 47535.0, "algbw_gbps": 180.71, "busbw_gbps": 338.82, "wrong": 0},
        "in_place": {"time_us": 47743.0, "algbw_gbps": 179.92, "busbw_gbps": 337.35, "wrong": 0},
    }


def test_srun_labelled_output_parses_and_matches_the_catalog_reference():
    result = gpu.parse_nccl_tests(capture("nccl_tests_all_reduce_2x_p5.48xlarge_srun.txt"))
    assert result.avg_busbw_gbps is None and result.ranks is None
    busbw = {row["size_bytes"]: row["out_of_place"]["busbw_gbps"] for row in result}
    references = [r for r in catalog.busbw_references() if r.instance_type == "p5.48xlarge" and r.kind == "reference"]
    assert references
    for ref in references:
        assert busbw[ref.message_bytes] == pytest.approx(ref.busbw_gbytes_per_s, rel=0.01)


def test_nccl_tests_wrong_counts_and_na_are_kept():
    lines = capture("nccl_tests_all_reduce_2x8_h100_a3mega.txt").splitlines()
    header = [line for line in lines if line.startswith("#")]
    rows = ["   134217728      33554432     float     sum      -1   1211.2  110.81  207.77      3"
            "   1211.8  110.76  207.67    N/A"]
    [row] = gpu.parse_nccl_tests("\n".join(header + rows))
    assert row["out_of_place"]["wrong"] == 3 and row["in_place"]["wrong"] is None


def test_output_without_results_is_refused():
    with pytest.raises(ValueError, match="no nccl-tests result rows"):
        gpu.parse_nccl_tests("NCCL WARN NET/OFI Failed to initialize sendrecv protocol\n")
