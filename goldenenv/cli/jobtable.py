"""The `goldenenv jobs` table: at 80 columns the columns a user reads first, each whole (long cells wrap, none is cut
to "…"); --wide, every column. Times are Slurm's, in UTC, said in the header; a pending job's start is Slurm's
estimate only where it is a real one (view.start_estimate), never the year-ahead stand-in for "no time limit". Each
job's user is Slurm's; its GPU-hours (every start so far) and cost are `goldenenv cost`'s figures for it, blank
where Slurm's accounting has no record of it or its pool no price."""

from __future__ import annotations

from datetime import datetime

from rich import box
from rich.markup import escape
from rich.table import Table

from goldenenv.slurm import jobindex, view

def start_cell(job: view.Job, found: list[view.Job], now: datetime, wide: bool) -> str:
    estimate = view.start_estimate(job, found, now)
    if job.pending:
        return f"est. {when(estimate, now, wide)}" if estimate else "pending"
    began = view.started(job)
    return when(began, now, wide) if began else ""


def when(moment: datetime | None, now: datetime, wide: bool) -> str:
    if moment is None:
        return ""
    if wide:
        return f"{moment:%Y-%m-%d %H:%M:%S}"
    return f"{moment:%m-%d %H:%M}" if moment.year == now.year else f"{moment:%Y-%m-%d}"


def state_cell(job: view.Job) -> str:
    """The state, then its restarts and Slurm's reason on lines of their own (the narrow table has no columns
    for them)."""
    lines = [job.state]
    if job.restarts:
        lines.append(f"{job.restarts} restart{'s' if job.restarts > 1 else ''}")
    if job.reason:
        lines.append(escape(job.reason))
    return "\n".join(lines)


def hours_cell(job: view.Job) -> str:
    """Blank where accounting has no figure, or for a job that has not yet run."""
    return "" if job.gpu_hours is None or (job.pending and not job.gpu_hours) else f"{job.gpu_hours:.2f}"


def cost_cell(job: view.Job) -> str:
    """The narrow table shows a job's GPU-hours and its cost in one column, the cost on the line below (and its
    user below its name), so the table still fits 80 columns."""
    return "" if job.cost is None or (job.pending and not job.gpu_hours) else f"{job.cost:.2f}"


def table(stack: str, found: list[view.Job], now: datetime, wide: bool = False) -> Table:
    currency = next((j.currency for j in found if j.currency), "")
    shown = Table(title=f"jobs on {stack} (times {view.TIME_ZONE}" + (f", cost in {currency}" if currency else "")
                  + ")", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, caption=None if wide else "--wide: run, restarts, submitted, "
                  "reason in columns of their own", caption_justify="left")
    step = "step" if not wide else "checkpoint step"
    if wide:
        for column in ("id", "name", "user", "run", "state", "nodes", "restarts", f"submitted {view.TIME_ZONE}",
                       f"start {view.TIME_ZONE}", "elapsed", step, "GPU-hours", "cost", "reason"):
            shown.add_column(column, no_wrap=True)
    else:
        shown.add_column("id", no_wrap=True, justify="right")
        shown.add_column("name\nuser", overflow="fold", min_width=5)
        shown.add_column("state", overflow="fold", min_width=9)
        shown.add_column("nodes", overflow="fold", min_width=5)
        shown.add_column(f"start {view.TIME_ZONE}", no_wrap=True)
        shown.add_column("elapsed", no_wrap=True)
        shown.add_column(step, no_wrap=True, justify="right")
        shown.add_column("GPU-h\ncost", no_wrap=True, justify="right")
    for job in found:
        checkpoint = "" if job.checkpoint_step is None else str(job.checkpoint_step)
        elapsed = "" if job.pending and job.elapsed in ("", "00:00:00") else job.elapsed
        start = start_cell(job, found, now, wide)
        if wide:
            submitted = view.slurm_time(job.submitted)
            shown.add_row(job.id, escape(job.name), escape(job.user), escape(job.run), job.state, escape(job.nodes),
                          str(job.restarts), when(submitted, now, True), start, elapsed, checkpoint, hours_cell(job),
                          cost_cell(job), escape(job.reason))
        else:
            shown.add_row(job.id, "\n".join(escape(c) for c in (job.name, job.user) if c), state_cell(job),
                          escape(job.nodes), start, elapsed, checkpoint,
                          "\n".join(c for c in (hours_cell(job), cost_cell(job)) if c))
    return shown


def history(entries: list[jobindex.Entry]) -> Table:
    """Jobs Slurm no longer lists (an earlier cluster's, or ended over a day ago) whose output is still there."""
    shown = Table(title="earlier jobs, output kept (goldenenv logs --run RUN)", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    shown.add_column("id", no_wrap=True, justify="right")
    shown.add_column("run", overflow="fold")
    shown.add_column(f"submitted {view.TIME_ZONE}", no_wrap=True)
    for entry in entries:
        shown.add_row(entry.id, escape(entry.run), entry.submitted.replace("T", " ").rstrip("Z"))
    return shown
