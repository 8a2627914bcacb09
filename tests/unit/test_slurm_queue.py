"""Slurm as goldenenv configures it: the head's slurm.conf, the sbatch script around torchrun, and the scheduler's
view read back from scontrol's records (captures from Debian 12's Slurm 22.05.8 on this project's local stack)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from goldenenv import jobs, lifecycle, slurm
from goldenenv.slurm import batch, config, view
from goldenenv.spec import ConfigError

CAPTURES = Path(__file__).parent / "captures" / "slurm"


def conf_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
                and not line.startswith("PartitionName"))


@pytest.fixture(scope="module")
def p5():
    return lifecycle.load_spec("aws-p5-2node")


def test_slurm_conf_is_configless_dynamic_and_requeues_after_a_short_node_timeout(p5):
    conf = conf_lines(config.render_conf(p5, slurm.SLURMD_TIMEOUT_S))
    assert "enable_configless" in conf["SlurmctldParameters"].split(",")
    assert conf["SelectType"] == "select/cons_tres" and conf["GresTypes"] == "gpu"
    assert conf["JobRequeue"] == "1" and conf["ReturnToService"] == "2"
    assert int(conf["SlurmdTimeout"]) < 60, "a lost node is noticed in under a minute (Slurm's default is 300 s)"
    assert int(conf["MaxNodeCount"]) >= sum(p.count for p in p5.nodes)
    assert conf["SlurmctldPort"] == "6817" and conf["SlurmdPort"] == "6818"
    assert conf["PropagateResourceLimitsExcept"] == "MEMLOCK", "RDMA jobs keep the node's unlimited memlock"
    assert conf["AuthType"] == "auth/munge"
    assert "AuthInfo" not in conf, "clouds keep Slurm's credential lifetime"


def test_the_local_conf_lets_a_requeued_job_start_again_within_seconds():
    spec = lifecycle.load_spec("local")
    conf = conf_lines(config.render_conf(spec, 10, cred_expire=5))
    assert conf["AuthInfo"] == "cred_expire=5" and conf["SlurmdTimeout"] == "10"
    assert config.cluster_name("My.Stack-2") == "my_stack_2"


def test_the_node_command_offers_the_catalogs_gpus_to_the_head():
    assert slurm.node_command("10.0.1.5", 8, ["gpu"]) == [
        slurm.ENTRY, "node", "--conf-server", "10.0.1.5", "--gpus", "8", "--feature", "gpu"]
    assert "--gpus" not in slurm.node_command("head", 0, [])


def script_for(spec, command, **kw):
    job = jobs.batch_job(spec, command, kw.pop("nodes", 2), kw.pop("gpus", None), kw.pop("hours", None),
                         kw.pop("name", "train"), 30)
    return job, job.script()


def test_the_batch_script_requeues_appends_output_and_runs_torchrun_once_per_node(p5):
    job, script = script_for(p5, ["python", "/fsx/code/train.py", "--lr", "3e-4"], hours=12)
    directives = re.findall(r"^#SBATCH (\S+)", script, re.M)
    assert {"--requeue", "--open-mode=append", "--ntasks-per-node=1", "--nodes=2", "--exclusive",
            "--gpus-per-node=8", "--time=720"} <= set(directives)
    assert f"--output=/fsx/jobs/{job.run}.out" in directives
    assert f"--comment=goldenenv-run={job.run}" in directives
    assert f"export GOLDENENV_CHECKPOINTS=/fsx/checkpoints/{job.run}" in script
    assert "--nproc-per-node=\"$GOLDENENV_NPROC\"" in script and "GOLDENENV_NPROC=8" in script
    assert script.count("srun --kill-on-bad-exit=1") == 1
    assert "scontrol requeue" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_a_command_word_reaches_torchrun_as_data_never_as_shell_code(p5, tmp_path):
    marker = tmp_path / "pwned"
    _, script = script_for(p5, ["python", "-c", f"print(1); $(touch {marker})", f"; touch {marker}"])
    line = next(x for x in script.splitlines() if x.startswith("    --local-addr"))
    words = line.split("goldenenv-task", 1)[1]
    echoed = subprocess.run(["bash", "-c", f"printf '%s\\n'{words}"], capture_output=True, text=True).stdout
    assert echoed.splitlines() == ["python", "-c", f"print(1); $(touch {marker})", f"; touch {marker}"]
    assert not marker.exists()


def test_runs_are_unique_so_a_renumbered_cluster_never_reuses_a_jobs_folder():
    names = {batch.run_name("train") for _ in range(50)}
    assert len(names) == 50 and all(re.fullmatch(r"train-\d{8}T\d{6}Z-[0-9a-f]{8}", n) for n in names)
    assert batch.job_name("train-20261202T050719Z-46a2") == "train"  # a run named before the suffix grew


def test_submit_refuses_bad_input_naming_the_flag(p5):
    with pytest.raises(ConfigError) as e:
        jobs.batch_job(p5, ["python", "x.py"], 5, 9, -1, "bad name!", 30)
    keys = {p.key for p in e.value.problems}
    assert keys == {"--nodes", "--gpus-per-node", "--time", "--name"}
    assert any("give 1 to 2" in p.message for p in e.value.problems)
    with pytest.raises(ConfigError) as e:
        jobs.require_slurm(p5.model_copy(update={"scheduler": "none"}))
    assert e.value.problems[0].key == "goldenenv:scheduler"


def test_jobs_are_read_from_scontrols_records():
    running = view.jobs((CAPTURES / "job-running.txt").read_text())[0]
    assert (running.id, running.name, running.state, running.nodes, running.restarts) == (
        "1", "capture", "RUNNING", "node-[0-1]", 0)
    assert not running.done and running.reason == ""
    assert re.fullmatch(r"capture-\d{8}T\d{6}Z-[0-9a-f]{4}", running.run)  # recorded with a 4-digit run
    assert running.output == f"/data/jobs/{running.run}.out"
    cancelled = view.jobs((CAPTURES / "jobs-all.txt").read_text())
    assert [(j.id, j.state, j.done) for j in cancelled] == [("1", "CANCELLED", True)]


def test_the_scheduler_view_names_a_drained_node_with_its_reason():
    assert view.judge(view.nodes((CAPTURES / "nodes-allocated.txt").read_text()), 2, gpus=0) == []
    nodes = view.nodes((CAPTURES / "nodes-draining.txt").read_text())
    problems = view.judge(nodes, 2, gpus=0)
    assert problems == ["node-1: ALLOCATED+DRAIN+DYNAMIC_NORM (goldenenv health: xid 79 on GPU 3)"]
    assert view.judge(nodes, 3, gpus=0)[0] == "1 of 3 nodes have not registered with slurmctld"
    gres = view.judge(nodes, 2, gpus=8)
    assert any("offers GRES none, the catalog says gpu:8" in p for p in gres)


def test_an_idle_cluster_passes():
    idle = ("NodeName=node-0 State=IDLE+DYNAMIC_NORM Gres=gpu:8(S:0-1) NodeAddr=10.0.1.5 CPUTot=192 Reason=\n"
            "NodeName=node-1 State=ALLOCATED+DYNAMIC_NORM Gres=gpu:8(S:0-1) NodeAddr=10.0.1.6 CPUTot=192\n")
    assert view.judge(view.nodes(idle), 2, gpus=8) == []


def test_on_a_spot_pool_torchrun_runs_under_the_watcher_that_requeues_and_the_node_drains_on_a_notice():
    spot = lifecycle.load_spec("aws-p4d-4node-spot")
    assert spot.nodes[0].capacity.value == "spot"
    _, script = script_for(spot, ["python", "train.py"])
    assert "export GOLDENENV_SPOTWATCH=aws" in script
    assert 'goldenenv-spotwatch --cloud "$GOLDENENV_SPOTWATCH" --requeue-job --} torchrun' in script
    _, on_demand = script_for(lifecycle.load_spec("aws-p5-2node"), ["python", "train.py"])
    assert "GOLDENENV_SPOTWATCH=" not in on_demand
    assert slurm.node_command("10.0.0.9", 8, ["gpu"], "aws")[-2:] == ["--spot", "aws"]


def test_an_image_with_older_node_tools_is_rebuilt_though_its_lock_is_the_same(monkeypatch):
    """The scheduler entry and the spot watcher ship with goldenenv, not the lock: an upgrade must reach the nodes."""
    import docker

    from goldenenv.images import dockerfile

    spec = lifecycle.load_spec("local")
    lock = lifecycle.load(spec.image.lock)
    current = dockerfile.labels(lock)["dev.goldenenv.tools-hash"]
    assert current == dockerfile.tools_hash(lock) and len(current) == 12
    built = []
    monkeypatch.setattr(lifecycle, "build", lambda lock, options, client, log: built.append(lock.tag) or
                        type("Built", (), {"tag": lock.tag})())

    class Images:
        def __init__(self, labels):
            self.labels = labels

        def get(self, tag):
            if self.labels is None:
                raise docker.errors.ImageNotFound(tag)
            return type("Image", (), {"labels": self.labels})()

    for labels, rebuilt in (({"dev.goldenenv.tools-hash": current}, False),
                            ({"dev.goldenenv.tools-hash": "0" * 12}, True), ({}, True), (None, True)):
        built.clear()
        client = type("Client", (), {"images": Images(labels)})()
        assert lifecycle.ensure_image(spec, dockerfile.BuildOptions(), client, lambda m: None) == lock.tag
        assert bool(built) == rebuilt, labels


@pytest.mark.parametrize("problems,heading", [
    ([("--nodes", "9: the stack has 2 node(s); give 1 to 2")], "invalid option"),
    ([("stack p5", "the head container is not running: goldenenv up first")], "the stack is not ready for this"),
    ([("goldenenv:nodes.count", "0: give 1 or more")], "invalid stack configuration in stacks/Pulumi.p5.yaml"),
])
def test_an_error_is_headed_by_what_it_is_about_a_flag_the_stacks_state_or_its_file(capsys, problems, heading):
    """A bad --nodes or a head that is not up once read "invalid stack configuration in stacks/Pulumi...yaml", though
    the stack file was fine (issue 36 item 4): the heading says what the problems are about."""
    import typer

    from goldenenv.cli.common import fail
    from goldenenv.spec import Problem

    with pytest.raises(typer.Exit) as done:
        fail(ConfigError([Problem(k, m) for k, m in problems]), Path("stacks/Pulumi.p5.yaml"))
    assert done.value.exit_code == 2
    first, *rest = capsys.readouterr().err.splitlines()
    assert first == heading and rest == [f"  {k}: {m}" for k, m in problems]
