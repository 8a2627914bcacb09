"""HCCL's all-reduce benchmark, as the cluster check runs it on Ascend nodes and reads what it prints.

CANN ships HCCL's performance tester (hccl_test) as source under the toolkit's tools/hccl_test; Huawei's Lite Server
guide builds it with `make MPI_HOME=... ASCEND_DIR=...` and runs `mpirun -n 8 ./bin/all_reduce_test -b 8 -e 2048M
-f 2 -p 8` on a server (https://support.huaweicloud.com/usermanual-modelarts-lite/usermanual-modelarts-lite-0219.html,
with HCCL_BUFFSIZE=2048; docs/research/huawei.md §4.4). Its result table has data_size (bytes per NPU), aveg_time
(us), alg_bandwidth (GB/s) and check_result (success | failed | NULL), and alg_bandwidth is the ALGORITHM bandwidth,
data size / time (https://www.hiascend.com/document/detail/en/canncommercial/850/devaids/hccltool/
HCCLpertest_16_0006.html). The catalog's references (busbw_refs) are bus bandwidths in nccl-tests' convention, so
the reading converts: busbw = algbw * 2 (n - 1) / n for an all-reduce over n NPUs.
"""

from __future__ import annotations

import re
from typing import NamedTuple

TOOL_DIR = "tools/hccl_test"
"""Where hccl_test's source is, under CANN's toolkit folder (set_env.sh's ASCEND_TOOLKIT_HOME)."""
BUFFSIZE_MB = "2048"
"""HCCL_BUFFSIZE the Lite Server guide sets for the test (MB of each communicator's buffer)."""

_ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+(success|failed|NULL)\s*$", re.MULTILINE | re.IGNORECASE)
"""One result row: data_size, aveg_time, alg_bandwidth, check_result."""


class HcclRow(NamedTuple):
    bytes: int
    """Data per NPU, as hccl_test's data_size."""
    microseconds: float
    algbw_gbytes: float
    check: str
    busbw_gbytes: float
    """alg_bandwidth in nccl-tests' bus-bandwidth convention for the run's NPU count."""


def command(nodes: int, npus_per_node: int, hosts: str = "", max_bytes: str = "2048M") -> tuple[str, ...]:
    """The mpirun argv of an all-reduce over `nodes` servers of `npus_per_node` NPUs, run from the built tool's
    folder (`-p`: NPUs per server; `hosts`: mpirun's -hosts list, host:slots, for more than one server)."""
    ranks = nodes * npus_per_node
    placement = ("-hosts", hosts) if hosts else ()
    return ("mpirun", *placement, "-n", str(ranks), "./bin/all_reduce_test", "-b", "8", "-e", max_bytes, "-f", "2",
            "-p", str(npus_per_node))


def parse(text: str, ranks: int) -> list[HcclRow]:
    """The result rows of an hccl_test run over `ranks` NPUs; ValueError when it printed none, or a row whose
    check_result is failed (its sums were wrong: no bandwidth it shows counts)."""
    if ranks < 2:
        raise ValueError(f"an all-reduce over {ranks} NPU has no bus bandwidth: run it over two or more")
    rows = [HcclRow(int(size), float(time), float(algbw), check, float(algbw) * 2 * (ranks - 1) / ranks)
            for size, time, algbw, check in _ROW.findall(text)]
    if not rows:
        raise ValueError("no hccl_test result rows (data_size aveg_time alg_bandwidth check_result) in this output")
    failed = [r.bytes for r in rows if r.check.lower() == "failed"]
    if failed:
        raise ValueError(f"hccl_test check_result failed at data_size {', '.join(map(str, failed))}: the all-reduce "
                         "gave wrong sums")
    return rows
