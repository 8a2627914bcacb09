#!/usr/bin/env python3
"""Judge a GPU node's health from what its commands print, and say what Slurm should do with the node.

Standard library only, Python 3.8+: golden images ship this file (one file, with the fabric judges bundled in) and
Slurm's HealthCheckProgram runs it on every node (`judge.py --collect quick --evidence DIR --expect FILE --rules
FILE`). The facts it judges against come in as data: `--expect` is `goldenenv.catalog.health.expectations()` for
the node's instance type, `--rules` is `goldenenv.catalog.health.rules_document()` (XID table and thresholds, each
row sourced in the catalog). Nothing here knows a GPU count, an XID's action or a threshold.

Each fabric's checks are its own: goldenenv/fabrics/<name>/health.py (its evidence commands and its judge, standard
library only too), found by discovery beside this file in the package, or bundled into this file when the image's
build copies it (goldenenv.images.bundle). A fabric without one (Google's GPU NICs) is judged as `none`. An
accelerator family whose devices nvidia-smi does not list brings its judge the same way:
goldenenv/accelerators/<family>/health.py (Ascend's reads npu-smi), run on a node that expects its devices (the
expectation its COUNT names, `npus`). NVIDIA's GPUs (nvidia-smi, XIDs, NVLinks, DCGM) are judged here.

Evidence is the stdout of fixed commands (EVIDENCE), one file each; `<file>.error` says why a command did not
produce it. Parsers never raise on odd output: what they cannot read becomes a finding.
Exit status: 0 no failing rule, 1 a failing rule (drain, reset or reboot), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

ACTIONS = ("drain", "reboot", "reset", "restart-job", "monitor")
"""Most to least decisive. drain outranks reboot and reset: a node that needs a person must not come back by
itself after an automatic reboot or GPU reset done for another finding."""
FAILING_ACTIONS = ("drain", "reboot", "reset")
"""Actions that take the node out of the queue (exit status 1)."""
UNKNOWN_XID_ACTION = "monitor"
"""An XID the catalog has no row for is recorded, not acted on: the finding says it is not in the catalog."""

LEVELS = ("quick", "medium", "long")
ERROR_SUFFIX = ".error"
MISSING_BINARY = "missing-binary"
"""First word of an .error file when the command is not installed (optional evidence is then skipped)."""

GPU_FIELDS = ("index", "pci.bus_id", "name", "driver_version", "ecc.errors.uncorrected.volatile.total")
REMAP_FIELDS = ("gpu_bus_id", "remapped_rows.correctable", "remapped_rows.uncorrectable",
                "remapped_rows.pending", "remapped_rows.failure")
NVLINK_COUNTER_CHECKS = {"replay": "nvlink_replay_errors", "recovery": "nvlink_recovery_errors",
                         "crc": "nvlink_crc_errors"}
"""Threshold rows judged on `nvidia-smi nvlink -e`, by the word its counter names carry."""


@dataclass(frozen=True)
class Evidence:
    """One command whose stdout is kept as `file`."""

    file: str
    argv: Tuple[str, ...]
    timeout_s: int
    level: str
    applies: str
    """gpus (GPUs expected) | accelerator=<a family of ACCELERATOR_JUDGES> (its COUNT expected) | fabric=<a fabric
    of FABRIC_JUDGES> | nvlinks (NVLinks expected) | nvswitch (NVSwitch
    board)"""
    required: bool
    """The node must show it: missing is a finding. Optional evidence (DCGM, loopback) counts when present."""
    fallback: Tuple[str, ...] = ()
    """Run instead when the first command is not installed."""


BUNDLED_FABRICS: Dict[str, str] = {}
"""The fabric judges' sources by fabric name where the image's build bundled them into this file; empty in the
package, where each is read from goldenenv/fabrics/<name>/health.py."""
BUNDLED_ACCELERATORS: Dict[str, str] = {}
"""The accelerator families' judges, bundled the same way (goldenenv/accelerators/<family>/health.py)."""
FABRICS_FOLDER = Path(__file__).resolve().parents[1] / "fabrics"
ACCELERATORS_FOLDER = Path(__file__).resolve().parents[1] / "accelerators"


def fabric_judge_files(folder: Path = FABRICS_FOLDER) -> Dict[str, Path]:
    """Each fabric's health judge by fabric name: <folder>/<name>/health.py."""
    return {path.parent.name: path for path in sorted(folder.glob("*/health.py"))}


def accelerator_judge_files(folder: Path = ACCELERATORS_FOLDER) -> Dict[str, Path]:
    """Each accelerator family's health judge by family name: <folder>/<name>/health.py."""
    return {path.parent.name: path for path in sorted(folder.glob("*/health.py"))}


def _load_judges(bundled: Dict[str, str], files: Dict[str, Path], package: str) -> Dict[str, ModuleType]:
    """The judges of a package's folders (bundled, or read from `files`) as modules, in their ORDER."""
    sources = dict(bundled) or {name: path.read_text(encoding="utf-8") for name, path in files.items()}
    modules = []
    for name, source in sources.items():
        module = ModuleType(f"goldenenv_{package}_health_{name}")
        module.NAME = name
        exec(compile(source, f"goldenenv/{package}/{name}/health.py", "exec", dont_inherit=True), module.__dict__)
        modules.append(module)
    return {module.NAME: module for module in sorted(modules, key=lambda m: (m.ORDER, m.NAME))}


FABRIC_JUDGES = _load_judges(BUNDLED_FABRICS, fabric_judge_files(), "fabrics")
"""fabric name -> its health module: EVIDENCE (the commands its nodes run), LOOPBACK (the one of them whose failed
run is a finding, or None), judge(judgement, core) and ORDER."""
FABRICS = (*FABRIC_JUDGES, "none")
_CORE = sys.modules[__name__]
"""This module, as the fabric judges get it (its readers of command output), taken while it loads: run as a script
its name may be gone from sys.modules by the time a node is judged."""
FABRIC_NAMES = {name: getattr(module, name) for module in FABRIC_JUDGES.values() for name in module.__all__}
"""What the fabric judges offer under this module's name (each one's __all__: EFA's fi_info path ...)."""
globals().update(FABRIC_NAMES)
ACCELERATOR_JUDGES = _load_judges(BUNDLED_ACCELERATORS, accelerator_judge_files(), "accelerators")
"""accelerator family -> its health module: COUNT (the expectation holding how many devices the node has),
EVIDENCE, LOOPBACK (None), judge(judgement, core) and ORDER."""
DEVICE_COUNTS = tuple(module.COUNT for module in ACCELERATOR_JUDGES.values())

_NODE_EVIDENCE: Dict[str, Evidence] = {
    "gpus": Evidence("nvidia_smi_gpus.csv", ("nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS),
                                             "--format=csv,noheader"), 10, "quick", "gpus", True),
    "remapped_rows": Evidence("nvidia_smi_remapped_rows.csv",
                              ("nvidia-smi", "--query-remapped-rows=" + ",".join(REMAP_FIELDS), "--format=csv"),
                              10, "quick", "gpus", True),
    "kernel_log": Evidence("kernel.log", ("journalctl", "-k", "-b", "--no-pager"), 10, "quick", "gpus", True,
                           fallback=("dmesg",)),
    "nvlink_status": Evidence("nvlink_status.txt", ("nvidia-smi", "nvlink", "-s"), 10, "quick", "nvlinks", True),
    "nvlink_errors": Evidence("nvlink_errors.txt", ("nvidia-smi", "nvlink", "-e"), 10, "quick", "nvlinks", True),
    "fabric_manager": Evidence("fabric_manager.txt", ("systemctl", "is-active", "nvidia-fabricmanager"), 5,
                               "quick", "nvswitch", True),
}
_DCGM: Dict[str, Evidence] = {
    "dcgm_diag_1": Evidence("dcgm_diag_1.json", ("dcgmi", "diag", "-r", "1", "-j"), 30, "quick", "gpus", False),
    "dcgm_diag_2": Evidence("dcgm_diag_2.json", ("dcgmi", "diag", "-r", "2", "-j"), 900, "medium", "gpus", False),
    "dcgm_diag_3": Evidence("dcgm_diag_3.json", ("dcgmi", "diag", "-r", "3", "-j"), 1800, "long", "gpus", False),
}


def _evidence_table() -> Dict[str, Evidence]:
    """The node's evidence (NVIDIA's, then each other accelerator family's), and DCGM's with each fabric's, level
    by level: a level's fabric evidence before DCGM's at quick (DCGM level 1 runs last: Slurm kills a slow HealthCheckProgram), after it at the longer levels."""
    fabric: Dict[str, Evidence] = {}
    devices: Dict[str, Evidence] = {}
    for kind, folder, judges, target in (("accelerator", "accelerators", ACCELERATOR_JUDGES, devices),
                                         ("fabric", "fabrics", FABRIC_JUDGES, fabric)):
        for owner, module in judges.items():
            for name, spec in module.EVIDENCE.items():
                if name in fabric or name in devices or name in _NODE_EVIDENCE or name in _DCGM:
                    raise RuntimeError(f"goldenenv/{folder}/{owner}/health.py names its evidence "
                                       f"{name!r}, which another judge names too: give it a name of its own")
                target[name] = Evidence(applies=f"{kind}={owner}", **{"fallback": (), **spec})
    table = {**_NODE_EVIDENCE, **devices}
    for level in LEVELS:
        dcgm = {name: spec for name, spec in _DCGM.items() if spec.level == level}
        own = {name: spec for name, spec in fabric.items() if spec.level == level}
        table.update({**own, **dcgm} if level == "quick" else {**dcgm, **own})
    return table


EVIDENCE = _evidence_table()
"""Evidence per level: quick runs in seconds (Slurm kills a HealthCheckProgram after 60 s, so DCGM level 1 runs last
and is optional), medium adds DCGM level 2 and a fabric loopback (minutes: prolog/epilog or a job), long adds DCGM
level 3 (a drained node)."""
DCGM_EVIDENCE = tuple(_DCGM)
LOOPBACK_EVIDENCE = tuple(module.LOOPBACK for module in FABRIC_JUDGES.values() if module.LOOPBACK)


@dataclass(frozen=True)
class Finding:
    node: str
    rule: str
    """The catalog row that decided: a health_thresholds.csv check, or xid_<code>."""
    device: str
    """Short: GPU 3, GPU 2 link 5, mlx5_ib5 port 1, EFA, node, or the evidence file a finding is about."""
    action: str
    message: str
    """One line naming node and device, what was seen and what was expected."""


# Shared small readers

_PCI = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})")
_NOT_AVAILABLE = ("n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]")


def pci_key(text: str) -> Optional[str]:
    """domain:bus:device in one spelling, so nvidia-smi's 00000000:86:00.0 meets the kernel's 0000:86:00."""
    m = _PCI.search(text or "")
    if not m:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}"


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def _count(text: str) -> Optional[int]:
    value = text.strip()
    return int(value) if value.isdigit() else None


def _flag(text: str) -> Optional[bool]:
    value = text.strip().lower()
    if value in ("yes", "1", "true"):
        return True
    if value in ("no", "0", "false"):
        return False
    return None


def _csv_fields(line: str) -> List[str]:
    return [field.strip() for field in line.split(",")]


def _smi_failure(text: str) -> Optional[str]:
    markers = ("nvidia-smi has failed", "no devices were found", "couldn't communicate with the nvidia driver",
               "unable to determine the device handle")
    for line in text.splitlines():
        if any(marker in line.lower() for marker in markers):
            return line.strip()
    return None


# Parsers: each returns what it read and the problems it met, and raises nothing.

@dataclass(frozen=True)
class Gpu:
    index: int
    bus: str
    name: str
    driver: str
    ecc_uncorrected_volatile: Optional[int]


def parse_gpu_list(text: str) -> Tuple[List[Gpu], List[str]]:
    """`nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader` (a header line is skipped if present)."""
    failure = _smi_failure(text)
    if failure:
        return [], [f"nvidia-smi failed: {failure}"]
    gpus, problems = [], []
    for number, line in enumerate(text.splitlines(), 1):
        fields = _csv_fields(line)
        if not line.strip() or fields[0] == "index":
            continue
        bus = pci_key(fields[1]) if len(fields) > 1 else None
        if len(fields) != len(GPU_FIELDS) or not fields[0].isdigit() or bus is None:
            problems.append(f"line {number} is not {len(GPU_FIELDS)} fields ({', '.join(GPU_FIELDS)}): "
                            f"{_one_line(line, 80)!r}")
            continue
        gpus.append(Gpu(int(fields[0]), bus, fields[2], fields[3], _count(fields[4])))
    return gpus, problems


@dataclass(frozen=True)
class RemappedRows:
    bus: str
    correctable: Optional[int]
    uncorrectable: Optional[int]
    pending: Optional[bool]
    failure: Optional[bool]


def parse_remapped_rows(text: str) -> Tuple[List[RemappedRows], List[str]]:
    """`nvidia-smi --query-remapped-rows=<REMAP_FIELDS> --format=csv`: columns by the header when present."""
    failure = _smi_failure(text)
    if failure:
        return [], [f"nvidia-smi failed: {failure}"]
    columns, rows, problems = list(REMAP_FIELDS), [], []
    for number, line in enumerate(text.splitlines(), 1):
        fields = _csv_fields(line)
        if not line.strip():
            continue
        if fields[0] == "gpu_bus_id":
            columns = fields
            continue
        value = dict(zip(columns, fields))
        bus = pci_key(value.get("gpu_bus_id", ""))
        if len(fields) != len(columns) or bus is None:
            problems.append(f"line {number} is not {len(columns)} fields ({', '.join(columns)}): "
                            f"{_one_line(line, 80)!r}")
            continue
        rows.append(RemappedRows(bus, _count(value.get("remapped_rows.correctable", "")),
                                 _count(value.get("remapped_rows.uncorrectable", "")),
                                 _flag(value.get("remapped_rows.pending", "")),
                                 _flag(value.get("remapped_rows.failure", ""))))
    return rows, problems


@dataclass(frozen=True)
class XidEvent:
    code: int
    bus: Optional[str]
    text: str


@dataclass(frozen=True)
class SxidEvent:
    code: int
    switch: str
    bus: Optional[str]
    fatal: bool
    text: str


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+),\s*(.*)")
_SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+), (Fatal|Non-fatal),\s*(.*)",
                   re.IGNORECASE)


def parse_kernel_log(text: str) -> Tuple[List[XidEvent], List[SxidEvent]]:
    """XID lines (`NVRM: Xid (PCI:0000:86:00): 79, pid=..., ...`) and the first line of each SXid report
    (`nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 ...`) from journalctl -k or dmesg."""
    xids, sxids = [], []
    for line in text.splitlines():
        xid = _XID.search(line)
        if xid:
            xids.append(XidEvent(int(xid.group(2)), pci_key(xid.group(1)), _one_line(xid.group(3))))
            continue
        sxid = _SXID.search(line)
        if sxid:
            sxids.append(SxidEvent(int(sxid.group(3)), sxid.group(1), pci_key(sxid.group(2)),
                                   sxid.group(4).lower() == "fatal", _one_line(sxid.group(5))))
    return xids, sxids


_GPU_HEADER = re.compile(r"^GPU (\d+):")
_LINK_LINE = re.compile(r"^\s*Link (\d+):\s*(.*)$")
_SPEED = re.compile(r"^([\d.]+)\s*GB/s")


def parse_nvlink_status(text: str) -> Tuple[Dict[int, Dict[int, Optional[float]]], List[str]]:
    """`nvidia-smi nvlink -s`: per GPU, per link, the speed in GB/s or None when `<inactive>`."""
    status: Dict[int, Dict[int, Optional[float]]] = {}
    gpu = None
    for line in text.splitlines():
        header = _GPU_HEADER.match(line)
        if header:
            gpu = int(header.group(1))
            status[gpu] = {}
            continue
        link = _LINK_LINE.match(line)
        if link and gpu is not None:
            speed = _SPEED.match(link.group(2).strip())
            status[gpu][int(link.group(1))] = float(speed.group(1)) if speed else None
    problems = [] if status or not text.strip() else [f"no 'GPU N:' lines: {_one_line(text, 80)!r}"]
    return status, problems


_ERROR_LINE = re.compile(r"^\s*Link (\d+):\s*(.+?):\s*(\S+)\s*$")


def parse_nvlink_errors(text: str) -> Tuple[Dict[Tuple[int, int], Dict[str, int]], List[str]]:
    """`nvidia-smi nvlink -e`: per (GPU, link) the replay, recovery and CRC counters (CRC kinds summed)."""
    counters: Dict[Tuple[int, int], Dict[str, int]] = {}
    gpu, seen_gpu = None, False
    for line in text.splitlines():
        header = _GPU_HEADER.match(line)
        if header:
            gpu, seen_gpu = int(header.group(1)), True
            continue
        row = _ERROR_LINE.match(line)
        if not row or gpu is None or not row.group(3).isdigit():
            continue
        kind = next((k for k in NVLINK_COUNTER_CHECKS if k in row.group(2).lower()), None)
        if kind:
            link = counters.setdefault((gpu, int(row.group(1))), {})
            link[kind] = link.get(kind, 0) + int(row.group(3))
    problems = [] if seen_gpu or not text.strip() else [f"no 'GPU N:' lines: {_one_line(text, 80)!r}"]
    return counters, problems


def parse_fi_info(text: str) -> Tuple[List[str], List[str]]:
    """`fi_info -p efa`: the distinct EFA devices (a domain's -rdm and -dgrm endpoints are one device)."""
    devices: List[str] = []
    provider, seen_provider = None, False
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "provider":
            provider, seen_provider = value.strip(), True
        elif key == "domain" and provider == "efa":
            device = re.sub(r"-(rdm|dgrm)$", "", value.strip())
            if device not in devices:
                devices.append(device)
    unreadable = text.strip() and not seen_provider and "fi_getinfo" not in text
    return devices, [f"no 'provider:' lines: {_one_line(text, 80)!r}"] if unreadable else []


@dataclass(frozen=True)
class IbPort:
    ca: str
    port: int
    state: str
    physical_state: str
    rate_gbps: Optional[float]
    link_layer: str


def parse_ibstat(text: str) -> Tuple[List[IbPort], List[str]]:
    """`ibstat`: one entry per CA port with State, Physical state, Rate and Link layer."""
    ports: List[IbPort] = []
    ca, fields = None, None

    def close() -> None:
        if ca is not None and fields is not None:
            rate = re.match(r"[\d.]+", fields.get("rate", ""))
            ports.append(IbPort(ca, fields["port"], fields.get("state", ""), fields.get("physical state", ""),
                                float(rate.group(0)) if rate else None, fields.get("link layer", "")))

    for line in text.splitlines():
        new_ca = re.match(r"^CA '([^']+)'", line.strip())
        new_port = re.match(r"^Port (\d+):$", line.strip())
        if new_ca or new_port:
            close()
            fields = {"port": int(new_port.group(1))} if new_port else None
            ca = new_ca.group(1) if new_ca else ca
            continue
        key, _, value = line.strip().partition(":")
        if fields is not None and value:
            fields[key.strip().lower()] = value.strip()
    close()
    unreadable = text.strip() and not ports
    return ports, [f"no \"CA '...'\" with ports: {_one_line(text, 80)!r}"] if unreadable else []


def parse_rdma_statistic(text: str) -> Tuple[Dict[str, Dict[str, int]], List[str]]:
    """`rdma -p statistic show` (one counter per line) or `rdma statistic show` (one line per link)."""
    links: Dict[str, Dict[str, int]] = {}
    tokens = text.split()
    current, problems = None, []
    i = 0
    while i < len(tokens):
        if tokens[i] == "link" and i + 1 < len(tokens):
            current = tokens[i + 1]
            links[current] = {}
            i += 2
            continue
        if current is None or i + 1 >= len(tokens) or not tokens[i + 1].isdigit():
            problems.append(f"unexpected {tokens[i]!r} near token {i}")
            i += 1
            continue
        links[current][tokens[i]] = int(tokens[i + 1])
        i += 2
    return links, problems[:1]


@dataclass(frozen=True)
class RdmaLink:
    device: str
    port: int
    state: str
    physical_state: str


_RDMA_LINK = re.compile(r"(?:^|\s)([\w.-]+)/(\d+):?\s+state\s+(\S+)(?:\s+physical_state\s+(\S+))?")


def parse_rdma_link(text: str) -> Tuple[List[RdmaLink], List[str]]:
    """`rdma link show`: `link erdma_0/1 state ACTIVE physical_state LINK_UP netdev eth0` per line."""
    links = []
    for line in text.splitlines():
        m = _RDMA_LINK.search(line)
        if m:
            links.append(RdmaLink(m.group(1), int(m.group(2)), m.group(3), m.group(4) or ""))
    unreadable = text.strip() and not links
    return links, [f"no 'DEV/PORT state ...' lines: {_one_line(text, 80)!r}"] if unreadable else []


def parse_systemctl_is_active(text: str) -> Tuple[str, List[str]]:
    """`systemctl is-active UNIT`: one word (active, inactive, failed, activating ...)."""
    words = text.split()
    if len(words) != 1:
        return "", [f"expected one word, got {_one_line(text, 80)!r}"]
    return words[0], []


@dataclass(frozen=True)
class DcgmResult:
    test: str
    device: str
    status: str
    """fail | warn"""
    severities: Tuple[int, ...]
    warning: str


def _json_object(text: str) -> Tuple[Optional[dict], str]:
    try:
        data = json.loads(text)
    except ValueError:
        start, end = text.find("{"), text.rfind("}")
        try:
            data = json.loads(text[start:end + 1]) if 0 <= start < end else None
        except ValueError:
            data = None
    if not isinstance(data, dict):
        return None, f"not a JSON object: {_one_line(text, 80)!r}"
    return data, ""


def _as_list(value: object) -> List[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _result_devices(result: dict) -> List[str]:
    """DCGM 4 names an entity (entity_group, entity_id), DCGM 3 lists gpu_ids ("0,1") or a gpu_id."""
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU"))
        return [f"{group} {result['entity_id']}"]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None:
        return ["node"]
    return [f"GPU {gpu.strip()}" for gpu in str(ids).split(",") if gpu.strip()]


def _dcgm_result(test: str, device: str, status: str, result: dict) -> DcgmResult:
    warnings = _as_list(result.get("warnings"))
    severities = tuple(w["error_severity"] for w in warnings if isinstance(w.get("error_severity"), int))
    text = "; ".join(str(w.get("warning", "")) for w in warnings) or str(result.get("warning", ""))
    return DcgmResult(test, device, status, severities, _one_line(text))


def parse_dcgm_diag(text: str) -> Tuple[List[DcgmResult], List[str]]:
    """`dcgmi diag -r N -j`: the failed and warning results per test and entity (DCGM 4's "DCGM Diagnostic"
    and DCGM 3's "DCGM GPU Diagnostic" layouts). A failed test without a failed entity counts for the node."""
    data, problem = _json_object(text)
    if data is None:
        return [], [problem]
    root = data.get("DCGM Diagnostic", data.get("DCGM GPU Diagnostic"))
    if not isinstance(root, dict):
        return [], ["no 'DCGM Diagnostic' object at the top of the JSON"]
    problems = [f"dcgmi runtime error: {_one_line(root['runtime_error'])}"] if root.get("runtime_error") else []
    results: List[DcgmResult] = []
    for category in _as_list(root.get("test_categories")):
        for test in _as_list(category.get("tests")):
            name = str(test.get("name", "?"))
            found = [_dcgm_result(name, device, str(result.get("status", "")).lower(), result)
                     for result in _as_list(test.get("results"))
                     if str(result.get("status", "")).lower() in ("fail", "warn")
                     for device in _result_devices(result)]
            summary = test.get("test_summary")
            summary_status = str(summary.get("status", "")).lower() if isinstance(summary, dict) else ""
            if not found and summary_status in ("fail", "warn"):
                found = [_dcgm_result(name, "node", summary_status, summary)]
            results.extend(found)
    return results, problems


# Judging

def _rank(action: str) -> int:
    return ACTIONS.index(action) if action in ACTIONS else len(ACTIONS)


def worst(findings: Iterable[Finding]) -> Optional[str]:
    """The action that decides the node's fate (see ACTIONS for the order), None without findings."""
    actions = [f.action for f in findings]
    return min(actions, key=_rank) if actions else None


_SLURM_SAFE = re.compile(r"[^A-Za-z0-9 _.,:/()+-]")


def drain_reason(findings: Sequence[Finding], limit: int = 100) -> str:
    """A reason for `scontrol update nodename=X state=drain reason="..."`: the deciding action and its findings,
    at most `limit` characters from a set that needs no quoting inside double quotes (no quote, $, `, \\, ;)."""
    decider = worst(findings)
    if decider is None:
        return "healthy"
    parts = [f"{f.rule} {f.device}" for f in sorted(findings, key=lambda f: _rank(f.action))
             if f.action == decider]
    reason = _SLURM_SAFE.sub(" ", f"{decider}: {', '.join(parts)}")
    reason = " ".join(reason.split())
    return reason if len(reason) <= limit else reason[:limit - 3].rstrip() + "..."


RESTART_ACTION = "restart-job"
"""The catalog's action for a contained error (XID 94, 13): the node stays in the queue, the job that died on it
starts again (the sbatch wrapper requeues it on this verdict)."""


def node_action(findings: Sequence[Finding]) -> str:
    """What the node needs, in the catalog's words: the deciding action, or none."""
    return worst(findings) or "none"


def report(findings: Sequence[Finding], node: str) -> dict:
    """One node's verdict as `--json` and `goldenenv health --json` print it: a drain_reason only where the action
    takes the node out of the queue (a node kept for a job restart is drained by nobody)."""
    decider = worst(findings)
    verdict = {"node": node, "worst": decider, "action": node_action(findings), "fails": decider in FAILING_ACTIONS}
    if decider in FAILING_ACTIONS:
        verdict["drain_reason"] = drain_reason(findings)
    verdict["findings"] = [asdict(f) for f in findings]
    return verdict


def restart_lines(findings: Sequence[Finding]) -> List[str]:
    """One line per error the catalog says needs the job restarted (`--restart`, read by the sbatch wrapper)."""
    return [_one_line(f"{f.message.split('; expected')[0]} ({f.rule}: {RESTART_ACTION})", 400)
            for f in findings if f.action == RESTART_ACTION]


def not_acted_on(lines: Sequence[str], acted: Path) -> List[str]:
    """The restart lines no restart was made for yet (`acted` holds those that were, one a line), added to `acted`:
    a kernel log keeps an XID until the node reboots, and the job that restarted for it, or the next job on the node,
    must not restart again for the same event (its pid and time make a new event a new line)."""
    try:
        done = set(acted.read_text().splitlines())
    except OSError:
        done = set()
    new = [line for line in lines if line and line not in done]
    if new:
        try:
            with acted.open("a") as out:
                out.writelines(f"{line}\n" for line in new)
        except OSError:
            pass  # a node that cannot remember still restarts, within the job's start limit
    return new


def applies(spec: Evidence, expect: dict) -> bool:
    """Whether the node's expectations call for this evidence (evidence for a fabric it lacks is ignored)."""
    kind, _, value = spec.applies.partition("=")
    if kind == "fabric":
        return expect.get("fabric") == value
    if kind == "accelerator":
        return int(expect.get(ACCELERATOR_JUDGES[value].COUNT, 0)) > 0
    if kind == "nvlinks":
        return int(expect.get("nvlinks_per_gpu", 0)) > 0
    if kind == "nvswitch":
        return bool(expect.get("nvswitch"))
    return kind == "gpus" and int(expect.get("gpus", 0)) > 0


def evidence_for(level: str, expect: dict) -> Dict[str, Evidence]:
    """The evidence a node with these expectations produces at `level` (which includes the lower levels)."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}: use one of {', '.join(LEVELS)}")
    wanted = LEVELS[:LEVELS.index(level) + 1]
    return {name: spec for name, spec in EVIDENCE.items() if spec.level in wanted and applies(spec, expect)}


def check_expectations(expect: object) -> dict:
    """The expectations, or ValueError saying which key is wrong and what would be valid."""
    if not isinstance(expect, dict):
        raise ValueError("expectations must be a JSON object with gpus, fabric, fabric_devices, nvlinks_per_gpu, "
                         "nvswitch (goldenenv.catalog.health.expectations())")
    for key in ("gpus", "fabric_devices", "nvlinks_per_gpu"):
        if not isinstance(expect.get(key), int) or isinstance(expect.get(key), bool) or expect[key] < 0:
            raise ValueError(f"expectations: {key} must be a whole number >= 0, got {expect.get(key)!r}")
    for key in DEVICE_COUNTS:
        if key in expect and (not isinstance(expect[key], int) or isinstance(expect[key], bool) or expect[key] < 0):
            raise ValueError(f"expectations: {key} must be a whole number >= 0, got {expect[key]!r}")
    if expect.get("fabric") not in FABRICS:
        raise ValueError(f"expectations: fabric must be one of {', '.join(FABRICS)}, got {expect.get('fabric')!r}")
    if not isinstance(expect.get("nvswitch"), bool):
        raise ValueError(f"expectations: nvswitch must be true or false, got {expect.get('nvswitch')!r}")
    rate = expect.get("fabric_rate_gbps")
    if rate is not None and (not isinstance(rate, (int, float)) or isinstance(rate, bool)):
        raise ValueError(f"expectations: fabric_rate_gbps must be a number of Gb/s, got {rate!r}")
    return expect


def check_rules(rules: object) -> dict:
    """The rules document, or ValueError saying what is missing (write it with rules_document())."""
    if not isinstance(rules, dict) or not isinstance(rules.get("xid"), dict) \
            or not isinstance(rules.get("thresholds"), dict):
        raise ValueError("rules must be a JSON object with 'xid' and 'thresholds' "
                         "(goldenenv.catalog.health.rules_document())")
    for name, row in list(rules["xid"].items()) + list(rules["thresholds"].items()):
        if not isinstance(row, dict) or row.get("action") not in ACTIONS:
            raise ValueError(f"rules: {name!r} has action {row.get('action') if isinstance(row, dict) else row!r}; "
                             f"valid actions are {', '.join(ACTIONS)}")
    return rules


class _Judgement:
    """The findings of one node, built check by check."""

    def __init__(self, evidence: Dict[str, str], expect: dict, rules: dict, node: str):
        self.evidence, self.expect, self.rules, self.node = evidence, expect, rules, node
        self.findings: List[Finding] = []

    def threshold(self, check: str) -> dict:
        row = self.rules["thresholds"].get(check)
        if row is None:
            raise ValueError(f"rules: no threshold {check!r}; write the rules with "
                             "goldenenv.catalog.health.rules_document()")
        return row

    def exceeds(self, check: str, value: float) -> bool:
        return value > float(self.threshold(check).get("limit", 0))

    def add(self, check: str, device: str, seen: str, expected: str, action: Optional[str] = None) -> None:
        self.findings.append(Finding(self.node, check, device, action or self.threshold(check)["action"],
                                     _one_line(f"{self.node}: {seen}; expected {expected}", 400)))

    def text(self, name: str) -> Optional[str]:
        """The evidence's stdout; None when absent (a finding when the node had to show it)."""
        spec = EVIDENCE[name]
        found = self.evidence.get(spec.file)
        if found is not None:
            return found
        error = self.evidence.get(spec.file + ERROR_SUFFIX, "").strip()
        if spec.required or (error and not error.startswith(MISSING_BINARY)):
            why = _one_line(error, 120) if error else "no file"
            self.add("evidence_missing", spec.file, f"{spec.file} missing ({why})",
                     f"the output of `{' '.join(spec.argv)}`")
        return None

    def unreadable(self, name: str, problems: List[str]) -> None:
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            self.add("evidence_unreadable", EVIDENCE[name].file, f"{EVIDENCE[name].file}: {problems[0]}{more}",
                     f"the output format of `{' '.join(EVIDENCE[name].argv[:3])}`")

    def code_row(self, prefix: str, code: int) -> Optional[str]:
        """The threshold check under `prefix` whose limit is exactly `code` (DCGM severities, XID 154 actions)."""
        for check, row in self.rules["thresholds"].items():
            if check.startswith(prefix) and float(row.get("limit", -1)) == code:
                return check
        return None


def readable(parsed: object, problems: List[str]) -> bool:
    """Whether a count read from evidence means something (not when the parser read nothing but problems)."""
    return bool(parsed) or not problems


def judge_active_rdma_links(j: _Judgement, key: str, prefix: str, rule: str, label: str, noun: str) -> None:
    """A fabric whose devices `rdma link show` lists (eRDMA's erdma_*, HCC's mlx5_bond_*): a finding under `rule`
    when fewer of those starting with `prefix` are ACTIVE than the node's expected fabric_devices."""
    text = j.text(key)
    if text is None:
        return
    links, problems = parse_rdma_link(text)
    j.unreadable(key, problems)
    active = [link.device for link in links if link.device.startswith(prefix) and link.state.upper() == "ACTIVE"]
    expected = j.expect["fabric_devices"]
    if readable(links, problems) and j.exceeds(rule, expected - len(active)):
        j.add(rule, label, f"rdma link show lists {len(active)} ACTIVE {noun} ({', '.join(active) or 'none'})",
              f"{expected} ACTIVE {noun}")


def _gpu_label(bus: Optional[str], by_bus: Dict[str, int]) -> Tuple[str, str]:
    """Short device name and the long one for messages."""
    if bus in by_bus:
        return f"GPU {by_bus[bus]}", f"GPU {by_bus[bus]} (PCI {bus})"
    return f"PCI {bus}", f"GPU at PCI {bus} (not in the nvidia-smi list)"


def _judge_gpus(j: _Judgement) -> Dict[str, int]:
    text = j.text("gpus")
    if text is None:
        return {}
    gpus, problems = parse_gpu_list(text)
    j.unreadable("gpus", problems)
    expected = j.expect["gpus"]
    if readable(gpus, problems) and j.exceeds("gpu_count_below_expected", expected - len(gpus)):
        indices = ", ".join(str(g.index) for g in gpus) or "none"
        j.add("gpu_count_below_expected", "node", f"nvidia-smi lists {len(gpus)} GPUs (indices {indices})",
              f"{expected} GPUs")
    for gpu in gpus:
        if gpu.ecc_uncorrected_volatile is not None and \
                j.exceeds("ecc_uncorrected_volatile", gpu.ecc_uncorrected_volatile):
            j.add("ecc_uncorrected_volatile", f"GPU {gpu.index}",
                  f"GPU {gpu.index} (PCI {gpu.bus}) has {gpu.ecc_uncorrected_volatile} uncorrected volatile ECC "
                  "errors", "none")
    return {gpu.bus: gpu.index for gpu in gpus}


def _judge_remapped_rows(j: _Judgement, by_bus: Dict[str, int]) -> None:
    text = j.text("remapped_rows")
    if text is None:
        return
    rows, problems = parse_remapped_rows(text)
    j.unreadable("remapped_rows", problems)
    for row in rows:
        device, label = _gpu_label(row.bus, by_bus)
        if row.pending and j.exceeds("row_remap_pending", 1):
            j.add("row_remap_pending", device, f"{label} has a row remap pending",
                  "no pending remap (a GPU reset applies it)")
        if row.failure and j.exceeds("row_remap_failure", 1):
            j.add("row_remap_failure", device, f"{label} reports a row remap failure", "no failed remap")
        if row.uncorrectable is not None and j.exceeds("row_remap_uncorrectable", row.uncorrectable):
            j.add("row_remap_uncorrectable", device, f"{label} has {row.uncorrectable} rows remapped for "
                  "uncorrectable errors", f"at most {j.threshold('row_remap_uncorrectable')['limit']}")


def _xid_action(j: _Judgement, event: XidEvent) -> Tuple[str, str, str]:
    """Action, rule and the catalog's words for one XID (XID 154 carries its own recovery action)."""
    row = j.rules["xid"].get(str(event.code))
    if row is None:
        return UNKNOWN_XID_ACTION, f"xid_{event.code}", "not in the catalog"
    name = f"{row.get('name', '')} ({row.get('nvidia_bucket', '')})"
    recovery = re.search(r"to 0x([0-9a-fA-F]+)", event.text)
    derived = j.code_row("xid154_", int(recovery.group(1), 16)) if event.code == 154 and recovery else None
    if derived:
        return j.threshold(derived)["action"], derived, f"{name}, recovery action 0x{recovery.group(1)}"
    return row["action"], f"xid_{event.code}", name


def _judge_kernel_log(j: _Judgement, by_bus: Dict[str, int]) -> None:
    text = j.text("kernel_log")
    if text is None:
        return
    xids, sxids = parse_kernel_log(text)
    seen: Dict[Tuple[int, Optional[str], str], List[XidEvent]] = {}
    for event in xids:
        seen.setdefault((event.code, event.bus, event.text if event.code == 154 else ""), []).append(event)
    for (code, bus, _), events in seen.items():
        action, rule, words = _xid_action(j, events[0])
        device, label = _gpu_label(bus, by_bus)
        j.add(rule, device, f"{label} logged XID {code} {len(events)} time(s) since boot, {words}: "
              f"{events[0].text!r}", "no XID", action=action)
    switches: Dict[Tuple[int, str, bool], List[SxidEvent]] = {}
    for event in sxids:
        switches.setdefault((event.code, event.switch, event.fatal), []).append(event)
    for (code, switch, fatal), events in switches.items():
        check = "sxid_fatal" if fatal else "sxid_nonfatal"
        j.add(check, switch, f"{switch} (PCI {events[0].bus}) logged {'fatal' if fatal else 'non-fatal'} SXid "
              f"{code} {len(events)} time(s) since boot: {events[0].text!r}", "no SXid")


def _judge_nvlinks(j: _Judgement, by_bus: Dict[str, int]) -> None:
    status_text, errors_text = j.text("nvlink_status"), j.text("nvlink_errors")
    expected = j.expect["nvlinks_per_gpu"]
    indices = sorted(by_bus.values()) or list(range(j.expect["gpus"]))
    if status_text is not None:
        status, problems = parse_nvlink_status(status_text)
        j.unreadable("nvlink_status", problems)
        for gpu in indices if readable(status, problems) else []:
            links = status.get(gpu, {})
            active = sum(1 for speed in links.values() if speed is not None)
            if j.exceeds("nvlink_inactive", expected - active):
                down = ", ".join(str(link) for link, speed in sorted(links.items()) if speed is None) or "none listed"
                j.add("nvlink_inactive", f"GPU {gpu}", f"GPU {gpu} has {active} active NVLinks (inactive: {down})",
                      f"{expected} active NVLinks per GPU")
    if errors_text is not None:
        counters, problems = parse_nvlink_errors(errors_text)
        j.unreadable("nvlink_errors", problems)
        for (gpu, link), kinds in sorted(counters.items()):
            for kind, value in sorted(kinds.items()):
                check = NVLINK_COUNTER_CHECKS[kind]
                if j.exceeds(check, value):
                    j.add(check, f"GPU {gpu} link {link}", f"NVLink GPU {gpu} link {link} counts {value} {kind} errors",
                          f"at most {j.threshold(check)['limit']}")


def _judge_fabric_manager(j: _Judgement) -> None:
    text = j.text("fabric_manager")
    if text is None:
        return
    state, problems = parse_systemctl_is_active(text)
    j.unreadable("fabric_manager", problems)
    if state and state != "active":
        j.add("fabric_manager_inactive", "nvidia-fabricmanager",
              f"nvidia-fabricmanager is {state!r} on an NVSwitch board", "active")


def _dcgm_check(j: _Judgement, result: DcgmResult) -> str:
    checks = [check for check in (j.code_row("dcgm_severity_", s) for s in result.severities) if check]
    if checks:
        return min(checks, key=lambda check: _rank(j.threshold(check)["action"]))
    return "dcgm_fail_without_severity" if result.status == "fail" else "dcgm_warn_without_severity"


def _judge_dcgm(j: _Judgement) -> None:
    for name in DCGM_EVIDENCE:
        text = j.text(name)
        if text is None:
            continue
        results, problems = parse_dcgm_diag(text)
        j.unreadable(name, problems)
        level = EVIDENCE[name].argv[3]
        for result in results:
            j.add(_dcgm_check(j, result), result.device, f"DCGM level {level} test {result.test!r} {result.status} "
                  f"on {result.device}: {result.warning or 'no warning text'}", "Pass")


def _judge_loopback(j: _Judgement) -> None:
    for name in LOOPBACK_EVIDENCE:
        spec = EVIDENCE[name]
        error = j.evidence.get(spec.file + ERROR_SUFFIX, "").strip()
        if applies(spec, j.expect) and error and not error.startswith(MISSING_BINARY):
            output = _one_line(j.evidence.get(spec.file, ""), 80)
            j.add("fabric_loopback_failed", j.expect["fabric"].upper(),
                  f"loopback test failed ({_one_line(error, 80)}) {output!r}", "a completed loopback run")


def judge(evidence: Dict[str, str], expect: dict, rules: dict, node: str) -> List[Finding]:
    """Findings about one node from its evidence files (name -> text); [] when healthy.
    ValueError when the expectations or the rules are malformed (not the evidence: that becomes findings)."""
    j = _Judgement(evidence, check_expectations(expect), check_rules(rules), node)
    by_bus: Dict[str, int] = {}
    if applies(EVIDENCE["gpus"], expect):  # a node with no GPU (a local container) has no GPU evidence to show
        by_bus = _judge_gpus(j)
        _judge_remapped_rows(j, by_bus)
        _judge_kernel_log(j, by_bus)
    if applies(EVIDENCE["nvlink_status"], expect):
        _judge_nvlinks(j, by_bus)
    if applies(EVIDENCE["fabric_manager"], expect):
        _judge_fabric_manager(j)
    for module in ACCELERATOR_JUDGES.values():
        if int(expect.get(module.COUNT, 0)) > 0:
            module.judge(j, _CORE)
    if expect["fabric"] in FABRIC_JUDGES:
        FABRIC_JUDGES[expect["fabric"]].judge(j, _CORE)
    _judge_dcgm(j)
    _judge_loopback(j)
    return j.findings


# Collecting evidence on a live node

Runner = Callable[[Sequence[str], int], Tuple[int, str, str]]
"""(argv, timeout_s) -> (exit status, stdout, stderr); raises FileNotFoundError or subprocess.TimeoutExpired."""


def run_command(argv: Sequence[str], timeout_s: int) -> Tuple[int, str, str]:
    done = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s,
                          universal_newlines=True, errors="replace")
    return done.returncode, done.stdout, done.stderr


def _run_one(spec: Evidence, runner: Runner) -> Tuple[Optional[str], Optional[str]]:
    """(stdout or None, error text or None) for one evidence command, trying its fallback when not installed."""
    for argv in (spec.argv, spec.fallback):
        if not argv:
            break
        try:
            status, out, err = runner(argv, spec.timeout_s)
        except FileNotFoundError:
            continue
        except subprocess.TimeoutExpired:
            return None, f"timeout: `{' '.join(argv)}` ran past {spec.timeout_s} s"
        except OSError as error:
            return None, f"cannot run `{argv[0]}`: {error}"
        if status == 127:
            return None, f"{MISSING_BINARY}: {_one_line(err, 200)}"
        return out, (f"exit {status}: {_one_line(err, 300)}" if status != 0 else None)
    return None, f"{MISSING_BINARY}: {spec.argv[0]} not found"


HOST_EVIDENCE_DIR = "/run/goldenenv-host/health"
"""Where a node's golden container finds the evidence only its host can give (the host's goldenenv-health-evidence
unit writes it): the kernel log cannot be read in a container, nor systemd asked about the fabric manager."""
HOST_PROVIDED = ("kernel_log", "fabric_manager")


def collect(level: str, out_dir: str, expect: dict, runner: Runner = run_command,
            host_dir: str = HOST_EVIDENCE_DIR) -> List[str]:
    """Run the evidence commands of `level` that apply to this node, each with its timeout; write stdout to the
    evidence file and the reason for any failure, timeout or missing command to `<file>.error`. Evidence the host
    gives (HOST_PROVIDED, in host_dir) is taken from there. Returns the names of the files written."""
    check_expectations(expect)
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, spec in evidence_for(level, expect).items():
        for stale in (spec.file, spec.file + ERROR_SUFFIX):
            (directory / stale).unlink(missing_ok=True)
        given = Path(host_dir) / spec.file
        if name in HOST_PROVIDED and given.is_file():
            (directory / spec.file).write_text(given.read_text(encoding="utf-8", errors="replace"), encoding="utf-8")
            written.append(spec.file)
            continue
        out, error = _run_one(spec, runner)
        for name, content in ((spec.file, out), (spec.file + ERROR_SUFFIX, error)):
            if content is not None:
                (directory / name).write_text(content if name == spec.file else content + "\n", encoding="utf-8")
                written.append(name)
    return written


def read_evidence(directory: str) -> Dict[str, str]:
    """Every file of an evidence folder by name (undecodable bytes replaced, never an error)."""
    return {path.name: path.read_text(encoding="utf-8", errors="replace")
            for path in sorted(Path(directory).iterdir()) if path.is_file()}


def _load_json(path: str, what: str) -> object:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{what} {path}: {error}") from None


def _report(findings: List[Finding], node: str, as_json: bool, reason_only: bool, restart: bool = False) -> str:
    decider = worst(findings)
    if reason_only:
        return drain_reason(findings)
    if restart:
        return "\n".join(restart_lines(findings))
    if as_json:
        return json.dumps(report(findings, node), indent=2)
    lines = [f"{f.action:<11} {f.rule:<28} {f.device}: {f.message}" for f in findings]
    lines.append(f"{node}: healthy" if decider is None else f"{node}: {decider} ({drain_reason(findings)})")
    return "\n".join(lines)


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> Optional[argparse.Namespace]:
    """The arguments, or None after argparse printed why not (or the help)."""
    try:
        return parser.parse_args(argv)
    except SystemExit:
        return None


def _judge_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="judge.py [judge]", description=__doc__.split("\n\n")[0])
    parser.add_argument("--evidence", required=True, help="folder of evidence files (written first with --collect)")
    parser.add_argument("--expect", required=True, help="expectations JSON (catalog.health.expectations())")
    parser.add_argument("--rules", required=True, help="rules JSON (catalog.health.rules_document())")
    parser.add_argument("--node", default=socket.gethostname(), help="node name for the findings")
    parser.add_argument("--collect", choices=LEVELS, help="run the evidence commands of this level first")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print findings as JSON")
    output.add_argument("--reason", action="store_true", help="print only the drain reason (for scontrol)")
    output.add_argument("--restart", action="store_true", help="print only the errors that need the job "
                        "restarted, one a line (for the sbatch wrapper)")
    parser.add_argument("--acted", help="with --restart: a file of the errors a restart was already made for on this "
                        "node; print only the others, and add them to it")
    args = _parse(parser, argv)
    if args is None:
        return 0 if {"-h", "--help"} & set(argv) else 2
    try:
        expect = check_expectations(_load_json(args.expect, "--expect"))
        rules = check_rules(_load_json(args.rules, "--rules"))
        if args.collect:
            collect(args.collect, args.evidence, expect)
        if not Path(args.evidence).is_dir():
            raise ValueError(f"--evidence {args.evidence}: not a folder of evidence files")
        findings = judge(read_evidence(args.evidence), expect, rules, args.node)
    except ValueError as error:
        print(f"judge.py: {error}", file=sys.stderr)
        return 2
    out = _report(findings, args.node, args.json, args.reason, args.restart)
    if args.restart and args.acted:
        out = "\n".join(not_acted_on(out.splitlines(), Path(args.acted)))
    if out:
        print(out)
    return 1 if worst(findings) in FAILING_ACTIONS else 0


def _collect_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="judge.py collect", description=collect.__doc__.split("\n")[0])
    parser.add_argument("--level", choices=LEVELS, default="quick")
    parser.add_argument("--expect", required=True, help="expectations JSON (catalog.health.expectations())")
    parser.add_argument("--out", required=True, help="folder to write the evidence files into")
    args = _parse(parser, argv)
    if args is None:
        return 0 if {"-h", "--help"} & set(argv) else 2
    try:
        collect(args.level, args.out, check_expectations(_load_json(args.expect, "--expect")))
    except (ValueError, OSError) as error:
        print(f"judge.py collect: {error}", file=sys.stderr)
        return 2
    return 0


def expectations_from_words(text: str) -> dict:
    """Expectations as a node command carries them (`gpus=8,fabric=efa,fabric_devices=32,nvlinks_per_gpu=18,
    nvswitch=yes`): whole numbers and yes/no read as such, then checked like a JSON file."""
    expect: dict = {}
    for word in filter(None, text.split(",")):
        key, equals, value = word.partition("=")
        if not equals or not key:
            raise ValueError(f"expectation {word!r}: write key=value")
        expect[key] = {"yes": True, "no": False}.get(value, int(value) if value.isdigit() else value)
    return check_expectations(expect)


def _expect_main(argv: Sequence[str]) -> int:
    """`judge.py expect K=V,...`: print the expectations file for a node (goldenenv-slurm node --health)."""
    try:
        if len(argv) != 1:
            raise ValueError("give one argument: gpus=N,fabric=F,fabric_devices=N,nvlinks_per_gpu=N,nvswitch=yes|no")
        print(json.dumps(expectations_from_words(argv[0]), sort_keys=True))
    except ValueError as error:
        print(f"judge.py expect: {error}", file=sys.stderr)
        return 2
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`judge.py [judge] --evidence DIR --expect FILE --rules FILE [--node N] [--collect L] [--json | --reason |
    --restart]`,
    `judge.py collect --level L --expect FILE --out DIR`, or `judge.py expect K=V,...`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["collect"]:
        return _collect_main(args[1:])
    if args[:1] == ["expect"]:
        return _expect_main(args[1:])
    return _judge_main(args[1:] if args[:1] == ["judge"] else args)


if __name__ == "__main__":
    sys.exit(main())
