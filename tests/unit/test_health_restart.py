"""A contained GPU error restarts the job (issue 37 item 6): the health verdict names what the node needs (a job
restart keeps the node, so no drain reason), and the sbatch wrapper, after a rank died, judges every node of the job
with the image's own judge and requeues the job when one shows such an error, at most RESTART_LIMIT starts in all.

The wrapper runs for real in bash, rendered as `goldenenv submit` writes it, with stand-ins for Slurm's commands
(srun runs its command once per node here; scontrol answers as Slurm 22.05 does and records a requeue) and for
goldenenv-health (judge.py under the system Python, with the catalog's rules)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import jobs, lifecycle
from goldenenv.catalog import health
from goldenenv.cli import app
from goldenenv.health import fleet, judge
from goldenenv.images import dockerfile
from goldenenv.slurm import batch

CAPTURES = Path(__file__).parent / "captures" / "health"
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3"
NODES = ("gpu-0", "gpu-1")
runner = CliRunner()


# The verdict: what the node needs, and a drain reason only where it is drained

def test_a_contained_xid_94_keeps_the_node_and_asks_for_a_job_restart():
    folder = CAPTURES / "xid94-gpu1"
    findings = judge.judge(judge.read_evidence(str(folder)), json.loads((folder / "expect.json").read_text()),
                           health.rules_document(), "gpu-1")
    assert [(f.rule, f.device, f.action) for f in findings] == [("xid_94", "GPU 1", "restart-job")]
    assert health.xid_rules()[94].action == "restart-job"
    verdict = judge.report(findings, "gpu-1")
    assert verdict["action"] == "restart-job" and verdict["fails"] is False and "drain_reason" not in verdict
    [line] = judge.restart_lines(findings)
    assert line.startswith("gpu-1: GPU 1 (PCI 0000:64:00) logged XID 94") and "restart-job" in line


def test_health_json_names_each_nodes_action_and_a_drain_reason_only_where_it_drains():
    result = runner.invoke(app, ["health", "--from", str(CAPTURES), "--json"])
    verdicts = {v["node"]: v for v in json.loads(result.stdout)}
    assert verdicts["xid94-gpu1"]["action"] == "restart-job" and not verdicts["xid94-gpu1"]["fails"]
    assert "drain_reason" not in verdicts["xid94-gpu1"]
    assert verdicts["healthy-p5.48xlarge"]["action"] == "none" and "drain_reason" not in verdicts["healthy-ib"]
    assert verdicts["xid79-gpu3"]["action"] == "reboot" and verdicts["xid79-gpu3"]["drain_reason"].startswith("reboot")
    for node, verdict in verdicts.items():
        assert ("drain_reason" in verdict) == verdict["fails"] == (verdict["action"] in judge.FAILING_ACTIONS), node


def test_health_on_a_restart_job_node_exits_0_and_says_restart_job():
    result = runner.invoke(app, ["health", "--from", str(CAPTURES / "xid94-gpu1")])
    assert result.exit_code == 0, result.output
    assert "restart-job" in result.output and "xid_94" in result.output and "GPU 1:" in result.output


# The wrapper

def test_the_wrapper_reads_the_paths_the_image_and_the_health_check_use():
    assert batch.HEALTH_RULES == dockerfile.HEALTH_RULES and batch.NODE_HEALTH == fleet.NODE_HEALTH
    healthcheck = Path(batch.__file__).with_name("healthcheck.sh").read_text()
    assert f"dir={batch.NODE_HEALTH}\n" in healthcheck and f"rules={batch.HEALTH_RULES}\n" in healthcheck


STAND_INS = {
    "srun": """#!/bin/bash
case " $* " in *" goldenenv-task "*) exit "$TORCHRUN_RC" ;; esac
while [[ $1 == --* ]]; do shift; done
status=0
for node in $NODES; do SLURMD_NODENAME=$node GOLDENENV_NODE_HEALTH=$HEALTH_ROOT/$node "$@" || status=$?; done
exit $status
""",
    "scontrol": """#!/bin/bash
case "$1 $2" in
  "show hostnames") printf '%s\\n' $NODES ;;
  "show node") echo "NodeName=$3 Arch=x86_64 NodeAddr=10.0.1.5 SlurmdStartTime=2026-12-07T00:00:00 State=ALLOCATED" ;;
  "show job") echo "JobId=$3 JobName=train StartTime=2026-12-07T01:00:00" ;;
  "requeue "*) echo "$2" >> "$REQUEUED" ;;
esac
""",
    "goldenenv-health": """#!/bin/bash
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = --rules ]; then args+=(--rules "$RULES"); shift 2; else args+=("$1"); shift; fi
done
exec "$SYSTEM_PYTHON" -I -S "$JUDGE" "${args[@]}"
""",
    "sleep": "#!/bin/bash\nexit 0\n",
}


@pytest.fixture(scope="module")
def script():
    spec = lifecycle.load_spec("aws-p5-2node")
    return jobs.batch_job(spec, ["python", "/fsx/code/train.py"], 2, None, None, "train", 30).script()


def run_wrapper(tmp_path: Path, script: str, evidence: dict[str, str], restart: int = 0, torchrun_rc: int = 1,
                node_tmp: Path | None = None):
    """The job's script after torchrun exited `torchrun_rc`, each node with the recorded evidence named (a
    captures/health folder) and its expect.json; what it printed, its exit status and the job ids requeued.
    `node_tmp`: the nodes' temporary folder (where each remembers the errors a restart was made for), kept from an
    earlier job; a new one by default."""
    bin_dir, root = tmp_path / "bin", tmp_path / "health"
    bin_dir.mkdir(parents=True)
    node_tmp = node_tmp or tmp_path / "node-tmp"
    node_tmp.mkdir(exist_ok=True)
    for name, text in STAND_INS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for node in NODES:
        case = CAPTURES / evidence.get(node, "healthy-p5.48xlarge")
        shutil.copytree(case, root / node / "recorded")
        shutil.copy(case / "expect.json", root / node / "expect.json")
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(health.rules_document()))
    requeued = tmp_path / "requeued"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NODES": " ".join(NODES),
           "HEALTH_ROOT": str(root), "RULES": str(rules), "JUDGE": judge.__file__, "SYSTEM_PYTHON": SYSTEM_PYTHON,
           "REQUEUED": str(requeued), "TORCHRUN_RC": str(torchrun_rc), "SLURM_JOB_ID": "42",
           "SLURM_JOB_NODELIST": "gpu-[0-1]", "SLURM_JOB_NUM_NODES": "2", "SLURM_RESTART_COUNT": str(restart), "TMPDIR": str(node_tmp)}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    return done.stdout, done.returncode, requeued.read_text().split() if requeued.exists() else []


def test_a_rank_dead_on_a_contained_error_requeues_the_job_naming_node_gpu_and_xid(tmp_path, script):
    out, status, requeued = run_wrapper(tmp_path, script, {"gpu-1": "xid94-gpu1"})
    assert requeued == ["42"], out
    said = next(line for line in out.splitlines() if "XID 94" in line)
    assert said.startswith("goldenenv: job 42: gpu-1: GPU 1 (PCI 0000:64:00) logged XID 94"), said
    assert "requeueing job 42: the catalog says this error needs a job restart (start 2 of at most 3)" in out
    assert status == 1


@pytest.mark.parametrize("evidence", [{}, {"gpu-0": "xid79-gpu3"}], ids=["healthy", "a-drained-node"])
def test_a_job_that_failed_without_such_evidence_ends_failed_never_requeued(tmp_path, script, evidence):
    out, status, requeued = run_wrapper(tmp_path, script, evidence)
    assert requeued == [] and status == 1 and "requeueing" not in out, out
    assert "goldenenv: job 42 end 0 exit 1" in out


def test_an_error_a_restart_was_made_for_is_not_a_reason_to_restart_again(tmp_path, script):
    """The kernel log keeps an XID until the node reboots: the next job on the node (or this one's next start) that
    fails for its own reasons ends FAILED; a new XID on the GPU (its count changes) restarts the job again."""
    node_tmp = tmp_path / "node-tmp"
    out, _, requeued = run_wrapper(tmp_path / "first", script, {"gpu-1": "xid94-gpu1"}, node_tmp=node_tmp)
    assert requeued == ["42"], out
    out, status, requeued = run_wrapper(tmp_path / "next", script, {"gpu-1": "xid94-gpu1"}, node_tmp=node_tmp)
    assert requeued == [] and status == 1 and "requeueing" not in out and "XID" not in out, out
    acted = node_tmp / f"goldenenv-restarted-{os.getuid()}"
    acted.write_text(acted.read_text().replace("1 time(s)", "0 time(s)"))  # as if this XID were new since
    out, _, requeued = run_wrapper(tmp_path / "again", script, {"gpu-1": "xid94-gpu1"}, node_tmp=node_tmp)
    assert requeued == ["42"] and "logged XID 94" in out, out


def test_a_job_that_succeeded_is_not_judged_again(tmp_path, script):
    out, status, requeued = run_wrapper(tmp_path, script, {"gpu-1": "xid94-gpu1"}, torchrun_rc=0)
    assert requeued == [] and status == 0 and "XID" not in out, out


def test_the_last_allowed_start_requeues_and_the_next_ends_failed_with_the_reason(tmp_path, script):
    out, status, requeued = run_wrapper(tmp_path / "a", script, {"gpu-1": "xid94-gpu1"}, restart=1)
    assert requeued == ["42"] and "(start 3 of at most 3)" in out, out
    out, status, requeued = run_wrapper(tmp_path / "b", script, {"gpu-1": "xid94-gpu1"},
                                        restart=batch.RESTART_LIMIT - 1)
    assert requeued == [] and status == 1, out
    assert "XID 94" in out and "not requeued: it started 3 times already" in out
