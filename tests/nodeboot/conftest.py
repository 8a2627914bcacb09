"""Shared pieces of the node-boot tests: the emulated host's image, a local registry holding the golden image by
digest, the team's key pair, and a booted node per shipped cloud stack (tests/nodeboot/emulated_stack.py)."""

from __future__ import annotations

import pytest

import emulated_host
import emulated_stack


@pytest.fixture(scope="session")
def golden_base(client) -> str:
    return emulated_stack.golden_base(client)


@pytest.fixture(scope="session")
def host_image(client, golden_base) -> str:
    return emulated_host.host_image(client, golden_base)


@pytest.fixture(scope="session")
def golden_ref(client, golden_base, tmp_path_factory) -> str:
    """The golden image pushed to a registry on this machine's loopback; what nodes pull: repository@sha256:..."""
    registry, url = emulated_stack.start_registry(client, golden_base)
    yield emulated_stack.publish_golden(client, url, tmp_path_factory.mktemp("published"))
    registry.remove(force=True)


@pytest.fixture(scope="session")
def stack_key(tmp_path_factory) -> dict:
    return emulated_stack.make_key(tmp_path_factory.mktemp("stack-key"))


@pytest.fixture(scope="session")
def boot(client, host_image, golden_ref, stack_key, tmp_path_factory):
    """boot(stack) -> Booted: the stack's first node on an emulated host (one per stack, removed at the end)."""
    booted: dict[str, emulated_stack.Booted] = {}

    def start(stack: str) -> emulated_stack.Booted:
        if stack not in booted:
            booted[stack] = emulated_stack.boot(client, host_image, stack, golden_ref, stack_key,
                                                tmp_path_factory.mktemp(stack))
        return booted[stack]

    yield start
    for node in booted.values():
        node.remove()
