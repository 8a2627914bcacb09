"""Shared fixtures: the Docker engine that image and local-cluster tests build and run on."""

from __future__ import annotations

import docker
import pytest


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    try:
        engine = docker.from_env()
        engine.ping()
    except docker.errors.DockerException as e:
        pytest.fail(f"no Docker engine ({e}); ./scripts/test.sh starts one")
    return engine
