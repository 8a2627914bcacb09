"""The queue: submit, jobs, logs, cancel (top-level commands) on a stack whose scheduler is Slurm."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from goldenenv.cli.common import HOSTS_BY, STACK, console, errors, fail, lifecycle_failure, stack_spec
from goldenenv import clouds
from goldenenv.clouds.base import HostsBy, NodeReach
from goldenenv.spec import ConfigError, Problem

app = typer.Typer()

HEAD = typer.Option(None, "--head", help="Cloud stacks: the head node (ssh://user@address[:port]); default: the "
                    "stack output headPrivateIp (or headInstanceId with --hosts-by instance-id).")
SSH_CONFIG = typer.Option(None, "--ssh-config", help="Cloud stacks: ssh config reaching the head (bastion or SSM "
                          "ProxyCommand, IdentityFile).")
SSH_USER = typer.Option(None, "--ssh-user", help="Cloud stacks: login on the head; default: the cloud's (the key's "
                        "user, or yours by OS Login or Entra ID on Google Cloud and Azure without a key).")
EXEC_PREFIX = typer.Option(None, "--exec-prefix", help="Cloud stacks: how to reach the golden container on the "
                           "head; default: docker exec --user <the image's user> goldenenv, through sudo -n where "
                           "the login is outside the docker group.")
JOB = typer.Argument(..., help="The job id `goldenenv submit` printed (goldenenv jobs lists them).")


def head_client(spec, head: str | None, ssh_config: str | None, ssh_user: str | None, hosts_by: HostsBy | None,
          exec_prefix: str | None):
    """The head's Slurm client, and the local cluster when the stack is local (None on clouds)."""
    from goldenenv import jobs

    jobs.require_slurm(spec)
    if clouds.get(spec.cloud).reaches_nodes_by is NodeReach.DOCKER:
        given = [name for name, value in {"--head": head, "--ssh-config": ssh_config, "--ssh-user": ssh_user,
                                          "--hosts-by": hosts_by, "--exec-prefix": exec_prefix}.items() if value]
        if given:
            errors.print(f"{', '.join(given)}: for cloud stacks; {spec.stack}'s head is a local container")
            raise typer.Exit(2)
        return jobs.local_head(spec)
    return jobs.cloud_head(spec, head, ssh_config, None, ssh_user, hosts_by or HostsBy.PRIVATE_IP,
                           exec_prefix), None


@contextmanager
def reported():
    """Bad input is exit 2 naming it; a head that cannot be reached or a Slurm command that fails is exit 1."""
    from goldenenv import automation, jobs, remote

    try:
        yield
    except ConfigError as e:
        fail(e)
    except jobs.NoSuchJob as e:
        errors.print(f"[bold red]{escape(str(e))}[/]")
        raise typer.Exit(2) from None
    except (jobs.HeadError, automation.LifecycleError, remote.RemoteError) as e:
        lifecycle_failure(e)


def _job_id(job_id: str) -> str:
    if not job_id.isdigit():
        errors.print(f"[bold red]JOB {escape(job_id)}[/]: a job id is a number (goldenenv jobs lists them)")
        raise typer.Exit(2)
    return job_id


@app.command("submit", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def submit_cmd(ctx: typer.Context, stack: str = STACK,
               nodes: int = typer.Option(..., "--nodes", "-N", help="Nodes the job runs on (one torchrun each)."),
               gpus_per_node: int = typer.Option(None, "--gpus-per-node", help="GPUs (and ranks) per node; "
                                                 "default: every GPU of the node type."),
               code: Path = typer.Option(None, "--code", help="Copy this folder to <shared file system>/code "
                                         "first (/data/code locally, e.g. /fsx/code on AWS)."),
               hours: float = typer.Option(None, "--time", help="Time limit in hours (Slurm ends the job then); "
                                           "default: none."),
               name: str = typer.Option(None, "--name", help="The job's name in `goldenenv jobs`; default: train, "
                                        "or the resumed run's."),
               resume: str = typer.Option(None, "--resume", metavar="RUN", help="Continue this run (`goldenenv "
                                          "jobs --wide` shows runs): the job gets its run folder, so its "
                                          "checkpoints, and appends to its output."),
               head: str = HEAD, ssh_config: str = SSH_CONFIG, ssh_user: str = SSH_USER,
               hosts_by: HostsBy = HOSTS_BY, exec_prefix: str = EXEC_PREFIX) -> None:
    """Queue CMD on N nodes under torchrun; it is requeued and resumes by itself when a node is lost.

    goldenenv submit --nodes 2 --code examples -- python /data/code/train_ddp.py --steps 300

    Output goes to <shared FS>/jobs/RUN.out, checkpoints to $GOLDENENV_CHECKPOINTS (<checkpoints>/RUN), the same
    on every start of the job; RUN is the job's name, when it was submitted and a random word. --resume RUN
    continues a cancelled or ended run from its checkpoints (a training that resumes from them, as
    examples/train_ddp.py does, goes on from its last step)."""
    from goldenenv import jobs, remote

    command = list(ctx.args)
    if not command:
        errors.print("give the command after --, e.g. goldenenv submit --nodes 2 --code examples -- "
                     "python /data/code/train_ddp.py")
        raise typer.Exit(2)
    if code is not None and not code.is_dir():
        errors.print(f"[bold red]--code {escape(str(code))}[/]: no such folder")
        raise typer.Exit(2)
    spec = stack_spec(stack)
    with reported():
        client, cluster = head_client(spec, head, ssh_config, ssh_user, hosts_by, exec_prefix)
        job = jobs.batch_job(spec, command, nodes, gpus_per_node, hours, name, jobs.slurmd_timeout(spec), resume)
        where = jobs.places(spec)
        if resume is not None:
            jobs.check_resume(client, where, resume)
        if code is not None:
            if cluster is not None:
                cluster.sync_code(code)
            elif where.shared:
                remote.sync_code(code, [client.host], where.code, client.ssh, client.exec_prefix, True)
            else:
                raise ConfigError([Problem("--code", f"{spec.stack} has no shared file system for the code "
                                                "to reach every node: copy it with goldenenv run --code, or add "
                                                "goldenenv:storage.parallelFs")])
        job_id = jobs.submit(client, job, where.jobs)
    console.print(job_id)
    errors.print(f"queued job {job_id} on {nodes} node(s) of {spec.stack}"
                 + (f", resuming run {job.run}" if resume else "") + f": output {where.jobs}/{job.run}.out, "
                 f"checkpoints {where.checkpoints}/{job.run} (goldenenv logs -s {spec.stack} {job_id} -f)",
                 highlight=False, markup=False, soft_wrap=True)


@app.command("jobs")
def jobs_cmd(stack: str = STACK, as_json: bool = typer.Option(False, "--json", help="One JSON list, for scripts."),
             wide: bool = typer.Option(False, "--wide", help="Every column (run, restarts, submitted, reason), "
                                       "whatever the terminal's width."),
             earlier: bool = typer.Option(False, "--all", help="Also the jobs Slurm no longer lists whose output is "
                                          "on the shared file system (earlier clusters', or ended over a day ago)."),
             head: str = HEAD, ssh_config: str = SSH_CONFIG, ssh_user: str = SSH_USER,
             hosts_by: HostsBy = HOSTS_BY, exec_prefix: str = EXEC_PREFIX) -> None:
    """The stack's jobs (finished ones for a day): id, name, state (with restarts and Slurm's reason), nodes, start
    and elapsed (UTC; a pending job's start is Slurm's estimate where it has a real one), the checkpoint step, the
    user, and the GPU-hours and cost of every start so far (Slurm's accounting × the pool's GPU-hour price, as
    `goldenenv cost` reports them);
    then every node out of service with Slurm's reason (a failed health rule, a spot notice).

    The checkpoint step is the newest one the job wrote itself (of its run folder's step-N.pt, those written from
    its submission until a later job resumed the run, its final checkpoint on a cancel included): a run resumed with
    --resume shows each job's own. At 80 columns long cells wrap; --wide shows every column."""
    from datetime import datetime, timezone

    from goldenenv import jobs
    from goldenenv.cli import jobtable

    spec = stack_spec(stack)
    with reported():
        client, _ = head_client(spec, head, ssh_config, ssh_user, hosts_by, exec_prefix)
        where = jobs.places(spec)
        found = jobs.list_jobs(client, where.checkpoints, jobs_dir=where.jobs)
        unpriced = ""
        try:
            found = jobs.with_costs(client, spec, found, datetime.now(timezone.utc))
        except jobs.HeadError as e:  # the queue is still worth showing without Slurm's accounting
            unpriced = str(e)
        out_of_service = [n for n in jobs.scheduler_nodes(client) if n.reason] if not as_json else []
        listed = {(j.id, j.run) for j in found}
        history = [e for e in jobs.recorded_jobs(client, where) if (e.id, e.run) not in listed] if earlier else []
    if unpriced:
        errors.print(f"[yellow]GPU-hours and cost unknown[/]: {escape(unpriced)}", soft_wrap=True)
    if as_json:
        print(json.dumps([j.to_dict() for j in found] + [{"id": e.id, "run": e.run, "submitted": e.submitted,
                                                          "state": "GONE"} for e in history], indent=2))
        return
    if not found:
        console.print("no jobs")
    else:
        shown = jobtable.table(spec.stack, found, datetime.now(timezone.utc), wide)
        if wide:  # as wide as the rows are: a terminal narrower than that wraps lines, never cells
            natural = console.measure(shown, options=console.options.update_width(10_000)).maximum
            Console(emoji=False, width=max(console.width, natural)).print(shown)
        else:
            console.print(shown)
    if history:
        console.print(jobtable.history(history))
    for node in out_of_service:  # why a job waits: a node drained (its health check, a spot notice) or down
        console.print(f"[yellow]{escape(node.name)}[/] {escape(node.state.lower())}: {escape(node.reason)}",
                      highlight=False, soft_wrap=True)


@app.command("logs")
def logs_cmd(job_id: str = typer.Argument(None, help="The job id `goldenenv submit` printed (goldenenv jobs lists "
                                          "them); a job of an earlier cluster whose output is still there too."),
             stack: str = STACK,
             run: str = typer.Option(None, "--run", metavar="RUN", help="The run's output instead (every job of it): "
                                     "where an id was used by jobs of several clusters."),
             follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the job has ended."),
             head: str = HEAD, ssh_config: str = SSH_CONFIG, ssh_user: str = SSH_USER,
             hosts_by: HostsBy = HOSTS_BY, exec_prefix: str = EXEC_PREFIX) -> None:
    """A job's output, every start of it (requeues append, and so do jobs that resume its run).

    After `goldenenv destroy` (data kept) and `up`, Slurm numbers jobs from 1 again and forgets the old ones; their
    output stays on the shared file system and logs finds it by the old id (goldenenv keeps a job index there,
    <jobs>/goldenenv-jobs.tsv). Where several clusters had a job with that id, it names their runs: give --run."""
    from goldenenv import jobs

    if (job_id is None) == (run is None):
        errors.print("give a JOB id or --run RUN (goldenenv jobs --wide lists both)")
        raise typer.Exit(2)
    if job_id is not None:
        _job_id(job_id)
    spec = stack_spec(stack)
    with reported():
        client, _ = head_client(spec, head, ssh_config, ssh_user, hosts_by, exec_prefix)
        where = jobs.places(spec)
        if run is not None:
            path, current = jobs.run_output(client, where, run), False
        else:
            found = jobs.find_output(client, where, job_id)
            path, current = found.path, found.current
            if not found.current:
                errors.print(f"job {job_id}, no longer in Slurm's list (an earlier cluster's, or ended over a day "
                             f"ago): run {found.run}", highlight=False, soft_wrap=True)
            elif found.earlier:
                errors.print(f"job {job_id} of this cluster (run {found.run}); an earlier cluster's: "
                             + ", ".join(f"goldenenv logs --run {e.run}" for e in found.earlier), highlight=False,
                             soft_wrap=True)
        for text in jobs.follow(client, path, job_id or "", where.checkpoints, follow_on=follow and current):
            print(text, end="", flush=True)


@app.command("cancel")
def cancel_cmd(job_id: str = JOB, stack: str = STACK, head: str = HEAD, ssh_config: str = SSH_CONFIG,
               ssh_user: str = SSH_USER, hosts_by: HostsBy = HOSTS_BY, exec_prefix: str = EXEC_PREFIX) -> None:
    """Cancel a job: Slurm stops it on every node; its checkpoints stay."""
    from goldenenv import jobs

    _job_id(job_id)
    spec = stack_spec(stack)
    with reported():
        client, _ = head_client(spec, head, ssh_config, ssh_user, hosts_by, exec_prefix)
        found = jobs.list_jobs(client, jobs.places(spec).checkpoints, job_id)
        if found and found[0].done:
            console.print(f"job {job_id} had already ended: {found[0].state}")
            return
        jobs.cancel(client, job_id)
    console.print(f"cancelled job {job_id}")
