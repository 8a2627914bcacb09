"""Host checks generated from a pool's host layer (goldenenv.checks.host): one case per locked package for every
shipped stack's pools, judged on captured host output, run for real on Debian containers holding packages with the
vendors' names at the lock's versions (dpkg-deb), and named per node by `goldenenv validate`."""

from __future__ import annotations

import io
import secrets
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import automation, catalog, fabrics, jobs, lifecycle
from goldenenv.checks import host as host_checks
from goldenenv.cli import app
from goldenenv.images import host
from goldenenv.images.host import host_lock_path

sys.path.insert(0, str(Path(__file__).parent))
from shipped import pulumi_stacks  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def pools():
    return [pytest.param(cloud, stack, pool.name, id=f"{stack}-{pool.name}")
            for cloud, stack in pulumi_stacks() for pool in lifecycle.load_spec(stack).nodes]


def _pool(stack: str, name: str):
    spec = lifecycle.load_spec(stack)
    return spec, next(p for p in spec.nodes if p.name == name)


def _raw_lock(name: str) -> dict:
    """The host lock as its file says, read apart from the model the checks use."""
    return yaml.safe_load(host_lock_path(name).read_text())


def _locked_packages(layer: host.HostLayer) -> dict[str, str]:
    """case id -> version for every package of every component the layer installs or the host image carries at
    the lock's version, from the lock's file."""
    if layer.host_lock is None:
        return {}
    components = _raw_lock(layer.host_lock)["components"]
    names = [n for n, _ in layer.install] + [p.component for p in layer.provided if p.component]
    return {f"{name}-{package}": str(version) for name in dict.fromkeys(names)
            for package, version in components[name]["packages"][layer.family].items()}


@pytest.mark.parametrize("cloud,stack,pool_name", pools())
def test_one_case_per_locked_package_at_the_locks_version(cloud, stack, pool_name):
    spec, pool = _pool(stack, pool_name)
    layer = host.layer(spec, pool)
    cases = host_checks.host_cases(layer, cloud=cloud, instance_type=pool.instance_type)
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), ids
    packages = {c.id: c.expected for c in cases if c.kind == host_checks.PACKAGE}
    assert packages == _locked_packages(layer)
    if layer.installs:
        assert packages, f"{stack}: the install step installs packages, and no case checks them"


@pytest.mark.parametrize("cloud,stack,pool_name", pools())
def test_gpu_module_and_device_cases_follow_the_catalog_and_the_fabric(cloud, stack, pool_name):
    spec, pool = _pool(stack, pool_name)
    layer = host.layer(spec, pool)
    node = catalog.instance_type(cloud, pool.instance_type)
    cases = {c.id: c for c in host_checks.host_cases(layer, cloud=cloud, instance_type=pool.instance_type)}
    assert cases[host_checks.UNREACHABLE].kind == host_checks.REACHED
    assert cases["engine-answers"].root
    engine = _raw_lock(layer.host_lock)["components"]["engine"] if layer.host_lock else None
    if any(p.need == host.ENGINE and p.component == "engine" for p in layer.provided):
        assert cases["engine-answers"].expected == engine["version"]
    vendor = {r["gpu"]: r["vendor"] for r in catalog.rows("gpus")}.get(node.gpu.name)
    if node.gpu_count and vendor == "huawei":  # NPUs: their /dev/davinci<n> files, no NVIDIA toolkit to ask
        assert (cases["ascend-devices"].subject, cases["ascend-devices"].expected) == ("/dev/davinci",
                                                                                     str(node.gpu_count))
        assert "gpus-all" not in cases
    elif node.gpu_count:
        assert cases["gpus-all"].expected == str(node.gpu_count)
        assert host_checks.command(cases["gpus-all"], sudo=True) == "sudo -n nvidia-container-cli info"
    fabric = fabrics.get(node.rdma) if node.has_rdma and pool.rdma is not False else None
    components = _raw_lock(layer.host_lock)["components"] if layer.host_lock else {}
    modules = [*(fabric.kernel_modules if fabric else ()),
               *(m for name, _ in layer.install for m in components[name].get("modules", []))]
    assert {f"module-{m}" for m in modules} <= set(cases)
    for device in fabric.devices if fabric else ():
        assert [c for c in cases.values() if c.kind == host_checks.DEVICE and c.subject == device]


def test_without_an_instance_type_no_gpu_case_runs():
    spec, pool = _pool(*next((s, p.name) for _, s in pulumi_stacks() for p in lifecycle.load_spec(s).nodes))
    cases = host_checks.host_cases(host.layer(spec, pool), cloud=spec.cloud, instance_type=None)
    assert not [c for c in cases if c.kind in (host_checks.GPUS, host_checks.DRIVER_LOADED)]


def test_a_live_node_counts_its_gpus_in_its_golden_containers_image():
    spec, pool = _pool("aws-p5-2node", "gpu")
    cases = {c.id: c for c in host_checks.host_cases(host.layer(spec, pool), cloud="aws",
                                                      instance_type=pool.instance_type,
                                                      golden_ref=host_checks.GOLDEN_CONTAINER)}
    said = host_checks.command(cases["gpus-all"], sudo=True)
    assert said.startswith("sudo -n docker run --rm --gpus all --entrypoint nvidia-smi ") and said.endswith(" -L")
    assert "sudo -n docker inspect" in said and host_checks.GOLDEN_CONTAINER in said


# ---------------------------------------------------------------- judging captured host output

PINNED = host_checks.HostCase("toolkit-nvidia-container-toolkit", host_checks.PACKAGE,
                              "toolkit nvidia-container-toolkit", "nvidia-container-toolkit", "1.17.8-1")


@pytest.mark.parametrize("rc,out,said", [
    (0, "installed|1.17.8-1|hold", None),
    (0, "installed|1.17.4-1|hold", "toolkit nvidia-container-toolkit 1.17.4-1, the lock pins 1.17.8-1"),
    (0, "installed|1.17.8-1|install", "toolkit nvidia-container-toolkit 1.17.8-1 is not held"),
    (0, "config-files|1.17.8-1|deinstall", "toolkit nvidia-container-toolkit: not installed, the lock pins 1.17.8-1"),
    (1, "dpkg-query: no packages found matching nvidia-container-toolkit",
     "toolkit nvidia-container-toolkit: not installed, the lock pins 1.17.8-1"),
])
def test_a_package_is_judged_by_version_and_hold(rc, out, said):
    found = host_checks.judge(PINNED, rc, out)
    assert found == said if said is None else found.startswith(said)


def test_a_kernel_package_is_named_with_the_running_kernel():
    case = host_checks.HostCase("fs-lustre-client-modules", host_checks.KERNEL_PACKAGE, "fs lustre-client-modules",
                                "lustre-client-modules", "2.15.6-1")
    assert '"$(uname -r)"' in host_checks.command(case, True)
    assert host_checks.judge(case, 0, "6.8.0-1024-aws\ninstalled|2.15.6-1|hold") is None
    assert host_checks.judge(case, 1, "6.8.0-1030-aws\n") == \
        "fs lustre-client-modules-6.8.0-1030-aws: not installed, the lock pins 2.15.6-1"


NVIDIA_SMI_L = "\n".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-0000-0000-0000-000000000000)"
                         for i in range(8))
CONTAINER_CLI_INFO = "NVRM version:   570.133.20\nCUDA version:   12.8\n\n" + "\n\n".join(
    f"Device Index:   {i}\nDevice Minor:   {i}\nModel:          NVIDIA H100 80GB HBM3\nBrand:          Nvidia"
    for i in range(8))


@pytest.mark.parametrize("subject,out", [("registry/goldenenv@sha256:" + "0" * 64, NVIDIA_SMI_L),
                                         ("", CONTAINER_CLI_INFO)])
def test_gpus_are_counted_against_the_instance_type(subject, out):
    eight = host_checks.HostCase("gpus-all", host_checks.GPUS, "gpus", subject, "8", root=True)
    assert host_checks.judge(eight, 0, out) is None
    four = host_checks.HostCase("gpus-all", host_checks.GPUS, "gpus", subject, "4", root=True)
    assert "8 GPU(s), the instance type has 4" in host_checks.judge(four, 0, out)
    assert "fails (rc 125)" in host_checks.judge(eight, 125, "could not select device driver with capabilities")


def test_engine_driver_module_and_device_findings_say_what_the_host_has():
    engine = host_checks.HostCase("engine-answers", host_checks.ENGINE_ANSWERS, "engine docker", "docker", "28.0.4",
                                  root=True)
    assert host_checks.judge(engine, 0, "28.0.4\n") is None
    assert host_checks.judge(engine, 0, "27.5.1") == "engine docker 27.5.1, the lock pins 28.0.4"
    assert "does not answer" in host_checks.judge(engine, 1, "permission denied")
    assert host_checks.command(engine, sudo=True).startswith("sudo -n docker version")
    assert host_checks.command(engine, sudo=False).startswith("docker version")
    driver = host_checks.HostCase("driver-loaded", host_checks.DRIVER_LOADED, "driver nvidia",
                                  "/sys/module/nvidia/version", "570.133.20")
    assert host_checks.judge(driver, 0, "570.133.20\n") is None
    assert host_checks.judge(driver, 0, "550.54.15") == "driver nvidia 550.54.15 loaded, the layer expects 570.133.20"
    module = host_checks.HostCase("module-import_helper", host_checks.MODULE, "module import_helper",
                                  "import_helper", "loaded")
    assert host_checks.judge(module, 1, "") == "module import_helper: not loaded (no /sys/module/import_helper)"
    for case in (driver, module, PINNED):
        assert not host_checks.command(case, sudo=True).startswith("sudo")


# ---------------------------------------------------------------- the suite on Debian containers

SUDO_STAND_IN = """#!/bin/sh
# passwordless sudo as cloud images give their login: -n (never prompt) is required
[ "$1" = "-n" ] || { echo "sudo: a password is required" >&2; exit 1; }
shift
SUDO_USER=$(id -un) exec "$@"
"""
DOCKER_STAND_IN = """#!/bin/sh
# the engine's socket is root's: a login outside the docker group reaches it only through sudo
[ -n "$SUDO_USER" ] || { echo "permission denied while trying to connect to the Docker daemon socket" >&2; exit 1; }
[ "$1" = "version" ] && exec cat /etc/engine-version
exit 1
"""


def _deb(folder: Path, name: str, version: str) -> Path:
    root = folder / f"{name}-{secrets.token_hex(3)}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: goldenenv tests <tests@example.org>\n"
        f"Description: stand-in for the vendor's {name}\n")
    out = folder / f"{root.name}.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(out)], check=True,
                   capture_output=True)
    return out


def _put(container, files: dict[str, tuple[bytes, int]]) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    container.put_archive("/", buffer.getvalue())


def _run(container, command: str) -> str:
    code, out = container.exec_run(["sh", "-c", command])
    assert code == 0, out.decode()
    return out.decode()


def _install(container, debs: list[Path]) -> None:
    _put(container, {f"/tmp/debs/{d.name}": (d.read_bytes(), 0o644) for d in debs})
    _run(container, "dpkg -i /tmp/debs/*.deb && rm -rf /tmp/debs")


@pytest.fixture(scope="module")
def installed_pool():
    """A shipped pool whose layer installs packages and needs no kernel module (a container has none of its own)."""
    for cloud, stack in pulumi_stacks():
        spec = lifecycle.load_spec(stack)
        for pool in spec.nodes:
            layer = host.layer(spec, pool)
            kinds = {c.kind for c in host_checks.host_cases(layer, cloud=cloud, instance_type=None)}
            if layer.install and not kinds & {host_checks.MODULE, host_checks.DEVICE}:
                return cloud, layer
    pytest.fail("no shipped pool installs a host layer without kernel modules")


@pytest.fixture(scope="module")
def nodes(client, installed_pool, tmp_path_factory):
    """Two emulated hosts (Debian 12) holding the layer's packages at the lock's versions, held, a login outside the
    docker group, and sudo and docker stand-ins; yields their docker:// targets as that login."""
    sys.path.insert(0, str(REPO / "tests" / "nodeboot"))
    import emulated_stack

    base = emulated_stack.golden_base(client)
    cloud, layer = installed_pool
    folder = tmp_path_factory.mktemp("debs")
    debs = [_deb(folder, name, version) for name, version in layer.packages().items()]
    engine = next(p for p in layer.provided if p.need == host.ENGINE)
    containers = []
    try:
        for _ in range(2):
            container = client.containers.run(base, ["sleep", "infinity"], detach=True, network_mode="none",
                                               labels={"goldenenv.test": "host-checks"})
            containers.append(container)
            _install(container, debs)
            _run(container, "apt-mark hold " + " ".join(layer.packages()) + " && useradd -m ubuntu")
            _put(container, {"/usr/local/bin/sudo": (SUDO_STAND_IN.encode(), 0o755),
                             "/usr/local/bin/docker": (DOCKER_STAND_IN.encode(), 0o755),
                             "/etc/engine-version": (f"{engine.version}\n".encode(), 0o644)})
        yield cloud, layer, containers, [f"docker://ubuntu@{c.name}" for c in containers], folder
    finally:
        for container in containers:
            container.remove(force=True)


def test_the_suite_passes_on_hosts_that_hold_the_layer(nodes):
    cloud, layer, _, targets, _ = nodes
    result = host_checks.check_hosts(layer, targets, instance_type=None, cloud=cloud)
    assert result.passed, result.output
    assert result.failures == {}
    ran = result.output.count(" PASSED")
    assert ran == len(targets) * len(host_checks.host_cases(layer, cloud=cloud, instance_type=None))


def test_the_suite_names_the_drifted_node_and_exactly_what_drifted(nodes):
    cloud, layer, containers, targets, folder = nodes
    drifted = containers[0]
    packages = list(layer.packages().items())
    owner = {p: name for name, component in layer.install for p in component.packages[layer.family]}
    (moved, pinned), (removed, _) = packages[0], packages[-1]
    other = f"{pinned}~older1"
    try:
        _install(drifted, [_deb(folder, moved, other)])
        _run(drifted, f"apt-mark unhold {removed} && dpkg -r {removed}")
        result = host_checks.check_hosts(layer, targets, instance_type=None, cloud=cloud)
        assert not result.passed
        assert result.failures == {targets[0]: [f"{owner[moved]}-{moved}", f"{owner[removed]}-{removed}"]}, \
            result.output
        assert result.problems[targets[0]] == [
            f"{owner[moved]} {moved} {other}, the lock pins {pinned}",
            f"{owner[removed]} {removed}: not installed, the lock pins {layer.packages()[removed]}"]
    finally:
        _install(drifted, [_deb(folder, moved, pinned), _deb(folder, removed, layer.packages()[removed])])
        _run(drifted, f"apt-mark hold {moved} {removed}")


def test_the_engine_is_asked_through_sudo_when_the_login_is_outside_the_docker_group(nodes):
    cloud, layer, _, targets, _ = nodes
    result = host_checks.check_hosts(layer, targets[1:], instance_type=None, cloud=cloud, sudo=False)
    assert result.failures == {targets[1]: ["engine-answers"]}
    assert "permission denied" in result.problems[targets[1]][0]


def test_a_node_that_cannot_be_reached_fails_once_by_name(installed_pool):
    cloud, layer = installed_pool
    gone = f"docker://goldenenv-no-such-node-{secrets.token_hex(3)}"
    result = host_checks.check_hosts(layer, [gone], instance_type=None, cloud=cloud)
    assert result.failures == {gone: [host_checks.UNREACHABLE]}
    assert "No such container" in result.problems[gone][0]


# ---------------------------------------------------------------- validate names each drifted node


def test_validate_runs_every_pools_checks_and_names_each_drifted_node(monkeypatch):
    spec = lifecycle.load_spec("aws-p5-2node")
    pool = spec.nodes[0]
    layer = host.layer(spec, pool)
    toolkit = _raw_lock(layer.host_lock)["components"]["toolkit"]["packages"][layer.family]
    package, pinned = next(iter(toolkit.items()))
    targets = [f"ssh://ubuntu@10.42.0.{10 + i}" for i in range(pool.count)]
    seen = []

    def check_hosts(given, hosts, **kwargs):
        seen.append((given, hosts, kwargs))
        line = f"toolkit {package} 1.17.4-1, the lock pins {pinned}"
        return host_checks.HostCheckResult(False, "output", {hosts[-1]: [f"toolkit-{package}"]}, {hosts[-1]: [line]})

    def validate_hosts(lock, hosts, *args, spec=None, **kwargs):
        result = lifecycle.Validation(image_ok=True, allreduce_ok=True)
        result.host_checks, result.host_drift = lifecycle.validate_host_layers(spec, hosts)
        return result

    monkeypatch.setattr(host_checks, "check_hosts", check_hosts)
    monkeypatch.setattr(lifecycle, "validate_hosts", validate_hosts)
    monkeypatch.setattr(automation, "outputs", lambda spec: {"nodePrivateIps": [t.split("@")[1] for t in targets]})
    monkeypatch.setattr("goldenenv.cli.health.node_verdicts", lambda *args, **kwargs: [])
    monkeypatch.setattr(jobs, "cloud_head", lambda *args, **kwargs: None)
    monkeypatch.setattr(jobs, "scheduler_check", lambda spec, client: ([], []))
    result = runner.invoke(app, ["validate", "-s", "aws-p5-2node"])
    assert result.exit_code == 1, result.output
    assert f"{pool.name}-{pool.count - 1}: toolkit {package} 1.17.4-1, the lock pins {pinned}" in result.output
    assert f"{pool.name}-0:" not in result.output
    [(given, hosts, kwargs)] = seen
    assert given == layer and hosts == targets
    assert kwargs["instance_type"] == pool.instance_type and kwargs["golden_ref"] == host_checks.GOLDEN_CONTAINER


def test_validate_splits_the_nodes_by_pool_in_order(monkeypatch):
    spec = lifecycle.load_spec("aws-p5-2node")
    second = spec.nodes[0].model_copy(update={"name": "extra", "count": 1})
    spec = spec.model_copy(update={"nodes": [*spec.nodes, second]})
    targets = [f"ssh://ubuntu@10.42.0.{10 + i}" for i in range(sum(p.count for p in spec.nodes))]
    seen = []
    monkeypatch.setattr(host_checks, "check_hosts", lambda layer, hosts, **kw: seen.append(hosts) or
                        host_checks.HostCheckResult(False, "", {hosts[0]: ["x"]}, {hosts[0]: ["drifted"]}))
    _, drift = lifecycle.validate_host_layers(spec, targets, log=lambda m: None)
    assert seen == [targets[:spec.nodes[0].count], targets[spec.nodes[0].count:]]
    assert drift == {f"{spec.nodes[0].name}-0": ["drifted"], "extra-0": ["drifted"]}
