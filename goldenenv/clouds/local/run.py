"""Run one distributed command on every node of the local cluster, through torchrun's c10d rendezvous."""

from __future__ import annotations

import uuid

from goldenenv.nodeboot import MASTER_PORT
from goldenenv.streams import RANK_ENV, RUN_MARKER, Job, Line, RunResult, stream_until_first_failure

NODE_ENV = {"GLOO_SOCKET_IFNAME": "eth0", **RANK_ENV}
"""gloo on the cluster network's interface; one thread per rank on small CPU nodes."""


def torchrun_command(command: list[str], nodes: int, procs: int, master: str, local_addr: str, run_id: str) -> list[str]:
    """torchrun on one node: c10d rendezvous at the first node, the command run as given, ranks prefixed."""
    return [
        "torchrun", f"--nnodes={nodes}", f"--nproc-per-node={procs}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={master}:{MASTER_PORT}", f"--rdzv-id={run_id}",
        f"--local-addr={local_addr}", "--tee=3", "--max-restarts=0", "--no-python", *command,
    ]


def run_on_nodes(client, containers: list, ips: list[str], procs: int, script: list[str],
                 env: dict[str, str], on_line: Line, raw: bool = False, user: str = "") -> RunResult:
    """Start the command on every node at once, stream `[node-i]`-prefixed lines, wait for all."""
    run_id = uuid.uuid4().hex[:8]
    environment = {**env, **NODE_ENV, RUN_MARKER: run_id}

    def command(index: int) -> list[str]:
        return script if raw else torchrun_command(script, len(containers), procs, ips[0], ips[index], run_id)

    jobs = {f"node-{i}": _exec(client, container, command(i), environment, user)
            for i, container in enumerate(containers)}

    def stop() -> None:
        for container in containers:
            _stop_run(client, container, run_id, user)

    return stream_until_first_failure(jobs, on_line, stop)


def _exec(client, container, command: list[str], environment: dict[str, str], user: str = "") -> Job:
    """One node's part of the run: `docker exec` of the command (as `user`; "": the container's), its output passed
    on line by line."""

    def run(emit) -> int:
        exec_id = client.api.exec_create(container.id, command, environment=environment, workdir="/home/trainer",
                                         user=user)["Id"]
        pending = ""
        for chunk in client.api.exec_start(exec_id, stream=True):
            pending += chunk.decode(errors="replace")
            *complete, pending = pending.split("\n")
            for text in complete:
                emit(text)
        if pending:
            emit(pending)
        code = client.api.exec_inspect(exec_id)["ExitCode"]
        return 137 if code is None else code  # None: the node went away mid-run

    return run


def _stop_run(client, container, run_id: str, user: str = "") -> None:
    """Kill this run's agent and workers on a node (they carry the run marker in their environment), as the user
    that started them: only that user may read their /proc/PID/environ (the container has no CAP_SYS_PTRACE)."""
    script = (f'for p in /proc/[0-9]*; do grep -qsz "^{RUN_MARKER}={run_id}$" "$p/environ" '
              '&& kill -9 "${p#/proc/}" 2>/dev/null; done; true')
    try:
        exec_id = client.api.exec_create(container.id, ["sh", "-c", script], user=user)["Id"]
        client.api.exec_start(exec_id)
    except Exception:  # noqa: BLE001 - the node may be gone already (a drill kills one)
        pass
