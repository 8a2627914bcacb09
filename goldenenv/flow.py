"""The whole local flow, phase by phase, timed: what a newcomer runs first."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from goldenenv import jobs, lifecycle
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.progress import Steps, heartbeat
from goldenenv.spec import ClusterSpec


@dataclass
class Phase:
    name: str
    seconds: float
    ok: bool
    note: str
    value: object = None
    """What the phase produced (outputs, a Validation, a DrillReport ...)."""


@dataclass
class FlowReport:
    phases: list[Phase] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.phases)

    def value(self, name: str) -> object:
        return next((p.value for p in self.phases if p.name == name), None)

    def table(self) -> Table:
        table = Table(title="local flow", title_justify="left")
        for col in ("phase", "seconds", "result", "what happened"):
            table.add_column(col)
        for p in self.phases:
            table.add_row(p.name, f"{p.seconds:.1f}", "[green]ok[/]" if p.ok else "[red]failed[/]", escape(p.note))
        table.caption = f"total {sum(p.seconds for p in self.phases):.1f} s"
        return table


def phases(scheduler: str | None) -> tuple[str, ...]:
    """The flow's phases in order: with Slurm the training goes through the queue (submit, then the drill kills a
    node and Slurm requeues the job); without a scheduler it runs directly (train, then the drill)."""
    middle = ("submit", "drill") if scheduler == "slurm" else ("train", "drill")
    return ("image", "up", "validate", *middle, "destroy")


def _phase_steps(console: Console, status, name: str) -> Steps:
    """A phase's progress: at a terminal its status line shows the latest message; in a pipe or a log every message
    is a line, and a heartbeat names the phase when nothing was written for 10 s."""
    def show(message: str) -> None:
        status.update(f"[bold]{name}[/] · {escape(message[:70])}" if message != name else f"[bold]{name}[/]")

    def line(message: str) -> None:
        console.print(f"  {escape(message if message.startswith(name) else f'{name} · {message}')}", highlight=False,
                      soft_wrap=True)

    return Steps(line if not console.is_terminal else lambda message: None, show)


def run_flow(spec: ClusterSpec, options: BuildOptions, examples: Path, steps: int = 120,
             destroy_after: bool = True, console: Console | None = None, client=None) -> FlowReport:
    console = console or Console()
    client = client or docker.from_env()
    report = FlowReport()

    live: dict[str, Callable[[str], None]] = {}

    def phase(name: str, action) -> object:
        started = time.monotonic()
        with console.status(f"[bold]{name}[/]") as status, heartbeat(_phase_steps(console, status, name)) as steps:
            live["show"] = steps.show
            steps.begin(name)
            try:
                ok, note, value = action(steps.note)
            except Exception as e:  # noqa: BLE001 - a failed phase is reported, then the flow stops
                ok, note, value = False, f"{type(e).__name__}: {e}", None
            steps.close()
        report.phases.append(Phase(name, time.monotonic() - started, ok, note, value))
        console.print(f"{'[green]✓[/]' if ok else '[red]✗[/]'} {name}: {escape(note)}", highlight=False)
        return value if ok else None

    def image(log):
        tag = lifecycle.ensure_image(spec, options, client, log, show=live["show"])
        return True, tag, tag

    def up(log):
        outputs = lifecycle.up(spec, options, client, log)
        return True, f"{len(outputs['nodes'])} nodes: {', '.join(outputs['nodePrivateIps'])}", outputs

    def validate(log):
        result = lifecycle.validate(spec, client, log)
        summary = result.image_checks.strip().splitlines()[-1] if result.image_checks.strip() else ""
        healthy = sum(not v.fails for v in result.health)
        note = (f"image checks {summary.strip('= ')}; drift: {'; '.join(result.drift) or 'none'}; "
                f"{result.allreduce_note}; health: {healthy} of {len(result.health)} nodes healthy")
        if spec.scheduler == "slurm":
            note += "; sinfo: " + (", ".join(f"{n.name} {n.state.split('+')[0].lower()}" for n in result.scheduler)
                                   or "no nodes") + "".join(f"; {p}" for p in result.scheduler_problems)
        return result.ok, note, result

    def train(log):
        lines: list[str] = []
        where = jobs.places(spec)
        run_dir = f"{where.checkpoints}/flow-{int(time.time())}"
        command = ["python", f"{where.code}/train_ddp.py", "--steps", str(steps), "--checkpoint-every", "20",
                   "--checkpoint-dir", run_dir]
        result = lifecycle.run(spec, command, lambda node, text: (lines.append(text), log(f"[{node}] {text}")),
                               code=examples, client=client)
        done = lifecycle.done_event(lines) if result.ok else {}
        note = (f"{done.get('world_size')} ranks, {done.get('final_step')} steps, loss {done.get('first_loss', 0):.3f}"
                f" → {done.get('last_loss', 0):.3f}, checkpoints in {run_dir}") if done else f"exit codes {result.exit_codes}"
        return result.ok and done.get("final_step") == steps, note, done

    def drill(log):
        result = lifecycle.drill(spec, examples, client=client, log=log)
        note = (f"killed a node at step {result.step_at_kill}, resumed from checkpoint {result.resumed_from}, "
                f"lost {result.lost_steps} steps (interval {result.interval})")
        return result.ok, note, result

    queued: dict = {}

    def submit(log):
        # 0.05 s a step, as the drill's own runs: at full speed a quiet machine could finish the run before the
        # drill sees its second checkpoint, and there would be nothing left to kill
        head, job_id = lifecycle.submit_training(spec, examples, steps, 10, 0.05, client, log, name="flow")
        job = lifecycle.wait_job(head, spec, job_id, lambda j: j.state == "RUNNING", timeout=120)
        queued["job"] = (head, job_id)
        return True, f"job {job_id} {job.state.lower()} on {job.nodes} (goldenenv jobs, goldenenv logs {job_id})", job

    def slurm_drill(log):
        result = lifecycle.slurm_drill(spec, examples, steps, 10, client=client, log=log, job=queued["job"])
        note = (f"killed a node at step {result.step_at_kill}; Slurm requeued job {result.job_id} (restarts "
                f"{result.restarts}), back {result.back_after_s:.0f} s later, resumed from checkpoint "
                f"{result.resumed_from}, lost {result.lost_steps} steps (interval {result.interval}), "
                f"completed at step {result.final_step}; {job_cost(queued['job'][0], result.job_id)}")
        return result.ok and result.final_step == steps, note, result

    def job_cost(head, job_id: str) -> str:
        """Whose job it was and what it cost, every start of it, from Slurm's accounting (`goldenenv cost`)."""
        from datetime import datetime, timezone

        found = jobs.with_costs(head, spec, jobs.list_jobs(head, jobs.places(spec).checkpoints, job_id),
                                datetime.now(timezone.utc))
        job = found[0] if found else None
        if job is None or job.gpu_hours is None:
            return "its cost is not in Slurm's accounting yet (goldenenv cost)"
        cost = "not priced" if job.cost is None else f"{job.cost:.2f} {job.currency}"
        return f"run by {job.user}, {job.gpu_hours:.3f} GPU-hours, {cost} (goldenenv cost)"

    def destroy(log):
        removed = lifecycle.destroy(spec, False, client, log)
        return True, f"removed {len(removed)}; data volume kept", removed

    actions = {"image": image, "up": up, "validate": validate, "destroy": destroy,
               "train": train, "drill": slurm_drill if spec.scheduler == "slurm" else drill, "submit": submit}
    *running, last = phases(spec.scheduler)
    for name in running:
        if phase(name, actions[name]) is None:
            break
    if destroy_after:
        phase(last, actions[last])
    console.print(report.table())
    return report
