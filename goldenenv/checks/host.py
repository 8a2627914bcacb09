"""Host checks generated from a pool's host layer: what the host beneath the golden container must run.

One case per pinned thing, each with an id that names it (`engine-docker-ce`, `module-nvidia_peermem`): every
package the layer installs (or the host image carries at the host lock's version) at exactly the locked version and
held there, the engine answering at its version, on GPU pools every GPU of the instance type reachable through the
toolkit and the driver the layer expects loaded (on a pool of another accelerator family, whose devices no NVIDIA
toolkit lists, every device file its family names: Ascend's /dev/davinci<n>), each kernel module loaded and each
fabric device present. The cases
are data computed here from the layer; the suite (test_host.py) runs them on docker://, ssh:// or local:// targets,
the same way on a baked image's build instance and on every live node (`goldenenv validate`).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from goldenenv import accelerators, catalog, fabrics
from goldenenv.images.host import DRIVER, ENGINE, IMAGE, INSTALL, BAKED, HostLayer

SUITE = Path(__file__).with_name("test_host.py")
PLUGIN = "goldenenv.checks.host_plugin"
UNREACHABLE = "host-reached"
"""The case id a node fails with when the suite could not reach it or run there at all (no login, no engine)."""
GOLDEN_CONTAINER = "goldenenv"
"""golden_ref on a live node: the image its golden container (named so by the boot) runs."""

REACHED, PACKAGE, KERNEL_PACKAGE, ENGINE_ANSWERS, GPUS, DRIVER_LOADED, MODULE, DEVICE, DEVICE_FILES = (
    "reached", "package", "kernel-package", "engine", "gpus", "driver", "module", "device", "device-files")
TOOLKIT_DEVICES = "nvidia-smi"
"""The accelerator family whose devices the NVIDIA toolkit lists (its health word): the gpus-all and driver cases."""
PACKAGE_STATUS = "dpkg-query -W -f '${db:Status-Status}|${Version}|${db:Status-Want}' "
"""One query for a package: installed (ii), its version, and whether it is held (apt-mark hold sets want=hold)."""


@dataclass(frozen=True)
class HostCase:
    """One check: `kind` says how it is run, `subject` what it looks at, `expected` the value from the lock."""

    id: str
    kind: str
    label: str
    """How a failure names it: `toolkit nvidia-container-toolkit`, `module nvidia_peermem`."""
    subject: str
    expected: str
    root: bool = False
    """Run through `sudo -n` when the suite is asked to (the engine's socket, the toolkit's CLI)."""


@dataclass
class HostCheckResult:
    passed: bool
    output: str
    failures: dict[str, list[str]] = field(default_factory=dict)
    """target -> the ids of its failed cases (absent: the node passed)."""
    problems: dict[str, list[str]] = field(default_factory=dict)
    """target -> one line per failed case: what drifted, and what the lock pins."""


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._" else "-" for c in text.strip("/"))


def host_cases(layer: HostLayer, *, cloud: str, instance_type: str | None = None, fabric: str | None = None,
               golden_ref: str | None = None) -> list[HostCase]:
    """The cases for one pool's hosts. GPU cases (the GPUs through the toolkit, the driver loaded) come with an
    instance type, whose catalog row gives the GPU count and, unless `fabric` names another (`none`: no fabric),
    the fabric whose modules and devices the host must show. Without golden_ref (a bake: no golden image there)
    the GPUs are counted by `nvidia-container-cli info` instead of `nvidia-smi -L` in a container; GOLDEN_CONTAINER
    runs the image of the node's golden container."""
    cases = [HostCase(UNREACHABLE, REACHED, "host", "", "reached")]
    family = layer.family
    by_name = dict(layer.install)
    components = {p.component: p for p in layer.provided if p.component and p.by in (IMAGE, INSTALL, BAKED)}
    for name in dict.fromkeys([*by_name, *components]):
        component = by_name.get(name) or _component(layer, name)
        if component is None or family not in component.packages:
            continue
        for package, version in component.packages[family].items():
            cases.append(HostCase(f"{name}-{package}", PACKAGE, f"{name} {package}", package, version))
        for package, version in component.kernel_packages.get(family, {}).items():
            cases.append(HostCase(f"{name}-{package}", KERNEL_PACKAGE, f"{name} {package}", package, version))
    engine = next((p for p in layer.provided if p.need == ENGINE), None)
    if engine is not None:
        cases.append(HostCase("engine-answers", ENGINE_ANSWERS, "engine docker", "docker", engine.version or "",
                              root=True))
    node = catalog.instance_types(cloud).get(instance_type) if instance_type else None
    driver = next((p for p in layer.provided if p.need == DRIVER), None)
    family = accelerators.of_device(node.gpu.name) if node and node.gpu_count else None
    if family is not None and family.health != TOOLKIT_DEVICES:
        cases.append(HostCase(f"{family.name}-devices", DEVICE_FILES, f"{family.device_word}s {family.gres_devices}<n>",
                              family.gres_devices, str(node.gpu_count)))
    elif node and node.gpu_count and driver is not None:
        if driver.version:
            cases.append(HostCase("driver-loaded", DRIVER_LOADED, "driver nvidia", "/sys/module/nvidia/version",
                                  driver.version))
        if golden_ref:
            shown = f"the {GOLDEN_CONTAINER} container's image" if golden_ref == GOLDEN_CONTAINER else golden_ref
            cases.append(HostCase("gpus-all", GPUS, f"docker run --gpus all {shown}", golden_ref,
                                  str(node.gpu_count), root=True))
        else:
            cases.append(HostCase("gpus-all", GPUS, "nvidia-container-cli info", "", str(node.gpu_count), root=True))
    chosen = fabrics.get(fabric if fabric is not None else (node.rdma if node and node.has_rdma else "none"))
    modules = [*layer.modules(), *(p.need.split(":", 1)[1] for p in layer.provided if p.need.startswith("module:")),
               *(chosen.kernel_modules if chosen else ())]
    for module in dict.fromkeys(modules):
        cases.append(HostCase(f"module-{module}", MODULE, f"module {module}", module, "loaded"))
    for device in chosen.devices if chosen else ():
        cases.append(HostCase(f"device-{_slug(device)}", DEVICE, f"{chosen.label} device {device}", device, "present"))
    return cases


def _component(layer: HostLayer, name: str):
    """A component the host image carries at the pinned version: read from the host lock, which names it."""
    from goldenenv.images.host import load_host

    return load_host(layer.host_lock).components.get(name) if layer.host_lock else None


def command(case: HostCase, sudo: bool) -> str:
    """The shell command that answers one case on the host."""
    root = "sudo -n " if sudo and case.root else ""
    if case.kind == REACHED:
        return "echo reached"
    if case.kind == PACKAGE:
        return PACKAGE_STATUS + shlex.quote(case.subject)
    if case.kind == KERNEL_PACKAGE:
        return f'echo "$(uname -r)"; {PACKAGE_STATUS}{shlex.quote(case.subject)}-"$(uname -r)"'
    if case.kind == ENGINE_ANSWERS:
        return root + "docker version --format '{{.Server.Version}}'"
    if case.kind == GPUS:
        if case.subject == GOLDEN_CONTAINER:
            image = f'"$({root}docker inspect --format {{{{.Image}}}} {GOLDEN_CONTAINER})"'
            return root + f"docker run --rm --gpus all --entrypoint nvidia-smi {image} -L"
        if case.subject:
            return root + f"docker run --rm --gpus all --entrypoint nvidia-smi {shlex.quote(case.subject)} -L"
        return root + "nvidia-container-cli info"
    if case.kind == DRIVER_LOADED:
        return f"cat {shlex.quote(case.subject)}"
    if case.kind == MODULE:
        return f"test -d /sys/module/{shlex.quote(case.subject)}"
    if case.kind == DEVICE:
        return f"test -e {shlex.quote(case.subject)}"
    if case.kind == DEVICE_FILES:
        return f"ls -1d {shlex.quote(case.subject)}[0-9]* 2>/dev/null"
    raise ValueError(f"unknown host case kind {case.kind!r}")


def judge(case: HostCase, rc: int, out: str) -> str | None:
    """None when the host matches the case; else one line naming what drifted and what the lock pins."""
    text = out.strip()
    if case.kind == REACHED:
        return None if rc == 0 and text == "reached" else f"not reached (rc {rc}): {text[-300:]}"
    if case.kind in (PACKAGE, KERNEL_PACKAGE):
        label = case.label
        if case.kind == KERNEL_PACKAGE:
            kernel, _, text = text.partition("\n")
            label = f"{case.label}-{kernel.strip()}"
        status, version, want = (text.split("|") + ["", "", ""])[:3] if rc == 0 else ("", "", "")
        if status != "installed":
            return f"{label}: not installed, the lock pins {case.expected}"
        if version != case.expected:
            return f"{label} {version}, the lock pins {case.expected}"
        if want != "hold":
            return f"{label} {version} is not held (apt-mark hold), so an upgrade would move it"
        return None
    if case.kind == ENGINE_ANSWERS:
        if rc != 0 or not text:
            return f"{case.label}: does not answer (rc {rc}): {text[-200:]}"
        return None if not case.expected or text == case.expected else \
            f"{case.label} {text}, the lock pins {case.expected}"
    if case.kind == GPUS:
        if rc != 0:
            return f"{case.label}: fails (rc {rc}): {text[-300:]}"
        marker = "GPU " if case.subject else "Device Index:"
        found = sum(1 for line in text.splitlines() if line.strip().startswith(marker))
        return None if str(found) == case.expected else \
            f"{case.label}: {found} GPU(s), the instance type has {case.expected}"
    if case.kind == DRIVER_LOADED:
        if rc != 0:
            return f"{case.label}: no driver loaded ({case.subject} missing), the layer expects {case.expected}"
        return None if text == case.expected else f"{case.label} {text} loaded, the layer expects {case.expected}"
    if case.kind == MODULE:
        return None if rc == 0 else f"{case.label}: not loaded (no /sys/module/{case.subject})"
    if case.kind == DEVICE:
        return None if rc == 0 else f"{case.label}: missing"
    if case.kind == DEVICE_FILES:
        found = [line for line in text.splitlines() if line.strip()]
        return None if str(len(found)) == case.expected else \
            f"{case.label}: {len(found)} present ({', '.join(found) or 'none'}), the instance type has {case.expected}"
    raise ValueError(f"unknown host case kind {case.kind!r}")


def write_cases(cases: list[HostCase], path: Path) -> Path:
    path.write_text(json.dumps([asdict(c) for c in cases], indent=1))
    return path


def read_cases(path: Path) -> list[HostCase]:
    return [HostCase(**c) for c in json.loads(Path(path).read_text())]


def pytest_command(cases_file: Path, target: str, results: Path, *, sudo: bool,
                   ssh_config: str | None) -> list[str]:
    return [sys.executable, "-m", "pytest", str(SUITE), "-p", PLUGIN, "-p", "no:cacheprovider", "-v", "-rfE",
            "--tb=line", "--no-header", f"--hosts={target}", f"--host-cases={cases_file}",
            f"--host-results={results}", *(["--host-sudo"] if sudo else []),
            *([f"--ssh-config={ssh_config}"] if ssh_config else [])]


def check_hosts(layer: HostLayer, targets: list[str], *, instance_type: str | None, cloud: str, sudo: bool = True,
                ssh_config: str | None = None, golden_ref: str | None = None, fabric: str | None = None,
                parallel: int = 8) -> HostCheckResult:
    """Run the layer's host suite on every target (ssh://user@addr, docker://name, local://), one pytest per node
    so each node's drift is its own; a node where the suite cannot run fails with UNREACHABLE."""
    cases = host_cases(layer, cloud=cloud, instance_type=instance_type, fabric=fabric, golden_ref=golden_ref)
    with tempfile.TemporaryDirectory(prefix="goldenenv-host-checks-") as folder:
        cases_file = write_cases(cases, Path(folder) / "cases.json")

        def one(index_target: tuple[int, str]) -> tuple[str, str, list[dict], int]:
            index, target = index_target
            results = Path(folder) / f"results-{index}.json"
            done = subprocess.run(pytest_command(cases_file, target, results, sudo=sudo, ssh_config=ssh_config),
                                  capture_output=True, text=True)
            found = json.loads(results.read_text()) if results.is_file() else None
            return target, done.stdout + done.stderr, found, done.returncode

        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets) or 1))) as pool:
            runs = list(pool.map(one, enumerate(targets)))
    result = HostCheckResult(passed=True, output="")
    for target, output, found, rc in runs:
        result.output += f"== host checks on {target}\n{output}"
        if found is None or (rc != 0 and not found["failed"]):
            tail = output.strip().splitlines()[-1] if output.strip() else f"pytest exited {rc}"
            found = {"failed": [{"id": UNREACHABLE, "message": f"the host checks did not run: {tail}"}]}
        elif any(f["id"] == UNREACHABLE for f in found["failed"]):
            found = {"failed": [f for f in found["failed"] if f["id"] == UNREACHABLE]}
        if found["failed"]:
            result.passed = False
            result.failures[target] = [f["id"] for f in found["failed"]]
            result.problems[target] = [f["message"] for f in found["failed"]]
    return result
