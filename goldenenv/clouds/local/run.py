"""Run one distributed command on every node of the local cluster, through torchrun's c10d rendezvous."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from goldenenv.nodeboot import MASTER_PORT

NODE_ENV = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}
"""gloo on the cluster network's interface; one thread per rank on small CPU nodes."""

RUN_MARKER = "GOLDENENV_RUN"
WORKER_FAILED = "failed (exitcode:"
"""What torch elastic logs when a worker exits non-zero."""

Line = Callable[[str, str], None]
"""on_line(node, text)"""


@dataclass(frozen=True)
class RunResult:
    exit_codes: dict[str, int]
    first_failure: str | None = None
    """The node where a rank failed first; the run was then stopped everywhere."""

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.exit_codes.values())


def torchrun_command(command: list[str], nodes: int, procs: int, master: str, local_addr: str, run_id: str) -> list[str]:
    """torchrun on one node: c10d rendezvous at the first node, the command run as given, ranks prefixed."""
    return [
        "torchrun", f"--nnodes={nodes}", f"--nproc-per-node={procs}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={master}:{MASTER_PORT}", f"--rdzv-id={run_id}",
        f"--local-addr={local_addr}", "--tee=3", "--max-restarts=0", "--no-python", *command,
    ]


def run_on_nodes(client, containers: list, ips: list[str], procs: int, script: list[str],
                 env: dict[str, str], on_line: Line, raw: bool = False) -> RunResult:
    """Start the command on every node at once, stream `[node-i]`-prefixed lines, wait for all."""
    run_id = uuid.uuid4().hex[:8]
    lines: queue.Queue = queue.Queue()
    codes: dict[str, int] = {}

    def one(index: int, container) -> None:
        node = f"node-{index}"
        command = script if raw else torchrun_command(script, len(containers), procs, ips[0], ips[index], run_id)
        exec_id = client.api.exec_create(container.id, command, environment={**env, **NODE_ENV, RUN_MARKER: run_id},
                                         workdir="/home/trainer")["Id"]
        pending = ""
        for chunk in client.api.exec_start(exec_id, stream=True):
            pending += chunk.decode(errors="replace")
            *complete, pending = pending.split("\n")
            for text in complete:
                lines.put((node, text))
        if pending:
            lines.put((node, pending))
        code = client.api.exec_inspect(exec_id)["ExitCode"]
        codes[node] = 137 if code is None else code  # None: the node went away mid-run
        lines.put((node, None))

    threads = [threading.Thread(target=one, args=(i, c), daemon=True) for i, c in enumerate(containers)]
    for t in threads:
        t.start()
    finished = 0
    stopped: str | None = None
    while finished < len(threads):
        node, text = lines.get()
        if text is None:
            finished += 1
            failed = bool(codes.get(node))
        else:
            on_line(node, text)
            failed = WORKER_FAILED in text
        if failed and not stopped:
            # fail fast: a failed rank leaves the other agents waiting out torchrun's 300 s exit barrier
            stopped = node
            for container in containers:
                _stop_run(client, container, run_id)
    for t in threads:
        t.join()
    return RunResult(codes, stopped)


def _stop_run(client, container, run_id: str) -> None:
    """Kill this run's agent and workers on a node (they carry the run marker in their environment)."""
    script = (f'for p in /proc/[0-9]*; do grep -qsz "^{RUN_MARKER}={run_id}$" "$p/environ" '
              '&& kill -9 "${p#/proc/}" 2>/dev/null; done; true')
    try:
        exec_id = client.api.exec_create(container.id, ["sh", "-c", script])["Id"]  # same user: /proc/*/environ is readable
        client.api.exec_start(exec_id)
    except Exception:  # noqa: BLE001 - the node may be gone already (a drill kills one)
        pass
