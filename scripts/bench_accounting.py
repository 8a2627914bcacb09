"""What Slurm accounting costs the local stack, from one run: up with an empty history and with a restored one, the
export destroy makes, how soon a finished job is in sacct, and `goldenenv cost` against `goldenenv jobs`.

    .venv/bin/python scripts/bench_accounting.py [--jobs 200]

Runs on the `local` stack (its data volume purged first and last). Submits --jobs one-second jobs as the image's
user (sbatch --wrap, in one burst), waits for them all in sacct, then destroys (exporting the history), ups again
(restoring it) and times each step. Prints seconds and the ratios that matter: a restored up against a fresh one,
`cost` against `jobs`.
"""

from __future__ import annotations

import argparse
import platform
import re
import time

import docker
from typer.testing import CliRunner

from goldenenv import lifecycle
from goldenenv.cli import app
from goldenenv.clouds.local.cluster import LocalCluster
from goldenenv.images.dockerfile import BuildOptions


def timed(step):
    started = time.monotonic()
    value = step()
    return time.monotonic() - started, value


def accounted(head) -> int:
    done = head.exec_run(["sacct", "--allusers", "--allocations", "--noheader", "--parsable2",
                          "--starttime", "2026-01-01", "--format=JobID,State"])
    rows = done.output.decode().split() if done.exit_code == 0 else []
    return sum(1 for row in rows if row.endswith("|COMPLETED"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    client, spec, runner = docker.from_env(), lifecycle.load_spec("local"), CliRunner()
    options = BuildOptions.from_environment()
    quiet = lambda message: None  # noqa: E731 - the steps' own lines are not the figures

    lifecycle.destroy(spec, purge_data=True, client=client, log=quiet, drop_accounting=True)
    fresh_up, _ = timed(lambda: lifecycle.up(spec, options, client, quiet))
    head = LocalCluster(spec, client).head()
    submit_s, _ = timed(lambda: head.exec_run(
        ["sh", "-c", f"for i in $(seq {args.jobs}); do sbatch --quiet --output=/dev/null --wrap true; done"],
        user="trainer", workdir="/home/trainer"))
    started = time.monotonic()
    while accounted(head) < args.jobs:
        if time.monotonic() - started > 1800:
            raise SystemExit(f"only {accounted(head)} of {args.jobs} jobs in sacct after 30 minutes")
        time.sleep(1)
    drained = time.monotonic() - started
    jobs_s, jobs_out = timed(lambda: runner.invoke(app, ["jobs", "--json"]))
    cost_s, cost_out = timed(lambda: runner.invoke(app, ["cost", "--by", "job", "--json"]))
    assert jobs_out.exit_code == 0 and cost_out.exit_code == 0, (jobs_out.output, cost_out.output)
    export_s, _ = timed(lambda: LocalCluster(spec, client).export_accounting(quiet))
    size = head.exec_run(["stat", "-c", "%s", "/data/jobs/.goldenenv/accounting.sql.gz"]).output.decode().strip()
    destroy_s, _ = timed(lambda: lifecycle.destroy(spec, client=client, log=quiet))
    restored_up, _ = timed(lambda: lifecycle.up(spec, options, client, quiet))
    head = LocalCluster(spec, client).head()
    kept = accounted(head)
    logs = head.logs().decode(errors="replace")
    first_id = re.search(r"job ids go on from (\d+)", logs)
    lifecycle.destroy(spec, purge_data=True, client=client, log=quiet, drop_accounting=True)

    print(f"machine: {platform.node()} ({platform.machine()}), {args.jobs} one-second jobs on the local stack")
    rows = [("up, empty history", fresh_up), (f"submit {args.jobs} jobs (sbatch)", submit_s),
            ("until every job is COMPLETED in sacct", drained), ("goldenenv jobs --json", jobs_s),
            ("goldenenv cost --by job --json", cost_s), (f"export ({size} bytes gzipped)", export_s),
            ("destroy (export included)", destroy_s), ("up, history restored", restored_up)]
    for name, seconds in rows:
        print(f"{name:45s} {seconds:8.2f} s")
    print(f"{'jobs in sacct after destroy and up':45s} {kept:8d} of {args.jobs}")
    print(f"{'first job id after the restore':45s} {first_id.group(1) if first_id else '-':>8s}")
    print(f"ratio: restored up / fresh up = {restored_up / fresh_up:.2f}; cost / jobs = {cost_s / jobs_s:.2f}; "
          f"export / destroy = {export_s / destroy_s:.2f}")


if __name__ == "__main__":
    main()
