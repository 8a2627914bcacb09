"""Every cloud's Slurm head runs slurmdbd on a MariaDB whose folder sits beside slurmctld's state, and `plan` says what
a replaced head and destroy do to the queue and the accounting history, naming the folders the head really binds.

Held over every shipped stack of every Pulumi cloud, planned with a pushed golden image as `up` requires: the head's
own user data (as the host receives it) is read for the folders bound at the container's state and database paths
and for its jobs folder, and the plan's note must name those, not what the note's own module computes.
"""

from __future__ import annotations

import base64
import copy
import gzip
import posixpath
import shlex

import pytest
import yaml

from goldenenv import clouds, slurm, stackconfig
from goldenenv.plan import plan_config
from shipped import STACKS, pulumi_stacks

GOLDEN_REF = "registry.example.com/team/golden@sha256:" + "cd" * 32
SLURM_STACKS = [(cloud, stack) for cloud, stack in pulumi_stacks()
                if stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml").get("goldenenv:scheduler",
                                                                                   "slurm") == "slurm"]
EXPORT_SUFFIX = "/.goldenenv/accounting.sql.gz"
"""Where destroy leaves the dump under the jobs folder, as the image's entry point restores it (issue 41)."""


def planned(stack: str):
    config = copy.deepcopy(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
    config["goldenenv:image"] = {**(config.get("goldenenv:image") or {}), "ref": GOLDEN_REF}
    return plan_config(stack, config)


def head_files(result) -> dict[str, str]:
    """The head's boot files as cloud-init writes them, from the planned head's user data."""
    limit = clouds.get(result.spec.cloud).user_data_limit
    carried = [(r.name, limit.carried(r)) for r in result.resources if r.name.endswith(f"-{slurm.HEAD_HOSTNAME}")]
    carried = [(name, data) for name, data in carried if data]
    assert len(carried) == 1, f"one head carrying user data, found {[name for name, _ in carried]}"
    data = carried[0][1]
    text = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode()
    files = {}
    for f in yaml.safe_load(text)["write_files"]:
        content = f["content"]
        if f.get("encoding") == "gz+b64":
            content = gzip.decompress(base64.b64decode(content)).decode()
        files[f["path"]] = content
    return files


def head_run(files: dict[str, str]) -> list[str]:
    script = files["/usr/local/libexec/goldenenv/golden-image.sh"]
    line = script[script.index("exec docker run"):].replace("\\\n", " ")
    return shlex.split(line.splitlines()[0].replace('"${devices[@]}"', ""))


def bound_at(run: list[str], inside: str) -> str:
    found = [v.split(":")[0] for v in (run[i + 1] for i, w in enumerate(run) if w == "--volume")
             if v.split(":")[1] == inside]
    assert len(found) == 1, f"one host folder bound at {inside}, found {found}"
    return found[0]


def launch_env(files: dict[str, str]) -> dict[str, str]:
    lines = files["/etc/goldenenv/launch.env"].splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


@pytest.fixture(scope="module", params=SLURM_STACKS, ids=[s for _, s in SLURM_STACKS])
def head(request):
    result = planned(request.param[1])
    files = head_files(result)
    run = head_run(files)
    return result, files, run


def test_every_cloud_ships_a_slurm_stack_to_hold_to_the_rule():
    assert {cloud for cloud, _ in SLURM_STACKS} == {c for c in clouds.names() if clouds.get(c).uses_pulumi}


def test_the_head_runs_slurmdbd_on_its_own_database_beside_slurmctlds_state(head):
    result, files, run = head
    command = run[run.index("$image") + 1:]
    assert command == [slurm.ENTRY, "head", "--db-dir", slurm.DB_DIR], "MariaDB, slurmdbd, then slurmctld"
    state, db = bound_at(run, slurm.STATE_DIR), bound_at(run, slurm.DB_DIR)
    assert posixpath.dirname(db) == posixpath.dirname(state) and db != state, "a sibling, not inside the state"
    fs = result.spec.storage.parallel_fs
    if fs.enabled:
        assert db.startswith(fs.mount_point + "/"), "the history outlives a replaced head on the shared FS"
    else:
        assert db.startswith("/var/lib/"), "no shared FS: the head's root volume"


def test_the_head_knows_its_jobs_folder_on_every_stack(head):
    from goldenenv import jobs

    result, files, _ = head
    assert launch_env(files)["GOLDENENV_JOBS"] == jobs.places(result.spec).jobs


def test_plan_says_where_the_queue_and_the_history_live_and_what_a_replaced_head_keeps(head):
    result, files, run = head
    notes = [f.message for f in result.findings if f.rule == "plan-note" and f.message.startswith("Slurm head:")]
    assert len(notes) == 1, notes
    note = notes[0]
    state, db = bound_at(run, slurm.STATE_DIR), bound_at(run, slurm.DB_DIR)
    assert state in note and db in note, "the note names the folders the head binds"
    assert "replaced head" in note
    if result.spec.storage.parallel_fs.enabled:
        dump = launch_env(files)["GOLDENENV_JOBS"] + EXPORT_SUFFIX
        assert "starts with both" in note and dump in note and "--drop-accounting" in note
        assert any(dump in step and "--drop-accounting" in step for step in result.destroy_steps)
        assert "accounting" in result.destroy_steps[0], "the history is exported before the file system's export"
    else:
        assert "root volume" in note and "loses the queue and the history" in note
        assert not any("accounting" in step for step in result.destroy_steps), "nothing retained to export to"
        assert "destroy deletes both" in note


def test_a_stack_without_slurm_has_no_head_and_so_no_note_and_nothing_to_export():
    config = copy.deepcopy(stackconfig.read_stack_file(STACKS / "Pulumi.aws-p5-2node.yaml"))
    config["goldenenv:scheduler"] = "none"
    result = plan_config("aws-p5-2node", config)
    assert not [f for f in result.findings if f.message.startswith("Slurm head:")]
    assert not any("accounting" in step for step in result.destroy_steps)
    assert any("parallel file system" in step for step in result.destroy_steps), "the file system's export stays"
