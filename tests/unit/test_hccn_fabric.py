"""The HCCN RoCE fabric (the Ascend NPUs' own RoCE ports): the node health judge drains a Lite Server with a port
down (fabrics/hccn/health.py, by the rule of fabrics/hccn/catalog/health_thresholds.csv), and the boot check holds
the golden container until hccn_tool reports every NPU's link UP. hccn_tool is stood in for by a script that answers
as Ascend's npu-exporter parses it ("link status: UP" / "link status: DOWN")."""

from __future__ import annotations

import subprocess

from goldenenv import fabrics
from goldenenv.catalog import health
from goldenenv.fabrics.hccn import HCCN_TOOL
from goldenenv.health import judge
from goldenenv.nodeboot import boot_unit

LITE = "modelarts.bm.npu.arm.8snt9b2.d"


def links(up: int, down: int = 0, unanswered: tuple[int, ...] = ()) -> str:
    """The judge's evidence: `npu <n> ` and hccn_tool's first line per /dev/davinci<n>."""
    lines = []
    for n in range(up + down):
        said = "no answer" if n in unanswered else f"link status: {'UP' if n < up else 'DOWN'}"
        lines.append(f"npu {n} {said}\n")
    return "".join(lines)


def findings(text: str) -> list:
    expect = health.expectations("huawei", LITE)
    return [f for f in judge.judge({"hccn_link.txt": text}, expect, health.rules_document(), "npu-0")
            if f.rule.startswith("hccn_")]


def test_the_catalog_expects_one_roce_link_per_npu_on_a_lite_server():
    expect = health.expectations("huawei", LITE)
    assert (expect["fabric"], expect["fabric_devices"]) == ("hccn", 8)


def test_every_link_up_is_healthy_and_one_down_drains_naming_the_npu():
    assert findings(links(8)) == []
    short = findings(links(7, down=1))
    assert [(f.rule, f.action) for f in short] == [("hccn_links_below_expected", "drain")]
    assert "7 NPU RoCE links UP" in short[0].message and "NPU 7 DOWN" in short[0].message


def test_an_npu_that_does_not_answer_counts_as_down():
    short = findings(links(8, unanswered=(2,)))
    assert [f.rule for f in short] == ["hccn_links_below_expected"] and "NPU 2 no answer" in short[0].message


def test_the_fabric_adds_nothing_to_the_image_and_sets_hccl_not_nccl():
    fabric = fabrics.get("hccn")
    assert fabric.cloud == "huawei" and fabric.boot_check == ("goldenenv-hccn.service", "hccn-check.sh")
    env = fabric.env()
    assert env["HCCL_BUFFSIZE"] == "2048" and 120 <= int(env["HCCL_CONNECT_TIMEOUT"]) <= 7200
    assert not [k for k in env if k.startswith("NCCL_")]


def _boot_check(tmp_path, answers: dict[int, str]):
    """The rendered boot check, run against a stand-in hccn_tool answering per NPU."""
    tool = tmp_path / "hccn_tool"
    cases = "".join(f"  {n}) echo '{said}' ;;\n" for n, said in answers.items())
    tool.write_text(f"#!/bin/bash\n# hccn_tool -i <n> -link -g\ncase \"$2\" in\n{cases}  *) exit 1 ;;\nesac\n")
    tool.chmod(0o755)
    ready = tmp_path / "ready" / "goldenenv-hccn.ready"
    unit = boot_unit("goldenenv-hccn.service", "hccn-check.sh", {"mtu": 1500, "interfaces": 8, "host_mounts": []})
    script = unit.script.content.replace(HCCN_TOOL, str(tool)).replace(
        "/run/goldenenv/goldenenv-hccn.ready", str(ready))
    path = tmp_path / "hccn-check.sh"
    path.write_text(script)
    run = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=30)
    return run, ready


def test_the_boot_check_passes_with_every_link_up_and_leaves_its_ready_marker(tmp_path):
    run, ready = _boot_check(tmp_path, {n: "link status: UP" for n in range(8)})
    assert run.returncode == 0 and "8 NPU RoCE links UP" in run.stdout and ready.exists()


def test_the_boot_check_fails_naming_the_npu_whose_link_is_down(tmp_path):
    run, ready = _boot_check(tmp_path, {**{n: "link status: UP" for n in range(8)}, 5: "link status: DOWN"})
    assert run.returncode == 1 and "7 of 8 NPU RoCE links UP" in run.stdout and "NPU 5: DOWN" in run.stdout
    assert not ready.exists()
