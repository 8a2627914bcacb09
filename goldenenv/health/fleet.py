"""`goldenenv health` on the user's machine: collect every node's evidence into one saved folder, then judge it.

Collecting runs the image's own collector (`goldenenv-health collect`, judge.py) on each node, through the path
`validate` uses (`docker exec` locally; ssh, then `docker exec` into the golden container, on clouds), and brings
the evidence files back as a tar stream into `<project>/.goldenenv/health/<stack>/<UTC time>/<node>/`, with the
node's expectations beside them. Judging reads such a folder, whether just collected or given with `--from`
(a post-mortem, a recording): the same rules, from this machine's catalog, judge both.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from goldenenv.catalog import health
from goldenenv.health import judge

EXPECT_FILE = "expect.json"
COLLECT_TIMEOUT_S = {"quick": 90, "medium": 900, "long": 2400}
"""How long one node's collection may take, per level (DCGM level 2 takes minutes, level 3 a quarter hour)."""
NODE_HEALTH = "/etc/goldenenv/health"
"""On a node: expect.json (what it should have, written at its start from the catalog) and, where a test or a
post-mortem puts one, recorded/ (evidence that stands in for the hardware); the Slurm health check reads the same."""
NODE_SCRIPT = (f'h=${{GOLDENENV_NODE_HEALTH:-{NODE_HEALTH}}}; d=$(mktemp -d) && '
               'if [ -d "$h/recorded" ]; then cp -R "$h/recorded/." "$d"; '
               'else goldenenv-health collect --level "$1" --expect /dev/stdin --out "$d" >&2; fi && '
               'if [ -s "$h/expect.json" ]; then cp "$h/expect.json" "$d/expect.json"; fi && '
               'tar -C "$d" -cf - . && rm -rf "$d"')
"""What runs on a node: the collector (expectations on stdin) or the recorded evidence, and the node's own
expectations when it has them; all of it comes back as a tar stream."""


STAGED_GPU_BUS = "00000000:64:00.0"
"""The PCI address of the GPU a staged error names (a node of the local stack has none of its own)."""


def staged_gpu_error(code: int, when: datetime, driver: str = "570.86.15") -> dict[str, bytes]:
    """A node's health files (expect.json and recorded/) for one GPU whose kernel log has just logged XID `code`:
    what the drill puts on a local node in place of hardware, read by the same collector and judge as a real GPU's
    evidence. The line is the driver's own form (`NVRM: Xid (PCI:0000:64:00): 94, pid=..., ...`), stamped `when`."""
    bus = judge.pci_key(STAGED_GPU_BUS)
    stamp = when.strftime("%b %d %H:%M:%S")
    expect = dict(health.NO_GPU, gpus=1)
    return {
        EXPECT_FILE: json.dumps(expect).encode(),
        "recorded/nvidia_smi_gpus.csv": f"0, {STAGED_GPU_BUS}, NVIDIA H100 80GB HBM3, {driver}, 0\n".encode(),
        "recorded/nvidia_smi_remapped_rows.csv": (", ".join(judge.REMAP_FIELDS) + f"\n{STAGED_GPU_BUS}, 0, 0, No, "
                                                  "No\n").encode(),
        "recorded/kernel.log": (f"{stamp} node kernel: NVRM: Xid (PCI:{bus}): {code}, pid={int(when.timestamp()) % 99991}"
                                ", name=python3, staged by goldenenv drill --gpu-error\n").encode(),
    }


class HealthInputError(ValueError):
    """A folder or expectation that cannot be judged; the message names it and says what would do."""


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    findings: tuple[judge.Finding, ...]

    @property
    def worst(self) -> str | None:
        return judge.worst(self.findings)

    @property
    def fails(self) -> bool:
        return self.worst in judge.FAILING_ACTIONS


def judge_folder(folder: Path, default_expect: Mapping | None = None) -> list[NodeVerdict]:
    """Judge saved evidence: one node's files (the folder names the node), or one sub-folder per node. Each node's
    expect.json says what it should have; default_expect stands in where a node has none."""
    if not folder.is_dir():
        raise HealthInputError(f"--from {folder}: no such folder")
    nodes = [folder] if _holds_evidence(folder) else sorted(p for p in folder.iterdir() if p.is_dir())
    if not nodes:
        raise HealthInputError(f"--from {folder}: holds no evidence files ({', '.join(sorted(_names())[:3])}, ...) "
                               "and no node folders of them")
    rules = health.rules_document()
    return [_judge_node(node, rules, default_expect) for node in nodes]


def _judge_node(folder: Path, rules: dict, default_expect: Mapping | None) -> NodeVerdict:
    expect_path = folder / EXPECT_FILE
    if expect_path.is_file():
        try:
            expect = judge.check_expectations(json.loads(expect_path.read_text()))
        except ValueError as e:
            raise HealthInputError(f"{expect_path}: {e}") from None
    elif default_expect is not None:
        expect = dict(default_expect)
    else:
        raise HealthInputError(f"{folder}: no {EXPECT_FILE}; write what the node should have there "
                               "(gpus, fabric, fabric_devices, nvlinks_per_gpu, nvswitch) or give -s STACK")
    evidence = {name: text for name, text in judge.read_evidence(str(folder)).items() if name != EXPECT_FILE}
    return NodeVerdict(folder.name, tuple(judge.judge(evidence, expect, rules, folder.name)))


def _names() -> set[str]:
    return {spec.file for spec in judge.EVIDENCE.values()}


def _holds_evidence(folder: Path) -> bool:
    known = _names() | {name + judge.ERROR_SUFFIX for name in _names()} | {EXPECT_FILE}
    return any(p.name in known for p in folder.iterdir() if p.is_file())


Transport = Callable[[list[str], bytes, int], bytes]
"""Runs argv with stdin, returns stdout; raises RuntimeError saying what failed."""
Reach = Callable[[list[str]], list[str]]
"""A node's command -> the argv that runs it there from this machine."""


def run_argv(argv: list[str], data: bytes, timeout_s: int) -> bytes:
    try:
        done = subprocess.run(argv, input=data, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no answer within {timeout_s} s from {shlex.join(argv[:4])} ...") from None
    if done.returncode:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-400:]
        raise RuntimeError(f"exit {done.returncode} from {shlex.join(argv[:4])} ...: {said}")
    return done.stdout


CONTAINER_EXEC = ("docker", "exec", "-i", "--user", "root")
"""Into a node's golden container as root, stdin open: the evidence commands read what only root may (kernel log)."""


def node_command(level: str) -> list[str]:
    """What runs in a node's golden container for `level`."""
    return ["sh", "-c", NODE_SCRIPT, "goldenenv-health", level]


def local_node(container: str) -> Reach:
    """A local node container, through the machine's Docker engine."""
    return lambda command: [*CONTAINER_EXEC, container, *command]


def ssh_node(ssh, host: str, container: str = "goldenenv") -> Reach:
    """A cloud node over ssh (remote.Ssh: config, key), then into its golden container."""
    return lambda command: ssh.argv(host, shlex.join([*CONTAINER_EXEC, container, *command]))


def collect(nodes: Mapping[str, Reach], expects: Mapping[str, Mapping], level: str, out: Path,
            transport: Transport = run_argv) -> dict[str, str]:
    """Collect `level` on every node (name -> how to reach it) into out/<node>/ with its expect.json; returns the
    nodes that could not be reached, with why (their folders hold an `unreachable.error`)."""
    failed: dict[str, str] = {}
    for node, reach in nodes.items():
        folder = out / node
        folder.mkdir(parents=True, exist_ok=True)
        (folder / EXPECT_FILE).write_text(json.dumps(dict(expects[node]), sort_keys=True) + "\n")
        try:
            stream = transport(reach(node_command(level)), json.dumps(dict(expects[node])).encode(),
                               COLLECT_TIMEOUT_S[level])
            _unpack(stream, folder)
        except (RuntimeError, tarfile.TarError) as e:
            failed[node] = str(e)
            (folder / f"unreachable{judge.ERROR_SUFFIX}").write_text(f"{e}\n")
    return failed


def _unpack(stream: bytes, folder: Path) -> None:
    """The evidence files of a node's tar stream: plain files with plain names only, nothing else is written. The
    node's own expect.json, when it sent one, replaces this machine's (the node states what it is)."""
    with tarfile.open(fileobj=io.BytesIO(stream)) as archive:
        for member in archive.getmembers():
            name = Path(member.name).name
            if member.isfile() and name not in ("", ".", "..") and Path(member.name).parent in (Path("."), Path("")):
                (folder / name).write_bytes(archive.extractfile(member).read())


def saved_folder(root: Path, stack: str, now: datetime | None = None) -> Path:
    """Where one collection is kept: <root>/.goldenenv/health/<stack>/<UTC time>/ (post-mortems read it back)."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return root / ".goldenenv" / "health" / stack / stamp
