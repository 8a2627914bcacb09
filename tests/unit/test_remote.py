"""`goldenenv run` on cloud nodes over ssh: command lines, prefixed streaming, first failure stops every node."""

from __future__ import annotations

import shlex
import subprocess
import tarfile
import threading
import time
from io import BytesIO
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import lifecycle, remote
from goldenenv.cli import app
from goldenenv.images.lock import load as load_lock
from goldenenv.spec import ConfigError

LAUNCH_ENV = {"MASTER_ADDR": "10.0.1.5", "MASTER_PORT": "29500", "NNODES": "2", "NPROC_PER_NODE": "8"}


def test_hosts_parse_as_validate_writes_them():
    assert remote.Host.parse("ssh://ubuntu@10.0.1.5") == remote.Host("10.0.1.5", "ubuntu", None)
    assert remote.Host.parse("ssh://trainer@127.0.0.1:2201") == remote.Host("127.0.0.1", "trainer", 2201)
    assert remote.Host.parse("gpu-0").destination == "gpu-0"  # a Host alias of the ssh config
    with pytest.raises(ValueError, match="ssh://user@address"):
        remote.Host.parse("docker://node-0")


def test_ssh_never_prompts_and_uses_the_config_key_and_port():
    argv = remote.Ssh("/home/me/.ssh/goldenenv", "/keys/id").argv("ssh://ubuntu@10.0.1.5:2222", "hostname -I")
    assert argv[:3] == ["ssh", "-F", "/home/me/.ssh/goldenenv"]
    assert "BatchMode=yes" in argv and argv[argv.index("-i") + 1] == "/keys/id"
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[-2:] == ["ubuntu@10.0.1.5", "hostname -I"]
    assert "-F" not in remote.Ssh().argv("ssh://ubuntu@10.0.1.5", "true")


def test_torchrun_uses_the_launch_env_rendezvous_and_the_node_address():
    argv = remote.torchrun_argv(["python", "/fsx/code/train_ddp.py"], remote.Launch.from_env(LAUNCH_ENV),
                                "10.0.1.6", "goldenenv-abc")
    assert argv[0] == "torchrun"
    assert {"--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.1.5:29500",
            "--rdzv-id=goldenenv-abc", "--local-addr=10.0.1.6", "--tee=3", "--max-restarts=0"} <= set(argv)
    assert argv[-2:] == ["python", "/fsx/code/train_ddp.py"]


def test_spot_nodes_run_torchrun_under_the_spot_watcher_of_their_cloud():
    launch = remote.Launch.from_env(LAUNCH_ENV)
    watched = remote.torchrun_argv(["python", "t.py"], launch, "10.0.1.6", "goldenenv-abc", spot_cloud="aws")
    assert watched[:5] == [remote.SPOTWATCH, "--cloud", "aws", "--", "torchrun"]
    assert remote.torchrun_argv(["python", "t.py"], launch, "10.0.1.6", "goldenenv-abc")[0] == "torchrun"


def test_the_job_runs_in_the_golden_container_in_its_own_session_with_a_pidfile():
    line = remote.job_command(["torchrun", "x.py", "--name", "it's"], {"PYTHONUNBUFFERED": "1"}, "goldenenv-abc",
                              "docker exec goldenenv")
    words = shlex.split(line)
    assert words[:7] == ["docker", "exec", "goldenenv", "setsid", "-w", "sh", "-c"]
    inner = words[7]
    assert inner.startswith("echo $$ > /tmp/goldenenv-abc.pid; exec env ")
    assert shlex.split(inner.split("exec ", 1)[1]) == [
        "env", "PYTHONUNBUFFERED=1", "GOLDENENV_RUN=goldenenv-abc", "torchrun", "x.py", "--name", "it's"]


def test_stop_kills_the_process_group_then_every_marked_process_through_the_prefix():
    words = shlex.split(remote.stop_command("goldenenv-abc", "docker exec goldenenv"))
    assert words[:5] == ["docker", "exec", "goldenenv", "sh", "-c"]
    assert 'kill -TERM -- "-$pg"' in words[5] and 'kill -KILL -- "-$pg"' in words[5]
    assert "^GOLDENENV_RUN=goldenenv-abc$" in words[5] and "/tmp/goldenenv-abc.pid" in words[5]


def test_code_sync_reads_stdin_so_docker_exec_gets_dash_i():
    words = shlex.split(remote.sync_command("/fsx/code", "docker exec goldenenv"))
    assert words[:4] == ["docker", "exec", "-i", "goldenenv"]
    assert "tar -x" in words[-1] and "/fsx/code" in words[-1]
    assert shlex.split(remote.sync_command("/fsx/code", ""))[:2] == ["sh", "-c"]
    through_sudo = shlex.split(remote.sync_command("/fsx/code", "sudo -n docker exec --user trainer goldenenv"))
    assert through_sudo[:7] == ["sudo", "-n", "docker", "exec", "-i", "--user", "trainer"]


def test_a_login_with_an_at_sign_reaches_ssh_whole():
    """An Entra ID login is a UPN: the stack's hosts carry it percent-encoded, ssh gets it back whole (OpenSSH
    splits user@host at the last @)."""
    host = remote.Host.parse("ssh://alice%40contoso.com@10.0.0.4")
    assert (host.user, host.address) == ("alice@contoso.com", "10.0.0.4")
    assert remote.Ssh().argv("ssh://alice%40contoso.com@10.0.0.4", "true")[-2] == "alice@contoso.com@10.0.0.4"


def test_code_archive_leaves_out_bytecode(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "pkg" / "util.py").write_text("")
    (tmp_path / "pkg" / "__pycache__" / "util.cpython-311.pyc").write_bytes(b"\0")
    with tarfile.open(fileobj=BytesIO(remote.code_archive(tmp_path))) as tar:
        assert sorted(tar.getnames()) == ["pkg/util.py", "train.py"]


class FakeProcess:
    """A local ssh: lines, then an exit code; one that `hangs` streams until stopped or killed."""

    def __init__(self, lines: list[str], code: int, stopped: threading.Event | None = None):
        self._lines, self._code, self._stopped, self.killed = lines, code, stopped, False

    @property
    def stdout(self):
        for line in self._lines:
            yield line + "\n"
        if self._stopped is not None:
            self._stopped.wait(10)

    def wait(self) -> int:
        return -9 if self.killed else self._code

    def poll(self):
        return None

    def kill(self) -> None:
        self.killed = True
        if self._stopped is not None:
            self._stopped.set()


def test_lines_come_prefixed_by_node_and_a_clean_run_stops_nothing():
    processes = iter([FakeProcess(["[default0]:step 1", "[default0]:done"], 0), FakeProcess(["[default0]:step 1"], 0)])
    seen, stops = [], []
    result = remote.stream({"node-0": ["ssh", "a"], "node-1": ["ssh", "b"]}, lambda n, t: seen.append((n, t)),
                           lambda: stops.append(1), spawn=lambda argv: next(processes))
    assert result.ok and result.first_failure is None and not stops
    assert [t for n, t in seen if n == "node-0"] == ["[default0]:step 1", "[default0]:done"]
    assert ("node-1", "[default0]:step 1") in seen


def test_a_failed_worker_stops_every_node_and_names_the_first_failure():
    stopped = threading.Event()
    survivor = FakeProcess(["[default0]:step 1"], 0, stopped)
    failing = FakeProcess(["[default1]:Traceback", "torch.distributed.elastic ... failed (exitcode: 3) local_rank: 1"],
                          1)
    processes = iter([survivor, failing])
    stops = []
    start = time.monotonic()
    result = remote.stream({"node-0": ["ssh", "a"], "node-1": ["ssh", "b"]}, lambda n, t: None,
                           lambda: (stops.append(1), stopped.set()), spawn=lambda argv: next(processes))
    assert time.monotonic() - start < 5
    assert stops == [1], "one stop, on every node, however many nodes then fail"
    assert result.first_failure == "node-1" and result.exit_codes["node-1"] == 1 and not result.ok


def test_a_node_that_ignores_the_stop_is_cut_locally():
    """A node that went away answers no stop: its ssh is killed after stop_wait_s."""
    stuck = FakeProcess([], 0, threading.Event())
    processes = iter([stuck, FakeProcess([], 255)])
    result = remote.stream({"node-0": ["ssh", "a"], "node-1": ["ssh", "b"]}, lambda n, t: None, lambda: None,
                           spawn=lambda argv: next(processes), stop_wait_s=0.2)
    assert stuck.killed and result.exit_codes == {"node-0": 137, "node-1": 255}
    assert result.first_failure == "node-1"


def test_stop_command_really_ends_the_job_session_and_its_stray_children(tmp_path):
    """The job line and the stop line, run by a local shell instead of ssh: the stop ends it at once."""
    run_id = f"goldenenv-test{time.time_ns() % 10**8}"
    marker_file = tmp_path / "stray.pid"
    # a stray child in a session of its own, as torch elastic starts its workers
    script = ["sh", "-c", f"setsid sleep 60 & echo $! > {marker_file}; sleep 60"]
    job = subprocess.Popen(["sh", "-c", remote.job_command(script, {}, run_id, "")])
    deadline = time.monotonic() + 5
    while not marker_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stray = int(marker_file.read_text().strip() or 0) if marker_file.exists() else 0
    try:
        assert Path(remote.pidfile(run_id)).exists()
        subprocess.run(["sh", "-c", remote.stop_command(run_id, "")], timeout=30, check=True)
        assert job.wait(timeout=10) != 0
        assert not Path(f"/proc/{stray}").exists() or "Z" in Path(f"/proc/{stray}/stat").read_text().split()[2]
        assert not Path(remote.pidfile(run_id)).exists()
    finally:
        job.kill()


def test_run_job_gives_every_node_its_own_address_and_one_rendezvous():
    spawned = []

    def spawn(argv):
        spawned.append(argv)
        return FakeProcess([], 0)

    result = remote.run_job(["ssh://ubuntu@1.2.3.4", "ssh://ubuntu@1.2.3.5"], ["python", "t.py"],
                            remote.Launch.from_env(LAUNCH_ENV), ["10.0.1.5", "10.0.1.6"], lambda n, t: None,
                            exec_prefix="docker exec goldenenv", spawn=spawn, run_id="goldenenv-x")
    assert result.ok and result.hosts == {"node-0": "ssh://ubuntu@1.2.3.4", "node-1": "ssh://ubuntu@1.2.3.5"}
    assert [a[-2] for a in spawned] == ["ubuntu@1.2.3.4", "ubuntu@1.2.3.5"]
    assert ["--local-addr=10.0.1.5" in a[-1] for a in spawned] == [True, False]
    assert all("--rdzv-endpoint=10.0.1.5:29500" in a[-1] for a in spawned)
    with pytest.raises(remote.RemoteError, match="3 hosts"):
        remote.run_job(["a", "b", "c"], ["x"], remote.Launch.from_env(LAUNCH_ENV), ["1", "2", "3"], print)


def test_failure_names_the_first_failing_node_and_its_host():
    run = remote.RemoteRun({"node-0": 143, "node-1": 1}, "node-1", {"node-0": "ssh://a", "node-1": "ssh://b"})
    assert run.describe_failure().startswith("a rank failed on node-1 (ssh://b); stopped the run on every node.")


@pytest.fixture
def captured(monkeypatch):
    calls = {}
    monkeypatch.setattr(remote, "sync_code", lambda folder, hosts, dest, ssh, prefix, shared: calls.setdefault(
        "sync", (hosts, dest, prefix, shared)) and hosts[:1])

    def run_job(*args, **kw):
        calls.update(run=args, spot_cloud=kw.get("spot_cloud"))
        return remote.RemoteRun({})

    monkeypatch.setattr(remote, "run_job", run_job)
    return calls


def test_a_cloud_run_takes_hosts_and_rendezvous_from_the_outputs_and_checkpoints_to_the_parallel_fs(captured):
    spec = lifecycle.load_spec("aws-p5-2node")
    outputs = {"nodePrivateIps": ["10.0.1.5", "10.0.1.6"], "launchEnv": LAUNCH_ENV}
    lifecycle.run_remote(spec, ["python", "/fsx/code/train_ddp.py"], print, outputs=outputs, code=Path("examples"),
                         resume=True, log=lambda m: None)
    hosts, command, launch, addresses, _, ssh, prefix, env = captured["run"]
    assert hosts == ["ssh://ubuntu@10.0.1.5", "ssh://ubuntu@10.0.1.6"] and addresses == ["10.0.1.5", "10.0.1.6"]
    user = load_lock(spec.image.lock).user
    assert launch == remote.Launch("10.0.1.5", 29500, 2, 8)
    assert prefix == f"sudo -n docker exec --user {user} goldenenv", "the DLAMI's ubuntu reaches Docker by sudo"
    assert env["GOLDENENV_CHECKPOINTS"] == "/fsx/checkpoints" and env["GOLDENENV_RESUME"] == "1"
    assert captured["sync"] == (hosts, "/fsx/code", prefix, True), "once, to the shared FS"
    assert env["GOLDENENV_CODE"] == "/fsx/code"
    assert captured.get("spot_cloud") is None  # on-demand nodes: no spot watcher


def test_a_run_on_spot_nodes_watches_for_interruption_notices(captured):
    spec = lifecycle.load_spec("aws-p4d-4node-spot")
    outputs = {"nodePrivateIps": [f"10.0.1.{i}" for i in range(4)],
               "launchEnv": {**LAUNCH_ENV, "NNODES": "4"}}
    lifecycle.run_remote(spec, ["python", "t.py"], print, outputs=outputs, log=lambda m: None)
    assert captured["spot_cloud"] == "aws"


def test_a_local_stack_is_not_run_over_ssh():
    with pytest.raises(ConfigError, match="local cloud"):
        lifecycle.run_remote(lifecycle.load_spec("local"), ["true"], print, hosts=["ssh://a"])
    result = CliRunner().invoke(app, ["run", "-s", "local", "--hosts", "ssh://a@b", "--", "true"])
    assert result.exit_code == 2 and "--hosts" in result.output
