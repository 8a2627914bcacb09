"""One run on every node: lines passed on by node, the first failure stops every node once; the local cluster's
`docker exec` jobs (ssh nodes: test_remote.py)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from goldenenv.clouds.local.run import run_on_nodes
from goldenenv.streams import RUN_MARKER, stream_until_first_failure

FAILED_WORKER = "torch.distributed.elastic ... failed (exitcode: 3) local_rank: 1"


def job(lines: list[str], code: int, hold: threading.Event | None = None):
    """A node that prints `lines`, then (after `hold` is set, when given) exits with `code`."""

    def run(emit) -> int:
        for line in lines:
            emit(line)
        if hold is not None:
            hold.wait(10)
        return code

    return run


def test_lines_come_by_node_in_order_and_a_clean_run_stops_nothing():
    seen, stops = [], []
    result = stream_until_first_failure({"node-0": job(["a", "b"], 0), "node-1": job(["c"], 0)},
                                        lambda n, t: seen.append((n, t)), lambda: stops.append(1))
    assert result.ok and result.first_failure is None and not stops
    assert [t for n, t in seen if n == "node-0"] == ["a", "b"] and ("node-1", "c") in seen
    assert result.exit_codes == {"node-0": 0, "node-1": 0}


def test_a_ranks_line_torchrun_tee_split_around_another_ranks_line_arrives_whole():
    """torchrun's tee reads a worker's log by readline(), which hands back "rank 3" without its newline when the
    worker's unbuffered print has written only that yet; another rank's line then follows on the same stdout line.
    Seen once on the local cluster as a lost rank (e2e test_run_prefixes_output_by_node_and_rank...)."""
    seen = []
    result = stream_until_first_failure(
        {"node-1": job(["[default3]:rank 3[default2]:rank 2", "[default3]:", "[default2]:done"], 0)},
        lambda n, t: seen.append(t), lambda: None)
    assert result.ok
    assert seen == ["[default2]:rank 2", "[default3]:rank 3", "[default2]:done"]


def test_lines_without_a_rank_prefix_and_an_unfinished_piece_at_the_end_are_passed_on():
    seen = []
    stream_until_first_failure(
        {"node-0": job(["INFO agent started", "[default0]:", "warn [default1]:half[default0]:x"], 0)},
        lambda n, t: seen.append(t), lambda: None)
    assert seen == ["INFO agent started", "[default0]:", "warn ", "[default0]:x", "[default1]:half"]


def test_a_failed_worker_line_stops_every_node_once_before_any_exit():
    hold = threading.Event()
    stops = []
    result = stream_until_first_failure(
        {"node-0": job(["step 1"], 0, hold), "node-1": job([FAILED_WORKER], 1, hold)},
        lambda n, t: None, lambda: (stops.append(1), hold.set()))
    assert stops == [1], "one stop, however many nodes then fail"
    assert result.first_failure == "node-1" and result.exit_codes == {"node-0": 0, "node-1": 1} and not result.ok


def test_a_non_zero_exit_is_a_failure_too():
    stops = []
    result = stream_until_first_failure({"node-0": job([], 2)}, lambda n, t: None, lambda: stops.append(1))
    assert stops == [1] and result.first_failure == "node-0" and result.exit_codes == {"node-0": 2}


def test_idle_is_called_while_no_line_comes():
    hold, idles = threading.Event(), []
    start = time.monotonic()
    stream_until_first_failure({"node-0": job([], 0, hold)}, lambda n, t: None, lambda: None,
                               idle=lambda: (idles.append(1), hold.set()), idle_s=0.05)
    assert idles and time.monotonic() - start < 5


class FakeDocker:
    """docker's low-level exec API over node containers: each run's output as chunks, then an exit code."""

    def __init__(self, outputs: dict[str, tuple[list[bytes], int | None]]):
        self.outputs, self.execs, self.stopped = outputs, {}, []
        self.api = self

    def exec_create(self, container_id, command, **kwargs):
        exec_id = f"{container_id}-{len(self.execs)}"
        self.execs[exec_id] = (container_id, command, kwargs)
        return {"Id": exec_id}

    def exec_start(self, exec_id, stream=False):
        container_id, command, _ = self.execs[exec_id]
        if not stream:
            self.stopped.append((container_id, command[-1]))
            return b""
        return iter(self.outputs[container_id][0])

    def exec_inspect(self, exec_id):
        return {"ExitCode": self.outputs[self.execs[exec_id][0]][1]}


def nodes(*ids: str) -> list:
    return [SimpleNamespace(id=i) for i in ids]


def test_local_nodes_stream_whole_lines_across_chunks_and_a_clean_run_stops_nothing():
    docker = FakeDocker({"c0": ([b"[default0]:st", b"ep 1\n[default0]:do", b"ne"], 0), "c1": ([b"ok\n"], 0)})
    seen = []
    result = run_on_nodes(docker, nodes("c0", "c1"), ["10.0.0.2", "10.0.0.3"], 1, ["python", "t.py"], {"A": "1"},
                          lambda n, t: seen.append((n, t)))
    assert result.ok and result.first_failure is None and not docker.stopped
    assert [t for n, t in seen if n == "node-0"] == ["[default0]:step 1", "[default0]:done"]
    assert [t for n, t in seen if n == "node-1"] == ["ok"]
    _, command, kwargs = next(e for e in docker.execs.values() if e[0] == "c1")
    assert command[0] == "torchrun" and "--local-addr=10.0.0.3" in command and "--rdzv-endpoint=10.0.0.2:29500" in command
    assert command[-2:] == ["python", "t.py"] and kwargs["environment"]["A"] == "1"
    assert RUN_MARKER in kwargs["environment"] and kwargs["workdir"] == "/home/trainer"


def test_a_local_node_that_went_away_reads_137_and_stops_every_node():
    docker = FakeDocker({"c0": ([b"step 1\n"], 0), "c1": ([], None)})
    result = run_on_nodes(docker, nodes("c0", "c1"), ["10.0.0.2", "10.0.0.3"], 1, ["true"], {}, lambda n, t: None,
                          raw=True)
    assert result.exit_codes == {"node-0": 0, "node-1": 137} and result.first_failure == "node-1"
    run_id = next(iter(docker.execs.values()))[2]["environment"][RUN_MARKER]
    assert sorted(c for c, _ in docker.stopped) == ["c0", "c1"]
    assert all(f"^{RUN_MARKER}={run_id}$" in script for _, script in docker.stopped)
