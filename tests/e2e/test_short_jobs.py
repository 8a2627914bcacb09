"""Short trainings that finish end COMPLETED, every one (issue 36 item 2).

A rank that aborted at exit ("terminate called without an active exception") made about one short job in ten
FAILED although the training printed "done". Here many 2-step trainings with no sleep between steps, the case that hit
it most, are queued one after another on the local Slurm stack, and every one must end COMPLETED with its "done" line.

The suite queues DEFAULT_JOBS, what fits in about 75 s on this 2-core machine (a 2-step job took 15 s at the median of
100, 10 s when the machine was quiet); the issue's bar is 100 in a row:

    GOLDENENV_SOAK_JOBS=100 pytest tests/e2e/test_short_jobs.py
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import lifecycle
from goldenenv.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEFAULT_JOBS = 5
JOBS = int(os.environ.get("GOLDENENV_SOAK_JOBS", DEFAULT_JOBS))
JOB_LIMIT_S = 240
"""The most one 2-step job may take from queued to ended on a loaded 2-core machine (measured 8 to 111 s a job,
the slowest while other image builds and clusters shared the 2 cores)."""
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL")


@pytest.fixture(scope="module")
def cli(client):
    spec = lifecycle.load_spec("local")
    runner = CliRunner()

    def invoke(*args: str, code: int = 0):
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, (args, result.output, result.exception)
        return result

    lifecycle.destroy(spec, purge_data=True, client=client, log=lambda m: None)
    invoke("up")
    yield invoke
    lifecycle.destroy(spec, purge_data=True, client=client, log=lambda m: None)


def test_every_short_training_that_finishes_ends_completed(cli):
    started = time.monotonic()
    ids = [cli("submit", "--nodes", "2", "--name", f"short-{n}", "--code", str(EXAMPLES), "--", "python",
               "/data/code/train_ddp.py", "--steps", "2", "--log-every", "1").stdout.strip() for n in range(JOBS)]
    assert all(i.isdigit() for i in ids), ids
    deadline = started + JOB_LIMIT_S * JOBS
    while True:
        jobs = {j["id"]: j for j in json.loads(cli("jobs", "--json").stdout) if j["id"] in ids}
        if all(jobs.get(i, {}).get("state") in ENDED for i in ids):
            break
        assert time.monotonic() < deadline, {i: jobs.get(i, {}).get("state") for i in ids}
        time.sleep(2)
    took = time.monotonic() - started
    print(f"{JOBS} short jobs in {took:.0f} s, {took / JOBS:.1f} s a job")

    failed = {i: j["state"] for i, j in jobs.items() if j["state"] != "COMPLETED"}
    evidence = {i: cli("logs", i).stdout[-1500:] for i in list(failed)[:3]}
    assert not failed, f"{len(failed)} of {JOBS} short jobs did not end COMPLETED: {failed}\n{evidence}"
    for i in (ids[0], ids[-1]):
        assert '"event": "done"' in cli("logs", i).stdout
