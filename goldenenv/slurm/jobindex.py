"""The job index on the shared file system: which run each submitted job wrote, so a job's output is found by its
id after the cluster is gone. `goldenenv destroy` (data kept) and `up` start a new slurmctld that numbers jobs from
1 again and knows none of the old ones, while <jobs>/<run>.out stays on the volume; the index, appended to at
every submit, keeps the old ids. Jobs from before the index are found by the first line of their output, which
the sbatch script writes: "goldenenv: job N start 0 on ...".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FILE = "goldenenv-jobs.tsv"
"""In the jobs folder: one line per submitted job, id, run and when it was submitted (UTC, the head's clock)."""
FIRST_LINE = re.compile(r"^goldenenv: job (\d+) start ")


@dataclass(frozen=True)
class Entry:
    id: str
    run: str
    submitted: str
    """When goldenenv submitted it, 2026-12-02T05:07:19Z; '' for a job known only by its output's first line."""


def line(job_id: str, run: str, submitted: str) -> str:
    return f"{job_id}\t{run}\t{submitted}\n"


def entries(text: str) -> list[Entry]:
    """The index's entries, oldest first; a line that is not one (a torn write) is skipped."""
    found = []
    for row in text.splitlines():
        words = row.split("\t")
        if len(words) == 3 and words[0].isdigit() and re.fullmatch(r"[A-Za-z0-9._-]+", words[1]):
            found.append(Entry(*words))
    return found


def first_lines(text: str) -> list[Entry]:
    """Jobs from the first lines of output files, as `head -n 1 -v` prints them ('==> RUN.out <==' then the line)."""
    found, run = [], None
    for row in text.splitlines():
        header = re.fullmatch(r"==> (?:.*/)?([A-Za-z0-9._-]+)\.out <==", row)
        if header:
            run = header.group(1)
            continue
        match = FIRST_LINE.match(row)
        if run and match:
            found.append(Entry(match.group(1), run, ""))
            run = None
    return found


def with_id(known: list[Entry], job_id: str) -> list[Entry]:
    """The entries of a job id, one per run (a run resumed by the same id in a later cluster counts once)."""
    runs: dict[str, Entry] = {}
    for entry in known:
        if entry.id == job_id:
            runs.setdefault(entry.run, entry)
    return list(runs.values())


def describe(entry: Entry) -> str:
    return f"run {entry.run}" + (f" (submitted {entry.submitted})" if entry.submitted else "")
