"""What every job cost, from Slurm's accounting records (`sacct`): GPU-seconds × the pool's GPU-hour price.

Pure: the head's answers come in as text and the priced rows go out; goldenenv.jobs asks the head, the commands
show. `goldenenv jobs` and `goldenenv cost` price the same records the same way, so the two never disagree.

sacct's formats are Slurm 22.05's (the image's pin), from its man page (SACCT_MAN; the words in quotes are its):
- `--duplicates`: "all records that match the selection criteria will be returned", so a requeued job's earlier
  starts (state REQUEUED, or NODE_FAIL / PREEMPTED) come back beside its latest, and every start used GPU time;
- `--allocations`: the allocation's own record, not its steps (whose time lies inside it);
- `--parsable2` with `--delimiter`: "ASCII characters used to separate the fields", none after the last;
- JobID: `12`; an array task "ArrayJobID_ArrayTaskID", `12_3`; a heterogeneous component "HetJobID+HetJobOffset",
  `12+0` (each its own record);
- State: a word, which may be followed by more, "for example, the UID that CANCELLED a job": `CANCELLED by 1000`;
- Start and End: "YYYY-MM-DDTHH:MM:SS" in the caller's zone (goldenenv asks with TZ=UTC); sacct prints `Unknown`
  for a time not yet come (a running job's End, a never-started job's Start);
- ElapsedRaw: "The job's elapsed time in seconds" (a running job's up to the moment sacct answered);
- AllocTRES: "the resources allocated to the job/step after the job started running. For pending jobs this should
  be blank": `billing=2,cpu=2,gres/gpu=1,mem=1000M,node=1` (a typed GRES adds `gres/gpu:a100=1` beside the untyped
  count; an Ascend stack's devices are `gres/npu`).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from goldenenv.gpuprice import GpuPrice, pool_gpu_price
from goldenenv.spec import ClusterSpec

SACCT_MAN = "https://slurm.schedmd.com/archive/slurm-22.05.8/sacct.html"
SREPORT_MAN = "https://slurm.schedmd.com/archive/slurm-22.05.8/sreport.html"
FIELDS = ("JobID", "User", "State", "Start", "End", "ElapsedRaw", "AllocTRES", "NodeList", "Constraints", "JobName")
"""The one field list the head command asks for and the parser reads; JobName, the only free text, is last, so a
name holding the delimiter stays whole."""
DELIMITER = "\t"
REQUEUE_LOOKBACK = timedelta(days=7)
"""How far before the listed jobs' submission `goldenenv jobs` asks sacct for their records: a requeue resets a
job's SubmitTime (the man page's note on Submit), so its earlier starts lie before it; and a job id an earlier
cluster used (ids start again from 1 after destroy and up, while the accounting history is kept) is not counted
unless that cluster ran it within this week."""
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"


def sacct_argv(since: datetime | None = None, until: datetime | None = None,
               job_ids: list[str] | None = None) -> list[str]:
    """The sacct command for every job allocation (every start of it) from `since` to `until` (UTC), or for the
    named jobs (sacct then looks back to the epoch: its man page's default for -S with -j)."""
    argv = ["sacct", "--allusers", "--duplicates", "--allocations", "--parsable2", "--noheader",
            f"--delimiter={DELIMITER}", f"--format={','.join(FIELDS)}"]
    if job_ids:
        argv.append(f"--jobs={','.join(job_ids)}")
    if since is not None:
        argv.append(f"--starttime={since:{TIME_FORMAT}}")
    if until is not None:
        argv.append(f"--endtime={until:{TIME_FORMAT}}")
    return argv


SREPORT_FORMAT = ("Cluster", "TresName", "Allocated", "Down", "PlannedDown", "Idle", "Planned", "Reported")
"""sreport's Utilization fields (SREPORT_MAN, FORMAT OPTIONS FOR CLUSTER REPORTS), in the order parse_sreport
reads them."""


def sreport_argv(since: datetime, until: datetime, tres: str) -> list[str]:
    """Slurm's cluster utilization of the stack's GPUs in seconds, `|`-separated with no header (SREPORT_MAN: -P,
    -n, -t seconds, -T/--tres, Format=; Start=/End= as YYYY-MM-DDTHH:MM:SS)."""
    return ["sreport", "-P", "-n", "-t", "seconds", f"--tres={tres}", "cluster", "utilization",
            f"start={since:{TIME_FORMAT}}", f"end={until:{TIME_FORMAT}}", f"format={','.join(SREPORT_FORMAT)}"]


@dataclass(frozen=True)
class Record:
    """One start of one job, as sacct recorded it."""

    job_id: str
    user: str
    state: str
    start: datetime | None
    end: datetime | None
    elapsed_s: int
    gpus: int
    nodes: str
    constraints: str
    name: str

    def span(self, now: datetime) -> tuple[datetime, datetime] | None:
        """When its GPUs were held: start to end, a running job's to now; None before it started."""
        if self.start is None:
            return None
        if self.end is None:
            return self.start, max(now, self.start + timedelta(seconds=self.elapsed_s))
        return self.start, self.start + timedelta(seconds=self.elapsed_s)


def _time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None  # Unknown, None: not started, or not ended


def tres_count(alloc_tres: str, tres: str) -> int:
    """The count of `tres` (gres/gpu, gres/npu) in an AllocTRES list: its untyped entry, else the sum of its typed
    ones (gres/gpu:a100=2); 0 where it holds none."""
    counts: dict[str, str] = dict(part.partition("=")[::2] for part in alloc_tres.split(",") if "=" in part)
    if tres in counts:
        return int(float(counts[tres]))
    return sum(int(float(value)) for key, value in counts.items() if key.startswith(f"{tres}:"))


def parse(text: str, tres: str) -> list[Record]:
    """sacct's lines (sacct_argv's fields) as records; lines of another shape are not records (sacct's warnings)."""
    found = []
    for line in text.splitlines():
        fields = line.split(DELIMITER)
        if len(fields) < len(FIELDS) or not fields[5].strip().isdigit():
            continue
        job_id, user, state, start, end, elapsed, alloc, nodes, constraints = fields[:9]
        found.append(Record(job_id=job_id.strip(), user=user.strip(), state=state.split()[0] if state else "",
                            start=_time(start), end=_time(end), elapsed_s=int(elapsed), gpus=tres_count(alloc, tres),
                            nodes="" if nodes == "None assigned" else nodes.strip(), constraints=constraints.strip(),
                            name=DELIMITER.join(fields[9:])))
    return found


@dataclass(frozen=True)
class Window:
    """A period to report, [since, until) in UTC."""

    since: datetime
    until: datetime
    label: str


def month_window(month: str) -> Window:
    """YYYY-MM as its calendar month in UTC; ValueError naming what would be valid."""
    try:
        first = datetime.strptime(month, "%Y-%m").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"{month!r}: a month as YYYY-MM, e.g. 2026-12") from None
    days = calendar.monthrange(first.year, first.month)[1]
    return Window(first, first + timedelta(days=days), month)


def since_window(day: str, now: datetime) -> Window:
    try:
        since = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"{day!r}: a date as YYYY-MM-DD, e.g. 2026-12-01") from None
    if since >= now:
        raise ValueError(f"{day}: a day before today ({now:%Y-%m-%d})")
    return Window(since, now, f"{day} to {now:%Y-%m-%d %H:%M}")


def held_seconds(record: Record, window: Window | None, now: datetime) -> float:
    """The seconds of the record's GPU hold inside the window (all of it without one)."""
    span = record.span(now)
    if span is None:
        return 0.0
    start, end = span
    if window is not None:
        start, end = max(start, window.since), min(end, window.until)
    return max(0.0, (end - start).total_seconds())


@dataclass(frozen=True)
class Priced:
    """One record with its GPU-seconds in the window and what they cost; price None where the pool is unpriced."""

    record: Record
    pool: str
    gpu_seconds: float
    price: GpuPrice | None
    month: str

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600

    @property
    def cost(self) -> float | None:
        return None if self.price is None else self.gpu_hours * self.price.per_gpu_hour


def job_pool(record: Record, spec: ClusterSpec, node_pools: dict[str, str]) -> str:
    """The pool a job ran on: the pool its --constraint names (goldenenv's nodes carry their pool as a Slurm
    feature), else the stack's only pool, else the pool of its first node (node_pools: node name -> pool, from the
    nodes Slurm lists now); '' where none says."""
    names = [pool.name for pool in spec.nodes]
    if record.constraints in names:
        return record.constraints
    if len(names) == 1:
        return names[0]
    first = FIRST_NODE.match(record.nodes)
    return node_pools.get(first.group(1) + (first.group(2) or ""), "") if first else ""


FIRST_NODE = re.compile(r"([^,\[]+)(?:\[(\d+))?")
"""The first node of a Slurm host list: `node-0,node-2` -> node-0; `node-[3-4,7]` -> node-3."""


def price(records: list[Record], spec: ClusterSpec, window: Window | None, now: datetime,
          node_pools: dict[str, str] | None = None) -> list[Priced]:
    """Every record that held GPUs in the window, priced; a record spanning two months is split at the boundary
    (so `--by month` adds up to the same total)."""
    prices = {pool.name: pool_gpu_price(spec, pool) for pool in spec.nodes}
    found = []
    for record in records:
        if not record.gpus:
            continue
        pool = job_pool(record, spec, node_pools or {})
        for month in months(record, window, now):
            seconds = held_seconds(record, month, now) * record.gpus
            if seconds > 0:
                found.append(Priced(record, pool, seconds, prices.get(pool), month.label))
    return found


def months(record: Record, window: Window | None, now: datetime) -> list[Window]:
    """The calendar months the record's hold touches, each cut to the window."""
    span = record.span(now)
    if span is None:
        return []
    start, end = span
    if window is not None:
        start, end = max(start, window.since), min(end, window.until)
    found, moment = [], start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    while moment < end or not found:
        whole = month_window(f"{moment:%Y-%m}")
        since = max(whole.since, window.since) if window else whole.since
        until = min(whole.until, window.until) if window else whole.until
        found.append(Window(since, until, whole.label))
        moment = whole.until
    return found


@dataclass(frozen=True)
class Row:
    key: str
    user: str
    gpu_hours: float
    cost: float | None
    jobs: int


BY = ("job", "user", "month")
LAST = 10**18
"""Where a job id that is not a number sorts: after every numbered job."""


def rows(priced: list[Priced], by: str) -> list[Row]:
    """The priced records summed by job id, user or month (unrounded: round once, when shown)."""
    if by not in BY:
        raise ValueError(f"{by!r}: one of {', '.join(BY)}")
    groups: dict[str, list[Priced]] = {}
    for item in priced:
        key = {"job": item.record.job_id, "user": item.record.user, "month": item.month}[by]
        groups.setdefault(key, []).append(item)
    found = []
    for key, items in groups.items():
        costs = [i.cost for i in items]
        users = sorted({i.record.user for i in items})
        found.append(Row(key, ",".join(users), sum(i.gpu_hours for i in items),
                         None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
                         len({i.record.job_id for i in items})))
    return sorted(found, key=lambda r: (_order(r.key) if by == "job" else (0, r.key)))


def _order(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0].split("+")[0]
    return (int(head), job_id) if head.isdigit() else (LAST, job_id)


@dataclass(frozen=True)
class Shown:
    """Rows rounded as shown, and the total of the shown figures: what a user adds by hand is the total."""

    rows: list[tuple[Row, float, float | None]]
    gpu_hours: float
    cost: float | None


def rounded(found: list[Row], gpu_hour_places: int = 3, cost_places: int = 2) -> Shown:
    """Each row rounded once, and the totals as the sum of those rounded figures (so they re-add exactly)."""
    shown = [(r, round(r.gpu_hours, gpu_hour_places), None if r.cost is None else round(r.cost, cost_places))
             for r in found]
    hours = round(sum(h for _, h, _ in shown), gpu_hour_places)
    costs = [c for _, _, c in shown]
    cost = None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), cost_places)
    return Shown(shown, hours, cost)


def per_job(priced: list[Priced]) -> dict[str, tuple[float, float | None]]:
    """Each job id's GPU-hours and cost (every start of it): what `goldenenv jobs` shows."""
    return {r.key: (r.gpu_hours, r.cost) for r in rows(priced, "job")}


@dataclass(frozen=True)
class Utilization:
    """sreport's cluster utilization of the GPUs, in GPU-seconds (SREPORT_MAN's words): allocated to jobs; idle
    ("not Allocated, Down, PlannedDown, or Planned"); planned (free while queued jobs could not start, "can be
    grouped with idle time"); down. PlannedDown (MAINT reservations, FUTURE nodes, powered-down CLOUD nodes,
    mostly nothing a cloud bills) is left out."""

    allocated: float
    idle: float
    planned: float
    down: float


def parse_sreport(text: str, tres: str) -> Utilization | None:
    """sreport's lines (sreport_argv's fields): the row of `tres`; None where it has none (no rolled-up hour yet)."""
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) < len(SREPORT_FORMAT) or cells[1] != tres:
            continue
        try:
            allocated, down, _, idle, planned = (float(c or 0) for c in cells[2:7])
        except ValueError:
            return None
        return Utilization(allocated, idle, planned, down)
    return None


def node_pools(sinfo: str, spec: ClusterSpec) -> dict[str, str]:
    """`sinfo --Node --noheader --format=%N|%f` as node -> pool (the feature that names one of the stack's pools)."""
    names = {pool.name for pool in spec.nodes}
    found = {}
    for line in sinfo.splitlines():
        node, _, features = line.partition("|")
        pool = next((f for f in features.split(",") if f in names), None)
        if pool:
            found[node.strip()] = pool
    return found


SINFO_ARGV = ["sinfo", "--Node", "--noheader", "--format=%N|%f"]
