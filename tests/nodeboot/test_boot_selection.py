"""`pytest -m node_boot -k STACK` boots that stack's hosts only, and a run of every stack's tests boots each stack
once: pytest runs the node-boot tests in a dry run (conftest.DRY_RUN: the fixtures are set up as in a real run, each
boot writes its stack's name down instead of creating hosts, and no test body runs), and the boots are read back.
Fast: no image, registry or host is made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import emulated_stack

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def booted_by(tmp_path: Path, *selection: str) -> list[str]:
    """The stacks `pytest -m node_boot SELECTION` boots, in the order it boots them."""
    record = tmp_path / "booted"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "node_boot", "-q", "-p", "no:cacheprovider", *selection],
        cwd=ROOT, env={**os.environ, "GOLDENENV_NODE_BOOT_DRY_RUN": str(record)}, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return record.read_text().split() if record.exists() else []


def test_k_with_a_stack_name_boots_that_stack_alone(tmp_path):
    assert booted_by(tmp_path, str(HERE), "-k", "aws-g5-dev") == ["aws-g5-dev"]


def test_every_stacks_boot_tests_boot_each_stack_once_and_side_by_side(tmp_path):
    booted = booted_by(tmp_path, str(HERE / "test_emulated_nodes.py"), str(HERE / "test_slurm_head.py"))
    assert booted == emulated_stack.CLOUD_STACKS, "each stack once, all at the first test that needs one"
