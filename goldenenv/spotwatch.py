#!/usr/bin/env python3
"""Turn a cloud's spot interruption notice into a checkpoint: watch the metadata endpoint, signal the training.

Runs on a node, inside the golden image as `goldenenv-spotwatch` (stdlib only). As a wrapper:

    goldenenv-spotwatch -- torchrun --nnodes 2 ... train_ddp.py --steps 1000

it starts the command, polls the instance metadata every few seconds and, when a notice appears (each cloud's
own: goldenenv/clouds/<cloud>/spot_notice.py says where and how, found by discovery beside this file in the
package, or bundled into this file when the image's build copies it: goldenenv.images.bundle), sends SIGUSR1 once
to every process of the command's tree that catches it (the training ranks: torchrun does not forward
SIGUSR1, and its workers run in sessions of their own). If none catches it, the command itself gets
SIGTERM, which torchrun passes on to its workers, once --fallback-after seconds have passed without
a handler (a notice may come while the ranks still import torch). It exits with the command's exit code.
With --pid it watches a process tree started elsewhere instead.

On a Slurm cluster it plays two more parts. In a job (`--requeue-job`, which the sbatch script of a spot pool
uses), once the ranks have checkpointed and the command has exited after a notice, it requeues the job
(`scontrol requeue $SLURM_JOB_ID`): the job starts again, from that checkpoint, when enough nodes are up. On the node
(`--drain-node NAME`, started as root next to slurmd), it drains the node with the notice as the reason, so no job
lands on a node about to go; the node is resumed when it comes back (goldenenv-slurm node).
"""

from __future__ import annotations

import argparse
import email.utils
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

TOKEN_TTL_S = 21600
HTTP_TIMEOUT_S = 2.0
TOKEN_PATH = "/latest/api/token"
"""Where an endpoint that gives session tokens (EC2's IMDSv2, ECS's hardened mode) hands them out."""


@dataclass(frozen=True)
class CloudFacts:
    """How one cloud's metadata endpoint posts a spot notice: where, with which headers, in which format."""

    vendor: str
    """How the machine's DMI sys_vendor begins on this cloud."""
    notice_path: str
    token_headers: tuple[str, str] | None
    """(TTL header of PUT TOKEN_PATH, header that carries the token): a session token, when the endpoint gives one;
    None: no token (Google's server wants a fixed header instead)."""
    headers: dict[str, str]
    """Sent with every request."""
    default_url: str
    machine_path: str | None = None
    """Where the endpoint names this machine (text), when its notices list the machines they concern and others'
    appear too (Azure: the VM's name; a scale set's placement group shares its events); None: every notice is
    this machine's."""


BUNDLED_CLOUDS: dict[str, str] = {}
"""The clouds' spot notice modules' sources by cloud, where the image's build bundled them into this file; empty in
the package, where each is read from goldenenv/clouds/<cloud>/spot_notice.py."""
CLOUDS_FOLDER = Path(__file__).resolve().parent / "clouds"


def notice_files(folder: Path = CLOUDS_FOLDER) -> dict[str, Path]:
    """Each cloud's spot notice module by cloud: <folder>/<cloud>/spot_notice.py."""
    return {path.parent.name: path for path in sorted(folder.glob("*/spot_notice.py"))}


def _load_notice_modules() -> dict[str, ModuleType]:
    sources = dict(BUNDLED_CLOUDS) or {cloud: path.read_text(encoding="utf-8")
                                        for cloud, path in notice_files().items()}
    modules = {}
    for cloud, source in sources.items():
        module = modules[cloud] = ModuleType(f"goldenenv_spot_notice_{cloud}")
        exec(compile(source, f"goldenenv/clouds/{cloud}/spot_notice.py", "exec", dont_inherit=True), module.__dict__)
    return modules


NOTICE_MODULES = _load_notice_modules()
"""cloud -> its spot notice module: VENDOR, METADATA_URL, NOTICE_PATH, TOKEN_HEADERS, HEADERS, MACHINE_PATH and
notice(body, this machine's name or None, core): (action, deadline or None, raw) or None, never naming its cloud
(the folder names it)."""
CLOUD_FACTS = {cloud: CloudFacts(m.VENDOR, m.NOTICE_PATH, m.TOKEN_HEADERS, dict(m.HEADERS), m.METADATA_URL,
                                 machine_path=m.MACHINE_PATH) for cloud, m in NOTICE_MODULES.items()}
CLOUDS = tuple(CLOUD_FACTS)
VENDORS: dict[str, tuple[str, ...]] = {}
for _cloud, _facts in CLOUD_FACTS.items():
    VENDORS[_facts.vendor] = (*VENDORS.get(_facts.vendor, ()), _cloud)
"""How a machine's DMI vendor begins -> the clouds whose machines show it: one, unless a cloud runs on another's
machines (a copy of a cloud's folder, on the same provider), where the machine cannot tell them apart and --cloud
must."""
DMI_FOLDER = Path("/sys/class/dmi/id")


@dataclass(frozen=True)
class Notice:
    cloud: str
    action: str
    deadline: datetime | None
    raw: str

    def seconds_left(self, now: datetime | None = None) -> float | None:
        if self.deadline is None:
            return None
        return (self.deadline - (now or datetime.now(timezone.utc))).total_seconds()


class MetadataError(Exception):
    """The endpoint could not be asked (refused, timed out, unexpected status): try again at the next poll."""


def log(message: str) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"goldenenv-spotwatch {stamp}: {message}", file=sys.stderr, flush=True)


def parse_time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def parse_http_date(text: str) -> datetime | None:
    """An RFC 1123 date as Azure's scheduled events write NotBefore ("Mon, 19 Sep 2016 18:29:47 GMT"); None when
    blank (an event already Started) or unreadable."""
    try:
        moment = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class Metadata:
    """One cloud's metadata endpoint, with its session token kept until it nearly expires."""

    def __init__(self, cloud: str, base_url: str, timeout: float = HTTP_TIMEOUT_S) -> None:
        self.cloud, self.base_url, self.timeout = cloud, base_url.rstrip("/"), timeout
        self._token: str | None = None
        self._token_expires = 0.0
        self._machine: str | None = None

    def _request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        request = urllib.request.Request(self.base_url + path, method=method, headers=headers,
                                         data=b"" if method == "PUT" else None)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - fixed scheme
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, ""
        except (urllib.error.URLError, OSError) as e:
            raise MetadataError(f"{self.base_url}{path}: {getattr(e, 'reason', e)}") from None

    def _token_headers(self) -> dict[str, str]:
        """IMDSv2 (AWS) or hardened mode (Alibaba): a token when the endpoint gives one, none otherwise (v1)."""
        ttl_header, token_header = CLOUD_FACTS[self.cloud].token_headers
        if self._token is None or time.monotonic() > self._token_expires:
            status, body = self._request("PUT", TOKEN_PATH, {ttl_header: str(TOKEN_TTL_S)})
            if status != 200 or not body.strip():
                raise MetadataError(f"token refused: PUT {TOKEN_PATH} answered {status}")
            self._token, self._token_expires = body.strip(), time.monotonic() + TOKEN_TTL_S - 60
        return {token_header: self._token}

    def _get(self, path: str) -> tuple[int, str]:
        facts = CLOUD_FACTS[self.cloud]
        token_error = None
        headers = dict(facts.headers)
        if facts.token_headers:
            try:
                headers.update(self._token_headers())
            except MetadataError as e:
                token_error = e
        status, body = self._request("GET", path, headers)
        if status == 401 and facts.token_headers and not token_error:  # the token expired early: a new one next time
            self._token = None
        if status not in (200, 404):
            raise MetadataError(f"GET {path} answered {status}" + (f" ({token_error})" if token_error else ""))
        return status, body

    def machine(self) -> str | None:
        """This machine's name as the cloud's notices list it (asked once), or None where they name no machine."""
        path = CLOUD_FACTS[self.cloud].machine_path
        if path is None or self._machine is not None:
            return self._machine
        status, body = self._get(path)
        if status != 200 or not body.strip():
            raise MetadataError(f"GET {path} answered {status} without this machine's name")
        self._machine = body.strip()
        return self._machine

    def notice(self) -> Notice | None:
        """The pending interruption, or None; MetadataError when the endpoint could not say."""
        machine = self.machine()
        status, body = self._get(CLOUD_FACTS[self.cloud].notice_path)
        if status == 404:
            return None
        return NOTICES[self.cloud](body, machine)


def _reader(cloud: str, module: ModuleType, core: ModuleType):
    def read(body: str, machine: str | None = None) -> Notice | None:
        found = module.notice(body, machine, core)
        return None if found is None else Notice(cloud, *found)
    return read


NOTICES = {cloud: _reader(cloud, module, sys.modules[__name__]) for cloud, module in NOTICE_MODULES.items()}
"""cloud -> parser(body, this machine's name or None): the Notice, or None when the answer holds none for it."""


def detect_clouds() -> tuple[str, ...]:
    """The clouds this machine may run on, from its DMI vendor (readable without privileges): none off every known
    cloud, one on a known cloud, several where clouds share the vendor."""
    for name in ("sys_vendor", "board_vendor"):
        try:
            vendor = (DMI_FOLDER / name).read_text().strip()
        except OSError:
            continue
        for prefix, clouds in VENDORS.items():
            if vendor.startswith(prefix):
                return clouds
    return ()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants, whatever session they started (torchrun's workers have their own)."""
    tree, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def catches(pid: int, signum: int) -> bool:
    """Whether the process installed a handler for `signum` (SigCgt in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def signal_catchers(root: int, signum: int) -> list[int]:
    """Send `signum` to each process under `root` that catches it (a process without a handler would die)."""
    sent = []
    for pid in process_tree(root):
        if catches(pid, signum):
            try:
                os.kill(pid, signum)
                sent.append(pid)
            except ProcessLookupError:
                pass
    return sent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(metadata: Metadata, root: int, finished, interval: float, signum: int, fallback: int,
          fallback_after: float) -> Notice | None:
    """Poll until `finished()` is true; signal the tree under `root` once when a notice appears."""
    noticed: Notice | None = None
    signalled, noticed_at, failing = False, 0.0, False
    name = signal.Signals(signum).name
    while not finished():
        if noticed is not None and not signalled:
            sent = signal_catchers(root, signum)
            if sent:
                signalled = True
                log(f"sent {name} to {', '.join(map(str, sent))}; waiting for the checkpoint")
            elif time.monotonic() - noticed_at >= fallback_after:
                signalled = True
                try:
                    os.kill(root, fallback)
                except ProcessLookupError:
                    pass
                log(f"no process under {root} catches {name} after {fallback_after:g} s: "
                    f"sent {signal.Signals(fallback).name} to {root}")
        if noticed is None:
            try:
                found = metadata.notice()
            except MetadataError as e:
                if not failing:
                    log(f"metadata endpoint: {e}; still polling every {interval:g} s")
                failing = True
            else:
                if failing:
                    log("metadata endpoint answers again")
                failing = False
                if found is not None:
                    noticed, noticed_at = found, time.monotonic()
                    left = found.seconds_left()
                    deadline = found.deadline.strftime("%Y-%m-%dT%H:%M:%SZ") if found.deadline else "unknown"
                    log(f"{found.cloud} spot notice: {found.action} at {deadline}"
                        + (f" ({left:.0f} s left)" if left is not None else "") + f" [{found.raw}]")
                    continue  # signal at once
        end = time.monotonic() + (interval if noticed is None or signalled else min(interval, 0.5))
        while not finished() and time.monotonic() < end:
            time.sleep(min(0.1, interval))
    return noticed


DRAIN_REASON = "goldenenv spot"
"""How a drain reason the watcher set begins: the node's entry resumes only such a node when it comes back."""


def scontrol(*args: str) -> bool:
    """Run one scontrol command; whether it succeeded (its complaint is logged, never raised)."""
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        log(f"scontrol {' '.join(args)}: {e}")
        return False
    if done.returncode:
        log(f"scontrol {' '.join(args)} failed: {(done.stderr or done.stdout).strip()[-300:]}")
    return done.returncode == 0


def drain_reason(notice: Notice) -> str:
    deadline = notice.deadline.strftime("%Y-%m-%dT%H:%M:%SZ") if notice.deadline else "unknown"
    return f"{DRAIN_REASON}: {notice.cloud} {notice.action} at {deadline}"


def drain_on_notice(metadata: Metadata, node: str, interval: float) -> int:
    """Poll until a notice; then drain the node with it as the reason (jobs there run on until they end)."""
    log(f"watching {metadata.cloud} spot notices for Slurm node {node}")
    while True:
        try:
            found = metadata.notice()
        except MetadataError:
            found = None
        if found is not None:
            reason = drain_reason(found)
            log(f"draining {node}: {reason}")
            return 0 if scontrol("update", f"nodename={node}", "state=drain", f"reason={reason}") else 1
        time.sleep(interval)


def _signal_number(name: str) -> int:
    name = name.upper()
    try:
        return int(getattr(signal, name if name.startswith("SIG") else f"SIG{name}"))
    except AttributeError:
        raise argparse.ArgumentTypeError(f"unknown signal {name}") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="goldenenv-spotwatch", description=__doc__.split("\n\n")[0],
        epilog="example: goldenenv-spotwatch -- torchrun --nproc-per-node 8 train_ddp.py --checkpoint-every 50")
    parser.add_argument("--cloud", choices=CLOUDS, default=os.environ.get("GOLDENENV_CLOUD") or None,
                        help="whose notice to poll (env GOLDENENV_CLOUD; default: from the machine's DMI vendor)")
    parser.add_argument("--metadata-url", default=os.environ.get("GOLDENENV_METADATA_URL") or None,
                        help="metadata endpoint (env GOLDENENV_METADATA_URL; default: the cloud's, "
                             + ", ".join(f"{c} {f.default_url}" for c, f in CLOUD_FACTS.items()) + ")")
    parser.add_argument("--interval", type=float, default=5.0, metavar="SECONDS", help="poll period (default 5)")
    parser.add_argument("--signal", type=_signal_number, default=signal.SIGUSR1, metavar="NAME",
                        help="sent to the processes that catch it (default USR1)")
    parser.add_argument("--fallback-signal", type=_signal_number, default=signal.SIGTERM, metavar="NAME",
                        help="sent to the command when no process catches --signal (default TERM)")
    parser.add_argument("--fallback-after", type=float, default=20.0, metavar="SECONDS",
                        help="how long to wait for a process to catch --signal before the fallback (default 20)")
    parser.add_argument("--pid", type=int, help="watch this running process tree instead of starting a command")
    parser.add_argument("--requeue-job", action="store_true",
                        help="in a Slurm job: after a notice, once the command has exited, requeue the job "
                             "($SLURM_JOB_ID)")
    parser.add_argument("--drain-node", metavar="NODE",
                        help="on a Slurm node, as root: on a notice, drain NODE with the notice as the reason")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...: the training to start")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if sum((bool(args.command), args.pid is not None, args.drain_node is not None)) != 1:
        parser.error("give one of: a command after --, --pid, --drain-node")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    found = (args.cloud,) if args.cloud else detect_clouds()
    if not found:
        log("not on a known cloud (no " + " or ".join(VENDORS) + " DMI vendor) and no --cloud: give --cloud (one "
            f"of {', '.join(CLOUDS)}) or GOLDENENV_CLOUD; no cloud is assumed, since another cloud's endpoint never "
            "posts this machine's notice")
        return 2
    if len(found) > 1:
        log(f"this machine's DMI vendor is that of {' and '.join(found)}, which it cannot tell apart, and no --cloud "
            f"was given: give --cloud (one of {', '.join(found)}) or GOLDENENV_CLOUD; no cloud is assumed, since "
            "another cloud's endpoint never posts this machine's notice")
        return 2
    cloud = found[0]
    args.metadata_url = args.metadata_url or CLOUD_FACTS[cloud].default_url
    metadata = Metadata(cloud, args.metadata_url)
    if args.drain_node is not None:
        return drain_on_notice(metadata, args.drain_node, args.interval)
    if args.pid is not None:
        log(f"watching {cloud} spot notices at {args.metadata_url} for process {args.pid}")
        watch(metadata, args.pid, lambda: not _alive(args.pid), args.interval, args.signal, args.fallback_signal,
              args.fallback_after)
        return 0

    child = subprocess.Popen(args.command)
    for forwarded in (signal.SIGTERM, signal.SIGINT):  # a wrapper must not swallow a stop meant for the command
        signal.signal(forwarded, lambda signum, frame: child.send_signal(signum))
    log(f"watching {cloud} spot notices at {args.metadata_url} for process {child.pid} ({args.command[0]})")
    noticed = watch(metadata, child.pid, lambda: child.poll() is not None, args.interval, args.signal,
                    args.fallback_signal, args.fallback_after)
    code = child.wait()
    if noticed is not None:
        left = noticed.seconds_left()
        log(f"{args.command[0]} exited with {code} after the notice"
            + (f", {left:.0f} s before the deadline" if left is not None else ""))
        job = os.environ.get("SLURM_JOB_ID")
        if args.requeue_job and job:
            log(f"requeueing Slurm job {job}: it starts again from its checkpoint when enough nodes are up")
            scontrol("requeue", job)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
