"""One distributed command on cloud nodes over plain `ssh`: the transport `validate` uses (bastion or SSM ProxyCommand
in an ssh config), torchrun inside each node's golden container, first failure stops every node.

A node's job runs under `setsid` with a pidfile, and every process of it carries a run marker in its environment
(torch elastic starts its workers in sessions of their own), so stopping a node kills the agent's process group and
every straggler with the marker. Stopping happens on the node (through the same exec prefix): killing the local
`ssh`, or a `docker exec` client, would leave the job running there.
"""

from __future__ import annotations

import io
import shlex
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from goldenenv.streams import RUN_MARKER, Job, Line, RunResult, stream_until_first_failure

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4")
"""Never prompt (a run has no terminal); notice a node that went away within a minute."""
STOP_GRACE_S = 3
"""Between SIGTERM (torchrun forwards it to its workers) and SIGKILL of whatever is left."""
REMOTE_TIMEOUT_S = 120
"""One short remote step (stop, address, code sync of a small folder) takes at most this long."""


class RemoteError(RuntimeError):
    """A node could not be reached or a remote step failed; the message names the node."""


@dataclass(frozen=True)
class Host:
    """ssh://user@address[:port]; a bare name may be a Host alias of the ssh config."""

    address: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Host:
        url = urlsplit(text if "://" in text else f"ssh://{text}")
        if url.scheme != "ssh" or not url.hostname:
            raise ValueError(f"{text!r} is not an ssh host: write ssh://user@address[:port]")
        return cls(url.hostname, unquote(url.username) if url.username else None, url.port)

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.address}" if self.user else self.address


@dataclass(frozen=True)
class Ssh:
    """How to reach the nodes: an ssh config (bastion, SSM ProxyCommand, IdentityFile) and/or a key."""

    config: str | None = None
    identity: str | None = None

    def argv(self, host: str, remote: str) -> list[str]:
        target = Host.parse(host)
        return ["ssh", *(["-F", self.config] if self.config else []), *SSH_OPTIONS,
                *(["-i", self.identity] if self.identity else []),
                *(["-p", str(target.port)] if target.port else []), target.destination, remote]


@dataclass(frozen=True)
class Launch:
    """torchrun's rendezvous, as the stack outputs' launchEnv gives it."""

    master_addr: str
    master_port: int
    nnodes: int
    nproc_per_node: int

    @classmethod
    def from_env(cls, env: dict) -> Launch:
        return cls(env["MASTER_ADDR"], int(env["MASTER_PORT"]), int(env["NNODES"]), int(env["NPROC_PER_NODE"]))


@dataclass(frozen=True)
class RemoteRun(RunResult):
    hosts: dict[str, str] = field(default_factory=dict)
    """node-i -> the host it ran on"""

    def describe_failure(self) -> str:
        """Which node failed first, and how every node ended."""
        failed = {n: c for n, c in self.exit_codes.items() if c}
        first = ""
        if self.first_failure:
            first = (f"a rank failed on {self.first_failure} ({self.hosts.get(self.first_failure, '?')}); "
                     "stopped the run on every node. ")
        return first + "exit codes: " + ", ".join(f"{n} {c}" for n, c in sorted(failed.items()))


def prefix_words(exec_prefix: str, stdin: bool = False) -> list[str]:
    """The exec prefix as words; a `docker exec` (plain or through `sudo -n`) that must read stdin gets -i."""
    words = shlex.split(exec_prefix)
    at = 2 if words[:2] == ["sudo", "-n"] else 0
    if stdin and words[at:at + 2] == ["docker", "exec"] and not {"-i", "--interactive"} & set(words):
        words.insert(at + 2, "-i")
    return words


def pidfile(run_id: str) -> str:
    return f"/tmp/{run_id}.pid"


SPOTWATCH = "goldenenv-spotwatch"
"""The golden image's spot-notice watcher (goldenenv/spotwatch.py): it starts torchrun and, when the cloud posts an
interruption notice, has every rank checkpoint and exit cleanly."""


def torchrun_argv(command: list[str], launch: Launch, local_addr: str, run_id: str,
                  spot_cloud: str | None = None) -> list[str]:
    """torchrun on one node: c10d rendezvous at the first node, ranks' lines prefixed ([default0]:), no restarts;
    under the spot watcher when the node is on spot capacity of `spot_cloud`."""
    watch = [SPOTWATCH, "--cloud", spot_cloud, "--"] if spot_cloud else []
    return [
        *watch, "torchrun", f"--nnodes={launch.nnodes}", f"--nproc-per-node={launch.nproc_per_node}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={launch.master_addr}:{launch.master_port}", f"--rdzv-id={run_id}",
        f"--local-addr={local_addr}", "--tee=3", "--max-restarts=0", "--no-python", *command,
    ]


def job_command(argv: list[str], env: dict[str, str], run_id: str, exec_prefix: str) -> str:
    """The remote shell line: in the golden container, a new session whose leader writes the pidfile."""
    variables = [f"{k}={v}" for k, v in {**env, RUN_MARKER: run_id}.items()]
    inner = f"echo $$ > {pidfile(run_id)}; exec env {shlex.join([*variables, *argv])}"
    return shlex.join([*prefix_words(exec_prefix), "setsid", "-w", "sh", "-c", inner])


def stop_command(run_id: str, exec_prefix: str) -> str:
    """TERM the job's process group, then every process with the run marker; KILL what is left."""
    marked = (f'for p in /proc/[0-9]*; do grep -qsz "^{RUN_MARKER}={run_id}$" "$p/environ" '
              '&& kill -{sig} "${{p#/proc/}}" 2>/dev/null; done')
    script = (f'pg=$(cat {pidfile(run_id)} 2>/dev/null) && kill -TERM -- "-$pg" 2>/dev/null; '
              f'{marked.format(sig="TERM")}; sleep {STOP_GRACE_S}; '
              f'[ -n "$pg" ] && kill -KILL -- "-$pg" 2>/dev/null; {marked.format(sig="KILL")}; '
              f'rm -f {pidfile(run_id)}; true')
    return shlex.join([*prefix_words(exec_prefix), "sh", "-c", script])


Spawn = Callable[[list[str]], subprocess.Popen]


def _spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", bufsize=1)


def exit_code(returncode: int) -> int:
    """A local ssh killed by a signal reads as the shell says it: 128 + the signal."""
    return returncode if returncode >= 0 else 128 - returncode


def stream(jobs: dict[str, list[str]], on_line: Line, stop: Callable[[], None], spawn: Spawn = _spawn,
           stop_wait_s: float = 60.0) -> RunResult:
    """Start every node's job at once, pass on its lines, and on the first failure (a non-zero exit, or a worker
    that torch elastic reports failed) stop every node; jobs still streaming `stop_wait_s` later are cut locally."""
    processes = {node: spawn(argv) for node, argv in jobs.items()}
    stopper = threading.Thread(target=stop, daemon=True)
    deadline: float | None = None

    def stop_everywhere() -> None:
        nonlocal deadline
        stopper.start()
        deadline = time.monotonic() + stop_wait_s

    def cut_after_deadline() -> None:
        nonlocal deadline
        if deadline and time.monotonic() > deadline:
            for process in processes.values():
                if process.poll() is None:
                    process.kill()
            deadline = None

    try:
        result = stream_until_first_failure({node: _output(process) for node, process in processes.items()},
                                            on_line, stop_everywhere, idle=cut_after_deadline)
    except KeyboardInterrupt:
        stop()
        for process in processes.values():
            process.kill()
        raise
    if result.first_failure:
        stopper.join(timeout=REMOTE_TIMEOUT_S)
    return result


def _output(process: subprocess.Popen) -> Job:
    """One node's part of the run: the local ssh's output line by line, then its exit code."""

    def read(emit) -> int:
        for text in process.stdout:
            emit(text.rstrip("\n"))
        return exit_code(process.wait())

    return read


def run_job(hosts: list[str], command: list[str], launch: Launch, addresses: list[str], on_line: Line,
            ssh: Ssh = Ssh(), exec_prefix: str = "", env: dict[str, str] | None = None,
            spawn: Spawn = _spawn, run_id: str | None = None, spot_cloud: str | None = None) -> RemoteRun:
    """torchrun with `command` on every host (node-i is hosts[i], rendezvous address addresses[i]); under the
    spot watcher for `spot_cloud`'s interruption notices when given."""
    if len(hosts) != launch.nnodes or len(addresses) != len(hosts):
        raise RemoteError(f"{len(hosts)} hosts and {len(addresses)} addresses for a rendezvous of {launch.nnodes} nodes")
    run_id = run_id or f"goldenenv-{uuid.uuid4().hex[:8]}"
    variables = {"PYTHONUNBUFFERED": "1", **(env or {})}
    jobs = {f"node-{i}": ssh.argv(host, job_command(torchrun_argv(command, launch, addresses[i], run_id, spot_cloud),
                                                    variables, run_id, exec_prefix))
            for i, host in enumerate(hosts)}

    def stop() -> None:
        on_every(hosts, lambda host: _quiet(ssh.argv(host, stop_command(run_id, exec_prefix))))

    result = stream(jobs, on_line, stop, spawn)
    return RemoteRun(result.exit_codes, result.first_failure, {f"node-{i}": h for i, h in enumerate(hosts)})


def _quiet(argv: list[str]) -> None:
    try:
        subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=REMOTE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass  # the node is unreachable: its job dies with it, or with the local ssh cut after stop_wait_s


def on_every(hosts: list[str], step: Callable[[str], object]) -> list:
    """step(host) on every host at once; results in host order. The first host's error is raised after all end."""
    results: list = [None] * len(hosts)
    errors: list[BaseException | None] = [None] * len(hosts)

    def one(index: int) -> None:
        try:
            results[index] = step(hosts[index])
        except Exception as e:  # noqa: BLE001 - raised below, in the caller's thread
            errors[index] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(hosts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for error in errors:
        if error:
            raise error
    return results


def remote_output(host: str, remote: str, ssh: Ssh, data: bytes | None = None) -> str:
    """Run one short remote step; its stdout, or RemoteError naming the host with what it said."""
    try:
        done = subprocess.run(ssh.argv(host, remote), input=data, capture_output=True, timeout=REMOTE_TIMEOUT_S,
                              **({} if data is not None else {"stdin": subprocess.DEVNULL}))
    except subprocess.TimeoutExpired as e:
        raise RemoteError(f"{host}: no answer within {REMOTE_TIMEOUT_S} s to {remote}") from e
    if done.returncode:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-500:]
        raise RemoteError(f"{host}: exit {done.returncode} from {remote}: {said}")
    return done.stdout.decode(errors="replace")


def private_addresses(hosts: list[str], ssh: Ssh, exec_prefix: str = "") -> list[str]:
    """Each node's first address as the node itself sees it (for hosts named by a public address or an alias)."""
    remote = shlex.join([*prefix_words(exec_prefix), "hostname", "-I"])

    def first(host: str) -> str:
        words = remote_output(host, remote, ssh).split()
        if not words:
            raise RemoteError(f"{host}: hostname -I printed no address")
        return words[0]

    return on_every(hosts, first)


def code_archive(folder: Path) -> bytes:
    """The folder as a tar (no __pycache__), paths relative to it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                tar.add(str(path), arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def sync_command(dest: str, exec_prefix: str) -> str:
    """Unpack a tar from stdin into dest, as the golden container's user (who then reads it)."""
    quoted = shlex.quote(dest)
    return shlex.join([*prefix_words(exec_prefix, stdin=True), "sh", "-c",
                       f"mkdir -p {quoted} && tar -x -m --no-same-owner -C {quoted}"])


def sync_code(folder: Path, hosts: list[str], dest: str, ssh: Ssh = Ssh(), exec_prefix: str = "",
              shared: bool = True) -> list[str]:
    """Copy a folder to dest: once to the shared file system (every node mounts it), else to every node.

    Returns the hosts it was written to."""
    if not folder.is_dir():
        raise RemoteError(f"--code {folder}: not a folder")
    targets = hosts[:1] if shared else hosts
    archive = code_archive(folder)
    on_every(targets, lambda host: remote_output(host, sync_command(dest, exec_prefix), ssh, archive))
    return targets
