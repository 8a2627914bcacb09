"""Node health rules: the catalog's XID, NVLink and threshold tables, and the node-side judge applying them to
recorded evidence (tests/unit/captures/health/README.md).

Expected actions and counts come from the catalog; a few literal anchors from NVIDIA's public tables catch a
wrong row that a test reading the same CSV would not.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from goldenenv import catalog, fabrics
from goldenenv.catalog import health
from goldenenv.health import judge

CAPTURES = Path(__file__).parent / "captures" / "health"
JUDGE_SCRIPT = Path(judge.__file__)
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
"""The script runs under `-I -S` (no site-packages, no script folder on sys.path): only the stdlib is there."""
NODE = "gpu-node-7"
SLURM_REASON = re.compile(r"^[A-Za-z0-9 _.,:/()+-]*$")


def evidence(case: str) -> dict[str, str]:
    return judge.read_evidence(str(CAPTURES / case))


def expect(case: str) -> dict:
    return json.loads((CAPTURES / case / "expect.json").read_text())


def run_judge(case: str, **replaced: str) -> list[judge.Finding]:
    files = {**evidence(case), **replaced}
    return judge.judge(files, expect(case), health.rules_document(), NODE)


def catalog_action(rule: str) -> str:
    if rule.startswith("xid_"):
        return health.xid_rules()[int(rule.removeprefix("xid_"))].action
    return health.thresholds()[rule].action


# The catalog tables

def test_the_xids_of_the_research_table_each_have_a_row():
    research_section_4_2 = {13, 31, 43, 48, 54, 63, 64, 74, 79, 92, 94, 95, 109, 110, 119, 120, 136, 140, 143, 151,
                            154, 155, 156, 158}
    assert research_section_4_2 <= set(health.xid_rules())


def test_xid_anchors_from_nvidias_catalog():
    rules = health.xid_rules()
    # NVIDIA Xid catalog: 79 GPU fallen off the bus is RESTART_BM, 94 contained ECC error RESTART_APP,
    # 48 double-bit ECC WORKFLOW_XID_48, 63 row remap recorded IGNORE.
    assert rules[79].action in judge.FAILING_ACTIONS and rules[79].nvidia_bucket == "RESTART_BM"
    assert rules[94].action == "restart-job"
    assert rules[48].action in judge.FAILING_ACTIONS
    assert rules[63].action == "monitor"


def test_every_action_in_the_tables_is_one_the_judge_knows():
    actions = {r.action for r in health.xid_rules().values()} | {t.action for t in health.thresholds().values()}
    assert actions <= set(judge.ACTIONS)


def test_every_catalog_instance_type_has_nvlink_facts():
    listed = {(r["cloud"], r["instance_type"]) for r in catalog.rows("instance_types")}
    assert set(health.link_facts()) == listed


def test_nvlink_anchors_from_nvidias_fabric_manager_guide():
    # HGX H100: 4+4+5+5 NVLinks per GPU to four NVSwitches; HGX A100: two to each of six NVSwitches.
    assert health.expectations("aws", "p5.48xlarge")["nvlinks_per_gpu"] == 18
    assert health.expectations("aws", "p4d.24xlarge")["nvlinks_per_gpu"] == 12
    assert health.expectations("aws", "g5.48xlarge")["nvswitch"] is False


def test_nvswitch_boards_have_nvlinks():
    for facts in health.link_facts().values():
        assert not facts.nvswitch or facts.nvlinks_per_gpu > 0, facts


@pytest.mark.parametrize("row", catalog.rows("instance_types"), ids=lambda r: r["instance_type"])
def test_expectations_agree_with_instance_types(row):
    """The type's fabric as the judge counts it: Google's GPU NICs are proven by their boot check, not counted. An
    Ascend type's devices are NPUs, counted from npu-smi (`npus`), not GPUs nvidia-smi must list."""
    fabric = fabrics.get(row["rdma"])
    judged = fabric.health_fabric if fabric else "none"
    assert judged in judge.FABRICS
    links = health.link_facts()[(row["cloud"], row["instance_type"])]
    rate = {"fabric_rate_gbps": links.fabric_rate_gbps} if links.fabric_rate_gbps and judged != "none" else {}
    vendor = {r["gpu"]: r["vendor"] for r in catalog.rows("gpus")}.get(row["gpu"])
    devices = {"gpus": 0, "npus": int(row["gpu_count"])} if vendor == "huawei" else {"gpus": int(row["gpu_count"])}
    assert health.expectations(row["cloud"], row["instance_type"]) == {
        **devices,
        "fabric": judged,
        "fabric_devices": int(row["rdma_interfaces"]) if judged != "none" else 0,
        "nvlinks_per_gpu": links.nvlinks_per_gpu,
        "nvswitch": links.nvswitch,
        **rate,
    }


@pytest.mark.parametrize("loader, row, message", [
    (health.xid_rules, {"xid": "79", "name": "n", "nvidia_bucket": "b", "action": "panic", "source": "s"},
     "health_xid.csv row 79: action 'panic' is not one of drain"),
    (health.thresholds, {"check": "c", "limit": "many", "unit": "u", "action": "drain", "source": "s"},
     "health_thresholds.csv row c: limit 'many' is not a number"),
    (health.link_facts, {"cloud": "aws", "instance_type": "t", "nvlinks_per_gpu": "18", "nvswitch": "maybe",
                         "source": "s"}, "health_links.csv row aws t: nvswitch 'maybe' must be yes or no"),
])
def test_a_bad_row_names_its_file_and_what_would_be_valid(monkeypatch, loader, row, message):
    monkeypatch.setattr(health, "rows", lambda table: [row])
    loader.cache_clear()
    try:
        with pytest.raises(ValueError, match=re.escape(message)):
            loader()
    finally:
        loader.cache_clear()


def test_expectations_name_the_missing_row():
    with pytest.raises(KeyError):
        health.expectations("aws", "no-such-type")


def test_the_rules_document_survives_json_and_passes_the_judges_check():
    document = health.rules_document()
    assert json.loads(json.dumps(document)) == document
    assert judge.check_rules(document) is document
    assert document["xid"]["79"]["action"] == health.xid_rules()[79].action


# The recordings

def test_the_healthy_recording_expects_what_the_catalog_says():
    assert expect("healthy-p5.48xlarge") == health.expectations("aws", "p5.48xlarge")


@pytest.mark.parametrize("case", ["healthy-p5.48xlarge", "healthy-ib"])
def test_healthy_recordings_give_no_finding(case):
    assert run_judge(case) == []


FAILURES = {
    "xid79-gpu3": {("xid_79", "GPU 3")},
    "row-remap-pending-gpu5": {("row_remap_pending", "GPU 5")},
    "efa-31-of-32": {("efa_devices_below_expected", "EFA")},
    "ib-port-down": {("ib_port_not_active", "mlx5_ib5 port 1")},
    "nvlink-errors-gpu2": {("nvlink_replay_errors", "GPU 2 link 5"), ("nvlink_crc_errors", "GPU 2 link 5")},
    "dcgm-l1-inforom-gpu6": {("dcgm_severity_triage", "GPU 6")},
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_each_failure_is_judged_by_its_rule_with_the_catalogs_action(case):
    findings = run_judge(case)
    assert {(f.rule, f.device) for f in findings} == FAILURES[case]
    for f in findings:
        assert f.action == catalog_action(f.rule)
        assert f.node == NODE and f.message.startswith(NODE) and "\n" not in f.message
        assert f.device in f.message and "expected" in f.message


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_each_failure_case_takes_the_node_out(case):
    assert judge.worst(run_judge(case)) in judge.FAILING_ACTIONS


def test_the_xid_finding_names_the_gpu_by_its_bus_id():
    [finding] = run_judge("xid79-gpu3")
    assert "GPU 3 (PCI 0000:86:00)" in finding.message and "fallen off the bus" in finding.message


def test_a_dcgm_failure_carries_dcgms_own_warning():
    [finding] = run_judge("dcgm-l1-inforom-gpu6")
    assert "corrupt InfoROM" in finding.message and "level 1" in finding.message


# Rules the recordings do not exercise

def log_with(*lines: str) -> str:
    return evidence("healthy-p5.48xlarge")["kernel.log"] + "".join(f"Mar 14 10:00:00 h kernel: {x}\n" for x in lines)


def test_an_xid_that_kills_only_the_job_keeps_the_node():
    findings = run_judge("healthy-p5.48xlarge", **{"kernel.log": log_with(
        "NVRM: Xid (PCI:0000:75:00): 94, pid=4242, name=python, Ch 00000008")})
    assert [(f.rule, f.device, f.action) for f in findings] == [("xid_94", "GPU 2", catalog_action("xid_94"))]
    assert judge.worst(findings) not in judge.FAILING_ACTIONS


def test_an_xid_not_in_the_catalog_is_recorded_and_said_so():
    [finding] = run_judge("healthy-p5.48xlarge", **{"kernel.log": log_with(
        "NVRM: Xid (PCI:0000:53:00): 999, pid=1, name=x, something new")})
    assert finding.action == judge.UNKNOWN_XID_ACTION and "not in the catalog" in finding.message


def test_xid_154_takes_the_recovery_action_it_names():
    [finding] = run_judge("healthy-p5.48xlarge", **{"kernel.log": log_with(
        "NVRM: Xid (PCI:0000:ca:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")})
    assert (finding.rule, finding.device) == ("xid154_node_reboot", "GPU 7")
    assert finding.action == catalog_action("xid154_node_reboot")


def test_fatal_and_non_fatal_sxids_follow_the_fabric_manager_guide():
    findings = run_judge("healthy-p5.48xlarge", **{"kernel.log": log_with(
        "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS crumbstore MCTO (First)",
        "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Severity 0 Engine instance 46 Sub-engine instance 00",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up")})
    assert {(f.rule, f.device, f.action) for f in findings} == {
        ("sxid_nonfatal", "nvidia-nvswitch3", catalog_action("sxid_nonfatal")),
        ("sxid_fatal", "nvidia-nvswitch0", catalog_action("sxid_fatal"))}


def test_a_lost_gpu_and_an_inactive_nvlink_are_found():
    smi = evidence("healthy-p5.48xlarge")["nvidia_smi_gpus.csv"].splitlines(keepends=True)
    status = evidence("healthy-p5.48xlarge")["nvlink_status.txt"].replace(
        "GPU 4: NVIDIA H100 80GB HBM3 (UUID: GPU-275ad37d-ebd6-4cf6-3867-0499ba033a12)\n\t Link 0: 26.562 GB/s",
        "GPU 4: NVIDIA H100 80GB HBM3 (UUID: GPU-275ad37d-ebd6-4cf6-3867-0499ba033a12)\n\t Link 0: <inactive>")
    findings = run_judge("healthy-p5.48xlarge", **{"nvidia_smi_gpus.csv": "".join(smi[:-1]),
                                                   "nvlink_status.txt": status})
    assert {(f.rule, f.device) for f in findings} == {("gpu_count_below_expected", "node"),
                                                     ("nvlink_inactive", "GPU 4")}


def test_fabric_manager_down_on_an_nvswitch_board():
    [finding] = run_judge("healthy-p5.48xlarge", **{"fabric_manager.txt": "failed\n"})
    assert (finding.rule, finding.action) == ("fabric_manager_inactive", catalog_action("fabric_manager_inactive"))


def test_efa_error_counters_are_recorded():
    counters = evidence("healthy-p5.48xlarge")["rdma_statistic.txt"].replace(
        "link rdmap96s0/1 \n    tx_bytes 0 \n    tx_pkts 0 \n    rx_bytes 0 \n    rx_pkts 0 \n    rx_drops 0 ",
        "link rdmap96s0/1 \n    tx_bytes 0 \n    tx_pkts 0 \n    rx_bytes 0 \n    rx_pkts 0 \n    rx_drops 17 ")
    [finding] = run_judge("healthy-p5.48xlarge", **{"rdma_statistic.txt": counters})
    assert (finding.rule, finding.device, finding.action) == ("efa_rx_drops", "rdmap96s0/1",
                                                              catalog_action("efa_rx_drops"))


def test_an_erdma_node_missing_a_device():
    node = health.expectations("alicloud", "ecs.ebmgn8v.48xlarge")
    files = {**evidence("healthy-p5.48xlarge"),
             "rdma_link.txt": "link erdma_0/1 state ACTIVE physical_state LINK_UP netdev eth0\n"}
    findings = judge.judge(files, node, health.rules_document(), NODE)
    assert [f.rule for f in findings] == ["erdma_devices_below_expected"]
    assert f"{node['fabric_devices']} ACTIVE eRDMA devices" in findings[0].message


def test_a_failed_fabric_loopback_of_the_medium_level():
    [finding] = run_judge("healthy-p5.48xlarge", **{"efa_loopback.txt": "", "efa_loopback.txt.error": "exit 1: "
                                                    "fi_getinfo(): -61 (No data available)"})
    assert (finding.rule, finding.device, finding.action) == ("fabric_loopback_failed", "EFA",
                                                              catalog_action("fabric_loopback_failed"))
    assert run_judge("healthy-p5.48xlarge", **{"efa_loopback.txt.error": "missing-binary: fi_pingpong"}) == []


def test_evidence_for_a_fabric_the_node_lacks_is_ignored():
    assert run_judge("healthy-p5.48xlarge", **{"ibstat.txt": "garbage", "rdma_link.txt": "garbage"}) == []


# Missing and unreadable evidence

def test_a_missing_gpu_list_is_a_finding():
    files = evidence("healthy-p5.48xlarge")
    del files["nvidia_smi_gpus.csv"]
    files["nvidia_smi_gpus.csv.error"] = "missing-binary: nvidia-smi not found\n"
    findings = judge.judge(files, expect("healthy-p5.48xlarge"), health.rules_document(), NODE)
    assert [(f.rule, f.action) for f in findings] == [("evidence_missing", catalog_action("evidence_missing"))]
    assert "nvidia_smi_gpus.csv" in findings[0].message and "not found" in findings[0].message


def test_dcgm_is_judged_where_it_is_installed_only():
    files = evidence("healthy-p5.48xlarge")
    del files["dcgm_diag_1.json"]
    rules, node = health.rules_document(), expect("healthy-p5.48xlarge")
    assert judge.judge(files, node, rules, NODE) == []
    files["dcgm_diag_1.json.error"] = "missing-binary: dcgmi not found"
    assert judge.judge(files, node, rules, NODE) == []
    files["dcgm_diag_1.json.error"] = "timeout: `dcgmi diag -r 1 -j` ran past 60 s"
    assert [f.rule for f in judge.judge(files, node, rules, NODE)] == ["evidence_missing"]


GARBAGE = "\x00\x1b[31mSegmentation fault (core dumped)\n{{{ ,,, \ufffd\n"


@pytest.mark.parametrize("name", sorted(set(evidence("healthy-p5.48xlarge")) - {"kernel.log", "expect.json"}))
def test_garbage_evidence_is_a_finding_not_a_traceback(name):
    [finding] = run_judge("healthy-p5.48xlarge", **{name: GARBAGE})
    assert (finding.rule, finding.device) == ("evidence_unreadable", name)
    assert finding.action == catalog_action("evidence_unreadable")


def test_nvidia_smi_failing_is_unreadable_evidence():
    failure = (Path(__file__).parent / "captures" / "nvidia_smi_driver_failure.txt").read_text()
    [finding] = run_judge("healthy-p5.48xlarge", **{"nvidia_smi_gpus.csv": failure})
    assert finding.rule == "evidence_unreadable" and "NVIDIA-SMI has failed" in finding.message


@pytest.mark.parametrize("parse", [judge.parse_gpu_list, judge.parse_remapped_rows, judge.parse_kernel_log,
                                   judge.parse_nvlink_status, judge.parse_nvlink_errors, judge.parse_fi_info,
                                   judge.parse_ibstat, judge.parse_rdma_statistic, judge.parse_rdma_link,
                                   judge.parse_systemctl_is_active, judge.parse_dcgm_diag])
@pytest.mark.parametrize("text", ["", GARBAGE, "GPU 0:\n\tLink x: y\n", '{"DCGM Diagnostic": 3}', "link\n"])
def test_parsers_raise_nothing(parse, text):
    parse(text)


def test_dcgm_3_layout_reads_too():
    """DCGM 3 wrote "DCGM GPU Diagnostic" with gpu_ids strings (NVIDIA/DCGM testing/TestDiagManagerStrings.h)."""
    failed = {"gpu_ids": "1", "status": "FAIL",
              "warnings": [{"warning": "bad", "error_id": 1, "error_category": 10, "error_severity": 2}]}
    tests = [{"name": "memory", "results": [{"gpu_ids": "0", "status": "PASS"}, failed]}]
    dcgm3 = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": tests}]}}
    [result], problems = judge.parse_dcgm_diag(json.dumps(dcgm3))
    assert (result.device, result.status, result.severities, problems) == ("GPU 1", "fail", (2,), [])


# Actions and the drain reason

def test_worst_orders_actions():
    def finding(action: str) -> judge.Finding:
        return judge.Finding(NODE, "r", "d", action, "m")

    assert judge.worst([]) is None
    assert judge.worst([finding("monitor"), finding("restart-job")]) == "restart-job"
    assert judge.worst([finding("restart-job"), finding("reset")]) == "reset"
    assert judge.worst([finding("reboot"), finding("reset")]) == "reboot"
    assert judge.worst([finding("reboot"), finding("drain"), finding("monitor")]) == "drain"


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_the_drain_reason_fits_scontrol(case):
    reason = judge.drain_reason(run_judge(case))
    assert 0 < len(reason) <= 100 and SLURM_REASON.match(reason), reason
    assert reason.startswith(judge.worst(run_judge(case)))


def test_a_long_drain_reason_is_cut_and_cleaned():
    findings = [judge.Finding(NODE, f'rule_{n};$(rm -rf /)"`', f"GPU {n}", "drain", "m") for n in range(40)]
    reason = judge.drain_reason(findings)
    assert len(reason) <= 100 and SLURM_REASON.match(reason) and reason.endswith("...")
    assert judge.drain_reason([]) == "healthy"


# The script: stdlib only, exit codes

def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SYSTEM_PYTHON, "-I", "-S", str(JUDGE_SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.fixture
def rules_file(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(health.rules_document()))
    return str(path)


@pytest.mark.parametrize("case, status", [("healthy-p5.48xlarge", 0), ("healthy-ib", 0), ("xid79-gpu3", 1),
                                          ("efa-31-of-32", 1), ("ib-port-down", 1)])
def test_the_script_exits_0_healthy_and_1_on_a_failing_rule(case, status, rules_file):
    folder = CAPTURES / case
    done = run_script("--evidence", str(folder), "--expect", str(folder / "expect.json"), "--rules", rules_file,
                      "--node", NODE)
    assert done.returncode == status, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_the_script_prints_json(rules_file):
    folder = CAPTURES / "row-remap-pending-gpu5"
    done = run_script("--evidence", str(folder), "--expect", str(folder / "expect.json"), "--rules", rules_file,
                      "--node", NODE, "--json")
    report = json.loads(done.stdout)
    assert report["worst"] == catalog_action("row_remap_pending") and report["fails"] is True
    assert [f["device"] for f in report["findings"]] == ["GPU 5"]


def test_the_script_prints_the_drain_reason_alone(rules_file):
    folder = CAPTURES / "xid79-gpu3"
    done = run_script("judge", "--evidence", str(folder), "--expect", str(folder / "expect.json"), "--rules",
                      rules_file, "--reason")
    assert done.returncode == 1 and done.stdout.strip() == judge.drain_reason(run_judge("xid79-gpu3"))


def test_the_script_collects_on_a_node_without_the_tools_and_then_drains_it(tmp_path, rules_file):
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    folder, expect_file = tmp_path / "evidence", str(CAPTURES / "healthy-p5.48xlarge" / "expect.json")
    done = run_script("collect", "--level", "quick", "--expect", expect_file, "--out", str(folder),
                      env={"PATH": str(empty_path)})
    assert done.returncode == 0, done.stderr
    assert (folder / "nvidia_smi_gpus.csv.error").read_text().startswith(judge.MISSING_BINARY)
    done = run_script("--evidence", str(folder), "--expect", expect_file, "--rules", rules_file, "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and {f["rule"] for f in report["findings"]} == {"evidence_missing"}


def test_the_script_keeps_a_node_whose_job_died(tmp_path, rules_file):
    folder = tmp_path / "evidence"
    shutil.copytree(CAPTURES / "healthy-p5.48xlarge", folder)
    (folder / "kernel.log").write_text(log_with("NVRM: Xid (PCI:0000:53:00): 13, pid=77, name=python, Graphics "
                                                "Exception"))
    done = run_script("--evidence", str(folder), "--expect", str(folder / "expect.json"), "--rules", rules_file)
    assert done.returncode == 0 and "xid_13" in done.stdout


def test_the_script_survives_undecodable_evidence(tmp_path, rules_file):
    folder = tmp_path / "evidence"
    shutil.copytree(CAPTURES / "healthy-p5.48xlarge", folder)
    (folder / "nvidia_smi_gpus.csv").write_bytes(b"\xff\xfe\x00\x81 not csv \xc3\x28\n")
    done = run_script("--evidence", str(folder), "--expect", str(folder / "expect.json"), "--rules", rules_file)
    assert done.returncode == 1 and "evidence_unreadable" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("broken", ["--expect", "--rules", "--evidence", "--bogus"])
def test_the_script_exits_2_on_bad_input(broken, tmp_path, rules_file):
    folder = CAPTURES / "healthy-p5.48xlarge"
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpus": "eight"')
    args = {"--evidence": str(folder), "--expect": str(folder / "expect.json"), "--rules": rules_file}
    args[broken] = str(tmp_path / "absent") if broken == "--evidence" else str(bad)
    done = run_script(*[part for pair in args.items() for part in pair])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "judge.py" in done.stderr


def test_wrong_expectations_and_rules_say_what_is_valid():
    with pytest.raises(ValueError, match="fabric must be one of efa, ib, erdma(, [a-z]+)*, none, got 'roce'"):
        judge.check_expectations({**expect("healthy-p5.48xlarge"), "fabric": "roce"})
    with pytest.raises(ValueError, match="valid actions are"):
        judge.check_rules({"xid": {"79": {"action": "panic"}}, "thresholds": {}})


# Collecting evidence

def fake_runner(outputs: dict[str, object]):
    """Answers each command from `outputs` by its first word(s): a (status, stdout) pair or an exception."""
    def run(argv, timeout_s):
        key = next(k for k in outputs if " ".join(argv).startswith(k))
        answer = outputs[key]
        if isinstance(answer, BaseException):
            raise answer
        status, out = answer
        return status, out, "boom" if status else ""
    return run


def test_collect_writes_each_applicable_evidence_file_and_why_one_is_missing(tmp_path):
    healthy = evidence("healthy-p5.48xlarge")
    outputs = {" ".join(spec.argv): (0, healthy.get(spec.file, "")) for spec in judge.EVIDENCE.values()}
    outputs["dcgmi diag -r 1 -j"] = FileNotFoundError("dcgmi")
    outputs["rdma -p statistic show"] = subprocess.TimeoutExpired("rdma", 5)
    outputs["systemctl is-active nvidia-fabricmanager"] = (3, "inactive\n")
    written = judge.collect("quick", str(tmp_path), expect("healthy-p5.48xlarge"), runner=fake_runner(outputs))
    assert "ibstat.txt" not in written and "dcgm_diag_2.json" not in written
    assert (tmp_path / "dcgm_diag_1.json.error").read_text().startswith(judge.MISSING_BINARY)
    assert (tmp_path / "rdma_statistic.txt.error").read_text().startswith("timeout")
    assert (tmp_path / "fabric_manager.txt").read_text() == "inactive\n"
    assert (tmp_path / "fabric_manager.txt.error").read_text().startswith("exit 3")
    findings = judge.judge(judge.read_evidence(str(tmp_path)), expect("healthy-p5.48xlarge"),
                           health.rules_document(), NODE)
    assert {f.rule for f in findings} == {"evidence_missing", "fabric_manager_inactive"}


def test_collect_falls_back_to_dmesg_without_journalctl(tmp_path):
    outputs = {"journalctl": FileNotFoundError("journalctl"), "dmesg": (0, "[ 1.0] NVRM: loading\n"),
               "": (0, "")}
    judge.collect("quick", str(tmp_path), expect("healthy-p5.48xlarge"), runner=fake_runner(outputs))
    assert (tmp_path / "kernel.log").read_text() == "[ 1.0] NVRM: loading\n"


def test_levels_add_evidence():
    node = expect("healthy-p5.48xlarge")
    quick, medium, long = (set(judge.evidence_for(level, node)) for level in judge.LEVELS)
    assert quick < medium < long
    assert {"dcgm_diag_2", "efa_loopback"} <= medium - quick and "ib_loopback" not in medium
    assert long - medium == {"dcgm_diag_3"}


def test_google_gpu_nics_are_not_counted_as_infiniband_ports():
    """A3 Ultra's 8 CX-7 RoCE ports show in ibstat with link layer Ethernet, which the InfiniBand count skips: judged
    as `ib`, every healthy node would be drained. Its boot check proves the NICs instead."""
    expect = health.expectations("gcp", "a3-ultragpu-8g")
    assert expect["fabric"] == "none" and expect["fabric_devices"] == 0
    assert catalog.instance_type("gcp", "a3-ultragpu-8g").rdma_interfaces == 8
    assert fabrics.get("gib").boot_check is not None
