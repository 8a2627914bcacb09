"""One distributed run, seen from here: every node's output streamed with its name, and the first failure stopping
every node. Shared by the local cluster (`docker exec` into node containers) and cloud nodes (`ssh`)."""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

RUN_MARKER = "GOLDENENV_RUN"
"""Every process of a run carries RUN_MARKER=<run id> in its environment, so stopping a node can find them all."""
RANK_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}
"""What the ranks of goldenenv's own runs see (a local cluster's run, validate's all-reduce on any node): one thread
per rank on small nodes, lines as they are printed, torch's C++ log at errors only."""
WORKER_FAILED = "failed (exitcode:"
"""What torch elastic logs when a worker exits non-zero."""

Line = Callable[[str, str], None]
"""on_line(node, text)"""
Job = Callable[[Callable[[str], None]], int]
"""One node's part of a run: job(emit) passes each output line to emit, and returns the exit code."""


TEE_PREFIX = re.compile(r"\[[A-Za-z_][\w-]*?\d+\]:")
"""What torchrun's --tee puts before each worker line: [<role><local rank>]: ("[default3]:")."""


class TeeLines:
    """One node's torchrun output as whole lines per rank.

    torchrun's tee tails each worker's log file by readline(), which at the end of the file hands back a part of a
    line; it writes that part with its prefix and the rest later, as its own prefixed piece. A worker whose print
    wrote "rank 3" and then "\n" (an unbuffered stdout does) while another rank's line came through the same
    stdout reads "[default3]:rank 3[default2]:rank 2" then "[default3]:". This joins each rank's pieces back into
    its line: a piece that another rank's prefix follows on the same line is unfinished and waits for that rank's
    next piece."""

    def __init__(self, emit: Callable[[str], None]):
        self.emit = emit
        self.pending: dict[str, str] = {}

    def __call__(self, text: str) -> None:
        starts = [m.start() for m in TEE_PREFIX.finditer(text)]
        if not starts or (starts == [0] and not self.pending):
            self.emit(text)
            return
        if starts[0] > 0:
            self.emit(text[:starts[0]])
        pieces = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)])]
        for n, piece in enumerate(pieces):
            prefix = TEE_PREFIX.match(piece).group(0)
            body = self.pending.pop(prefix, "") + piece[len(prefix):]
            if n < len(pieces) - 1:
                self.pending[prefix] = body
            else:
                self.emit(prefix + body)

    def flush(self) -> None:
        for prefix, body in self.pending.items():
            self.emit(prefix + body)
        self.pending.clear()


@dataclass(frozen=True)
class RunResult:
    exit_codes: dict[str, int]
    first_failure: str | None = None
    """The node where a rank failed first; the run was then stopped everywhere."""

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.exit_codes.values())


def stream_until_first_failure(jobs: dict[str, Job], on_line: Line, stop: Callable[[], None],
                               idle: Callable[[], None] | None = None, idle_s: float = 0.5) -> RunResult:
    """Run every node's job at once, pass on its lines as they come, and at the first failure (a non-zero exit, or
    a worker that torch elastic reports failed) call `stop` once; wait for every job to end. `idle`, when given, is
    called whenever no line came for `idle_s` seconds."""
    lines: queue.Queue = queue.Queue()
    codes: dict[str, int] = {}

    def run(node: str, job: Job) -> None:
        joined = TeeLines(lambda text: lines.put((node, text)))
        try:
            codes[node] = job(joined)
        finally:
            joined.flush()
            lines.put((node, None))

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in jobs.items()]
    for thread in threads:
        thread.start()
    finished, stopped = 0, None
    while finished < len(threads):
        try:
            node, text = lines.get(timeout=idle_s if idle else None)
        except queue.Empty:
            idle()
            continue
        if text is None:
            finished += 1
            failed = bool(codes.get(node))
        else:
            on_line(node, text)
            failed = WORKER_FAILED in text
        if failed and not stopped:
            # fail fast: a failed rank leaves the other agents waiting out torchrun's 300 s exit barrier
            stopped = node
            stop()
    for thread in threads:
        thread.join()
    return RunResult(codes, stopped)
