"""Shared pieces of the node-boot tests: the emulated host's image, a local registry holding the golden image by
digest, the emulated cloud's APIs, the team's key pair, and the shipped cloud stacks the selected tests need, created
on the emulated cloud with their Slurm head and first node booted (tests/nodeboot/emulated_stack.py): `pytest -m
node_boot -k aws-g5-dev` boots aws-g5-dev's hosts only.

With GOLDENENV_NODE_BOOT_DRY_RUN=FILE the run is a dry run of which stacks the selection boots: each boot writes the
stack's name to FILE instead, no image, registry, stand-in or host is made and no test body runs
(tests/nodeboot/test_boot_selection.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import apt_stand_in
import emulated_cloud
import emulated_host
import emulated_stack
from goldenenv.images import host as host_layer


DRY_RUN = os.environ.get("GOLDENENV_NODE_BOOT_DRY_RUN")
"""The file a dry run writes each booted stack's name to; unset: a real run."""
NOTHING = "dry run: nothing made"


@pytest.fixture(scope="session")
def golden_base(client) -> str:
    return NOTHING if DRY_RUN else emulated_stack.golden_base(client)


@pytest.fixture(scope="session")
def host_image(client, golden_base) -> str:
    if DRY_RUN:
        return NOTHING
    return apt_stand_in.host_image(client, emulated_host.host_image(client, golden_base))


@pytest.fixture(scope="session")
def golden_ref(client, golden_base, tmp_path_factory) -> str:
    """The golden image pushed to a registry on this machine's loopback; what nodes pull: repository@sha256:..."""
    if DRY_RUN:
        yield NOTHING
        return
    registry, url = emulated_stack.start_registry(client, golden_base)
    yield emulated_stack.publish_golden(client, url, tmp_path_factory.mktemp("published"))
    registry.remove(force=True)


@pytest.fixture(scope="session")
def cloud_apis(client, host_image, tmp_path_factory) -> emulated_cloud.CloudApis:
    """The cloud's APIs (moto for AWS; Alibaba's KMS and NAS), one container that every stack's network joins."""
    if DRY_RUN:
        yield NOTHING
        return
    apis = emulated_cloud.CloudApis(client, host_image, tmp_path_factory.mktemp("cloud-apis"))
    yield apis
    apis.remove()


@pytest.fixture(scope="session")
def stack_key(tmp_path_factory) -> dict:
    return emulated_stack.make_key(tmp_path_factory.mktemp("stack-key"))


@pytest.fixture(scope="session")
def boot(client, host_image, golden_ref, stack_key, cloud_apis, host_repositories, tmp_path_factory):
    """boot(stack) -> Stack: the stack on the emulated cloud, its head and first node booting (one per stack,
    removed at the end), their host layer installed from the stand-in (a session fixture is set up before the
    module's, so it serves here too)."""
    booted: dict[str, emulated_stack.Stack] = {}

    def start(stack: str) -> emulated_stack.Stack:
        if stack not in booted:
            if DRY_RUN:
                with Path(DRY_RUN).open("a") as record:
                    record.write(stack + "\n")
                booted[stack] = emulated_stack.not_booted(stack)
                return booted[stack]
            with apt_stand_in.serving(host_repositories, cloud_apis.authority):
                booted[stack] = emulated_stack.boot(client, host_image, stack, golden_ref, stack_key,
                                                    tmp_path_factory.mktemp(stack), cloud_apis)
        return booted[stack]

    yield start
    for stack in booted.values():
        stack.remove()


@pytest.fixture(scope="session")
def stacks(request, boot) -> emulated_stack.Stacks:
    """The stacks the run's selected tests are parametrized over, booted when the first of those tests runs and
    side by side (each test waits for its own); a stack no selected test names is booted when first asked for."""
    return emulated_stack.Stacks(boot, emulated_stack.wanted_stacks(request.session.items))


@pytest.fixture(scope="session")
def host_repositories(client, host_image, cloud_apis, tmp_path_factory) -> apt_stand_in.StandIn:
    """The shipped host lock's repositories for the run's emulated hosts (tests/nodeboot/apt_stand_in.py)."""
    if DRY_RUN:
        yield NOTHING
        return
    stand_in = apt_stand_in.start(client, host_image, tmp_path_factory.mktemp("apt"), cloud_apis.authority,
                                  host_layer.load_host("ubuntu-gpu"))
    yield stand_in
    stand_in.remove()


@pytest.fixture(scope="module", autouse=True)
def hosts_install_from_the_stand_in(request):
    """Each node-boot module's hosts install their host layer at first boot from the stand-in, as they would from
    the vendors' (apt_stand_in.serving): for the module only, so no other test sees its host lock. A module that
    boots nothing (not marked node_boot) starts no stand-in."""
    if DRY_RUN or request.node.get_closest_marker("node_boot") is None:
        yield
        return
    cloud_apis = request.getfixturevalue("cloud_apis")
    with apt_stand_in.serving(request.getfixturevalue("host_repositories"), cloud_apis.authority):
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """In a dry run a test's fixtures are set up (that is what boots) but its body does not run."""
    return True if DRY_RUN else None
