"""pytest plugin behind `goldenenv image check`: the suite's options and its parametrisation from a lock."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from goldenenv import accelerators, clouds
from goldenenv.checks import expectations
from goldenenv.images.lock import Lock, load

PROBE_SOURCE = Path(__file__).with_name("probe.py")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("goldenenv")
    group.addoption("--lock", required=True, help="images/<name>/lock.yaml the host must match")
    group.addoption("--python", default="python3", help="the image's Python on the host")
    group.addoption("--exec-prefix", default="", help="run probes through this, e.g. 'docker exec goldenenv' on a node")
    group.addoption("--gpu", action="store_true", help="also run the accelerator-host checks (driver, devices, "
                    "all-reduce; an NPU lock's family checks)")
    group.addoption("--cloud", default=None, choices=clouds.names(),
                    help="the cloud whose catalog lists --instance-type; needed with it (no cloud is assumed)")
    group.addoption("--instance-type", default=None, help="catalog instance type the GPU checks compare with")
    group.addoption("--host-driver", default=None,
                    help="NVIDIA driver the node's host image pins (catalog host_images.csv); a GPU reporting "
                         "another driver fails the check")


def pytest_configure(config: pytest.Config) -> None:
    """An instance type is judged by one cloud's catalog: without --cloud it is a usage error naming the flag and the
    clouds of the registry, never another cloud's row."""
    instance_type = config.getoption("--instance-type", default=None)
    if instance_type and not config.getoption("--cloud", default=None):
        raise pytest.UsageError(f"--instance-type {instance_type} needs --cloud, the cloud whose catalog lists it "
                                f"(one of {', '.join(clouds.names())})")


def lock_from(config: pytest.Config) -> Lock:
    path = Path(config.getoption("--lock"))
    return load(path.parent.name, path.parent.parent)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "expectation" in metafunc.fixturenames:
        found = expectations.expectations(lock_from(metafunc.config))
        metafunc.parametrize("expectation", found, ids=[e.id for e in found])
    if "node_check" in metafunc.fixturenames:
        checks = node_checks(lock_from(metafunc.config)) if metafunc.config.getoption("--gpu") else []
        metafunc.parametrize("node_check", checks, ids=[ident for ident, _ in checks])


def node_checks(lock: Lock) -> list:
    """The checks the lock's accelerator family gives for a node with its devices (Ascend: the NPU driver, npu-smi's
    NPUs healthy, torch_npu seeing them), as (id, verify(probe))."""
    return [check for family in accelerators.used_by(lock) for check in family.node_checks(lock)]


def run_python(host, config: pytest.Config, source: str, *args: str):
    prefix = config.getoption("--exec-prefix")
    command = " ".join(filter(None, [prefix, config.getoption("--python"), "-c", shlex.quote(source),
                                     *map(shlex.quote, args)]))
    return host.run(command)


_PROBES: dict[str, dict] = {}


@pytest.fixture
def probe(host, request: pytest.FixtureRequest) -> dict:
    """The host's probe report, taken once per host."""
    key = host.backend.get_hostname() + request.config.getoption("--exec-prefix")
    if key not in _PROBES:
        arguments = expectations.probe_arguments(lock_from(request.config))
        done = run_python(host, request.config, PROBE_SOURCE.read_text(), *arguments)
        assert done.rc == 0, f"probe failed on {key}: {done.stderr.strip()[-500:]}"
        _PROBES[key] = json.loads(done.stdout)
    return _PROBES[key]
