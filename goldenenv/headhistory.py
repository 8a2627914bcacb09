"""What happens to the Slurm head's queue and its accounting history on each change, one rule for every cloud; and
the export of that history which destroy runs before anything is removed.

The queue is slurmctld's state (nodeboot.head_state_dir) and the history is slurmdbd's MariaDB database
(nodeboot.head_db_dir): two folders side by side, on the shared file system when the stack has one (so a replaced
head, e.g. after a changed boot script, starts with both), else on the head's root volume (a replaced head starts
with neither). Destroy deletes the head and the file system, so it first dumps the database to the jobs folder
(`goldenenv-slurm export-accounting`, as root in the head's golden container), where the file system's own export
carries it to the retained storage; the next `up` restores it into the new, empty database before slurmdbd starts
(goldenenv/slurm/entry.sh). A failed dump stops the destroy, as a failed file system export does; `--drop-accounting`
destroys without it, on purpose.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from goldenenv import clouds, nodeboot, slurm
from goldenenv.spec import ClusterSpec

EXPORT_FILE = ".goldenenv/accounting.sql.gz"
"""The dump, under the stack's jobs folder: what destroy writes and the next up restores from."""
DROP_FLAG = "--drop-accounting"
"""The destroy option that skips the export, losing the history on purpose."""


class ExportFailed(RuntimeError):
    """The accounting database could not be dumped: destroy must not go on."""


class HeadClient(Protocol):
    """A command runner in the head's golden container, as root (goldenenv.jobs.SshHead with a root exec prefix)."""

    def run(self, argv: list[str]) -> tuple[int, str]: ...


def export_path(spec: ClusterSpec) -> str:
    """Where destroy leaves the dump and the next up looks for it: <jobs folder>/.goldenenv/accounting.sql.gz."""
    return f"{nodeboot.jobs_folder(spec, clouds.get(spec.cloud).shared_folder)}/{EXPORT_FILE}"


def export_command(spec: ClusterSpec) -> list[str]:
    """The command run in the head's container to dump the database (the image's entry point does the dump)."""
    return slurm.export_command(export_path(spec))


def plan_note(spec: ClusterSpec) -> str | None:
    """What a replaced head, destroy and the next up do to the queue and the history, naming where each lives; None
    for a stack without Slurm (no head)."""
    if spec.scheduler != "slurm":
        return None
    if not clouds.get(spec.cloud).uses_pulumi:  # the local stack: volumes of the engine
        return (f"Slurm head: the queue (volume goldenenv-{spec.stack}-slurm) and the accounting history (MariaDB "
                f"in container goldenenv-{spec.stack}-db, volume goldenenv-{spec.stack}-accounting) outlive a killed "
                f"head or database container. destroy first exports the history to {export_path(spec)} on the "
                "data volume it keeps, and the next up restores it; the queue ends with destroy. "
                f"{DROP_FLAG} destroys without the export, losing the history")
    state, db = nodeboot.head_state_dir(spec), nodeboot.head_db_dir(spec)
    both = (f"the queue (slurmctld's state, {state}) and the accounting history (slurmdbd's database, {db})")
    replaced = "a replaced head (a changed boot script, `goldenenv up --roll-nodes head`, or a head created again)"
    if spec.storage.parallel_fs.enabled:
        return (f"Slurm head: {both} are on the shared file system, so {replaced} starts with both. destroy first "
                f"exports the history to {export_path(spec)}, which the file system's own export keeps in the "
                "retained storage (a file system destroy does not export takes it with it), and the next up restores "
                "it into the new head's empty database; the queue ends with destroy (queued and running jobs are not "
                f"brought back). {DROP_FLAG} destroys without the export, losing the history")
    return (f"Slurm head: no shared file system, so the head's root volume holds {both}: a head its cloud recovers "
            f"with that volume keeps both, but {replaced} loses the queue and the history since the last export, "
            "and with no retained folder to export to there is none: destroy deletes both with the head. A parallel "
            "file system (goldenenv:storage parallelFs) keeps them")


def destroy_steps(spec: ClusterSpec) -> list[str]:
    """What destroy does to the history before anything is deleted, in words for the plan: nothing without a shared
    file system, which plan_note says."""
    if spec.scheduler != "slurm" or not spec.storage.parallel_fs.enabled:
        return []  # no shared file system: nothing retained to export to (the plan's note says the history goes)
    return [f"export the Slurm accounting database to {export_path(spec)} (`goldenenv-slurm export-accounting` in "
            "the head's golden container, as root), before the file system's own export; a failed export stops "
            f"destroy before anything is deleted ({DROP_FLAG} destroys without it, losing the history)"]


def export_before_destroy(spec: ClusterSpec, reach: Callable[[], HeadClient | None] | None, drop: bool,
                          skip_fs_export: bool, log: Callable[[str], None]) -> None:
    """Dump the head's accounting database to the jobs folder before destroy removes anything; ExportFailed, naming
    DROP_FLAG, when the dump fails. `reach` gives the head's root client (None: the stack has no head in its
    outputs); None for `reach` itself: the caller gave no way to reach the head, which is said and skipped."""
    if spec.scheduler != "slurm":
        return
    if not spec.storage.parallel_fs.enabled:
        log("not exporting the Slurm accounting history: with no shared file system it is on the head's root "
            "volume, which destroy deletes")
        return
    if drop:
        log(f"not exporting the Slurm accounting history ({DROP_FLAG}): the jobs' history, each member's GPU-hours "
            "and costs go with the head")
        return
    if reach is None:
        log("not exporting the Slurm accounting history: no way to reach the head was given")
        return
    try:
        head = reach()
        if head is None:
            log("no Slurm head in the stack outputs: no accounting history to export")
            return
        code, output = head.run(export_command(spec))
    except RuntimeError as e:
        code, output = None, str(e)
    if code != 0:
        why = output.strip()[-400:] or f"exit {code}"
        raise ExportFailed(
            f"the Slurm accounting history could not be exported to {export_path(spec)} ({why}). Nothing was "
            f"destroyed: bring the head back (goldenenv up; goldenenv jobs -s {spec.stack} answers when it runs) "
            f"and destroy again, or pass {DROP_FLAG} to destroy without it (the history is lost)")
    log(f"exported the Slurm accounting history to {export_path(spec)}"
        + (" (--skip-export: the file system is not exported, so the dump goes with it)" if skip_fs_export else ""))
