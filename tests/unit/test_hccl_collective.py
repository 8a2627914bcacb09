"""HCCL's bus-bandwidth reference and benchmark on Ascend: the family record gives hccl_test's all_reduce_test as
Huawei's Lite Server guide runs it, its output is read in nccl-tests' bus-bandwidth convention, and a measured
figure is judged against the 910B rows of busbw_refs (derived, marked unverified) as NCCL's are against theirs."""

from __future__ import annotations

import pytest

from goldenenv import accelerators, catalog
from goldenenv.checks import cluster

SNT9B = "modelarts.bm.npu.arm.8snt9b2.d"
GIB = 1 << 30
OUTPUT = """the minroot_rank is 0
data_size(Bytes):  aveg_time(us):  alg_bandwidth(GB/s):  check_result:
          8            40.12             0.00020        success
  536870912         11184.81            48.00000        success
 1073741824         21474.84            50.00000        success
"""
"""In the shape of the HCCL Performance Tester's result (data_size, aveg_time, alg_bandwidth, check_result:
hiascend HCCLpertest_16_0006); the figures are made up for the test."""


def test_the_ascend_family_runs_hccl_test_as_the_lite_server_guide_does():
    hccl = accelerators.get("ascend").collective
    assert (hccl.name, hccl.test) == ("HCCL", "CANN hccl_test all_reduce_test")
    assert hccl.command(1, 8) == ("mpirun", "-n", "8", "./bin/all_reduce_test", "-b", "8", "-e", "2048M", "-f", "2",
                                  "-p", "8")
    assert hccl.command(2, 8, "node-0:8,node-1:8")[:5] == ("mpirun", "-hosts", "node-0:8,node-1:8", "-n", "16")
    assert accelerators.get("cuda").collective.command is None


def test_alg_bandwidth_is_read_as_bus_bandwidth_for_the_rank_count():
    rows = accelerators.get("ascend").collective.parse(OUTPUT, 16)
    assert [(r.bytes, r.algbw_gbytes) for r in rows] == [(8, 0.0002), (512 << 20, 48.0), (GIB, 50.0)]
    assert rows[-1].busbw_gbytes == pytest.approx(50.0 * 2 * 15 / 16)


@pytest.mark.parametrize("text, ranks, message", [
    ("mpirun: command not found\n", 16, "no hccl_test result rows"),
    (OUTPUT.replace("50.00000        success", "50.00000        failed"), 16, "check_result failed at data_size "
     "1073741824"),
    (OUTPUT, 1, "an all-reduce over 1 NPU has no bus bandwidth"),
])
def test_a_run_that_shows_no_good_bandwidth_is_refused_by_name(text, ranks, message):
    with pytest.raises(ValueError, match=message):
        accelerators.get("ascend").collective.parse(text, ranks)


def test_910b_references_are_marked_unverified_and_judge_a_two_server_run():
    refs = {(r.nodes, r.message_bytes): r for r in catalog.busbw_references() if r.instance_type == SNT9B}
    assert {key: r.busbw_gbytes_per_s for key, r in refs.items()} == {(1, GIB): 100, (2, GIB): 20}
    assert all(r.source.startswith("(unverified)") and r.kind == "reference" for r in refs.values())
    ok, verdict = cluster.busbw_verdict(SNT9B, 2, 46.9, 0.8, message_bytes=GIB)
    assert ok and "20 GB/s for 2 x modelarts.bm.npu.arm.8snt9b2.d" in verdict
    ok, verdict = cluster.busbw_verdict(SNT9B, 2, 12.0, 0.8, message_bytes=GIB)
    assert not ok and "needs 16.0 GB/s" in verdict
