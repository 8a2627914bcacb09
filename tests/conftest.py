"""Shared fixtures: the Docker engine that image and local-cluster tests build and run on; and, in a run spread over
workers (pytest -n, as ./scripts/test.sh runs the suite), which worker runs what (tests/engine_apart.py)."""

from __future__ import annotations

import ast
import functools
import gc
import os

import docker
import pytest


@functools.wraps(ast.parse)
def _parse_without_finalizers(*args, **kwargs):
    """ast.parse with the garbage collector paused.

    In Python 3.11 the AST constructor keeps its recursion depth in state the whole interpreter shares (its
    mismatch errors: python/cpython#106905). A finalizer that the collector runs while a tree is built and that
    parses too leaves that depth off, and the outer parse fails with "SystemError: AST constructor recursion depth
    mismatch". asyncio's "Future exception was never retrieved" log, for a future a failed Pulumi mock run left
    behind, is such a finalizer (traceback's carets parse the line). The suite's source walks (import graph, shared
    modules, cloud imports...) run in workers that also run Pulumi programs, so every parse here, pytest's
    assertion rewriting included, holds the collector back for its few milliseconds."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _ast_parse(*args, **kwargs)
    finally:
        if was_enabled:
            gc.enable()


_ast_parse = ast.parse
ast.parse = _parse_without_finalizers


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    try:
        engine = docker.from_env()
        engine.ping()
    except docker.errors.DockerException as e:
        pytest.fail(f"no Docker engine ({e}); ./scripts/test.sh starts one")
    return engine


GPU_IMAGE = "gpu_image"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The GPU image build (about 20 minutes and 10 GB of downloads on a 2-core machine) runs only when asked for
    with `-m gpu_image`; the default run stays well under the CI limit."""
    if GPU_IMAGE in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="builds the h100-torch GPU image: ./scripts/test.sh -m gpu_image runs it")
    for item in items:
        if GPU_IMAGE in item.keywords:
            item.add_marker(skip)


TERMINAL = ("COLUMNS", "LINES")
"""The variables that size a terminal, which xdist's workers are started with (80 x 24) where the run had none: the
CLI's console would be cut at 80 columns in a worker and not in a run without -n."""


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Hands each worker the run's own terminal size variables (unset where the run had none)."""
    node.workerinput["terminal"] = {name: os.environ.get(name) for name in TERMINAL}


def pytest_configure(config: pytest.Config) -> None:
    """In a worker, the terminal size variables are the run's, not the ones xdist started the worker with."""
    for name, value in getattr(config, "workerinput", {}).get("terminal", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Whatever --dist asks for, the tests that use the Docker engine run in one worker, in order, while the unit
    tests run beside them (tests/engine_apart.py); --dist each, which runs every test on every worker, is left as
    it is."""
    if config.getvalue("dist") == "each":
        return None
    from engine_apart import EngineApart

    return EngineApart(config, log)
