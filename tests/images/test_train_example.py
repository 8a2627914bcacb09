"""examples/train_ddp.py trains for real under torchrun in the cpu-dev image, and survives being killed."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from goldenenv.images.build import build
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import load

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
EXAMPLE_IN_CONTAINER = "/work/train_ddp.py"
CHECKPOINTS_IN_CONTAINER = "/checkpoints"
RUN_LIMIT_S = 150



@pytest.fixture(scope="session")
def image(client) -> str:
    lock = load("cpu-dev")
    try:
        client.images.get(lock.tag)
    except docker.errors.ImageNotFound:
        build(lock, BuildOptions.from_environment(), client)
    return lock.tag


@pytest.fixture
def checkpoint_dir(tmp_path) -> Path:
    """A host folder the image's user (uid 1000) can write checkpoints to."""
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


@dataclass
class Run:
    exit_code: int
    output: str

    @property
    def summary(self) -> dict:
        done = [json.loads(line) for line in self.output.splitlines() if line.startswith('{"event": "done"')]
        assert len(done) == 1, self.output
        return done[0]


@pytest.fixture
def launch(client, image):
    """Start containers from the image with the example and a checkpoint folder mounted; removes them afterwards."""
    started = []

    def start(checkpoints: Path, command: list[str]):
        container = client.containers.run(
            image, ["timeout", str(RUN_LIMIT_S), *command], detach=True,
            # no network: the hostname must resolve to loopback or torchrun's rendezvous waits for it forever
            network_mode="none", hostname="localhost",
            environment={"GOLDENENV_CHECKPOINTS": CHECKPOINTS_IN_CONTAINER},
            volumes={str(EXAMPLE): {"bind": EXAMPLE_IN_CONTAINER, "mode": "ro"},
                     str(checkpoints): {"bind": CHECKPOINTS_IN_CONTAINER, "mode": "rw"}})
        started.append(container)
        return container

    yield start
    for container in started:
        container.remove(force=True)


def torchrun(*args: str) -> list[str]:
    return ["torchrun", "--standalone", "--nproc-per-node", "2", EXAMPLE_IN_CONTAINER, *args]


def finish(container) -> Run:
    exit_code = container.wait(timeout=RUN_LIMIT_S + 30)["StatusCode"]
    return Run(exit_code, container.logs().decode())


@pytest.fixture
def train(launch):
    def run(checkpoints: Path, *args: str) -> Run:
        return finish(launch(checkpoints, torchrun(*args)))

    return run


def latest_step(checkpoints: Path) -> int | None:
    pointer = checkpoints / "latest"
    if not pointer.is_file():
        return None
    return int(re.fullmatch(r"step-(\d{8})\.pt", pointer.read_text().strip()).group(1))


def listing(checkpoints: Path) -> set[str]:
    return {p.name for p in checkpoints.iterdir()}


def test_two_ranks_train_and_checkpoint_atomically(train, checkpoint_dir):
    run = train(checkpoint_dir, "--steps", "60", "--checkpoint-every", "20")
    assert run.exit_code == 0, run.output
    assert "terminate called" not in run.output  # every rank ended in order (issue 36 item 2)
    assert "starting fresh" in run.output
    summary = run.summary
    assert (summary["final_step"], summary["world_size"], summary["resumed_from"]) == (60, 2, None)
    assert summary["last_loss"] < summary["first_loss"], run.output
    assert {"step-00000040.pt", "step-00000060.pt"} <= listing(checkpoint_dir)
    assert (checkpoint_dir / "latest").read_text().strip() == "step-00000060.pt"
    assert not [name for name in listing(checkpoint_dir) if ".tmp" in name]


def test_a_second_run_resumes_where_the_first_stopped_and_matches_an_uninterrupted_one(
        launch, train, checkpoint_dir, tmp_path):
    uninterrupted_dir = tmp_path / "uninterrupted"
    uninterrupted_dir.mkdir()
    uninterrupted_dir.chmod(0o777)
    uninterrupted = launch(uninterrupted_dir, torchrun("--steps", "100"))
    assert train(checkpoint_dir, "--steps", "60").exit_code == 0

    run = train(checkpoint_dir, "--steps", "100")
    assert run.exit_code == 0, run.output
    assert "resumed from step 60" in run.output
    assert (run.summary["final_step"], run.summary["resumed_from"]) == (100, 60)
    assert listing(checkpoint_dir) == {"latest", "step-00000060.pt", "step-00000080.pt", "step-00000100.pt"}
    reference = finish(uninterrupted)
    assert reference.exit_code == 0, reference.output
    assert run.summary["last_loss"] == pytest.approx(reference.summary["last_loss"], rel=1e-5)


def test_a_run_killed_mid_training_resumes_from_its_last_complete_checkpoint(launch, train, checkpoint_dir):
    victim = launch(checkpoint_dir, torchrun("--steps", "200", "--checkpoint-every", "10", "--sleep-per-step", "0.05"))
    deadline = time.monotonic() + 90
    while (latest_step(checkpoint_dir) or 0) < 30:
        victim.reload()
        assert victim.status in ("created", "running"), finish(victim).output
        assert time.monotonic() < deadline, victim.logs().decode()
        time.sleep(0.05)
    victim.kill()  # SIGKILL: no handler, no cleanup, as when a spot node disappears
    victim.wait()
    killed_at = latest_step(checkpoint_dir)  # read after the kill: the run may have moved `latest` on meanwhile
    assert 30 <= killed_at < 200
    # what a kill during a write leaves behind: the loader must not take it for a checkpoint
    (checkpoint_dir / f".step-{killed_at + 10:08d}.pt.tmp-4242").write_bytes(b"PK\x03\x04 truncated")

    run = train(checkpoint_dir, "--steps", "200", "--checkpoint-every", "10")
    assert run.exit_code == 0, run.output
    assert f"resumed from step {killed_at} " in run.output
    assert "unreadable" not in run.output
    assert (run.summary["final_step"], run.summary["resumed_from"]) == (200, killed_at)
    assert latest_step(checkpoint_dir) == 200


CRASH_PROBE = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import torch
import train_ddp as example

directory = Path(sys.argv[2])
state = lambda step: {"step": step, "model": {"weight": torch.full((256,), float(step))}}
example.save_checkpoint(directory, 10, state(10))

def killed(src, dst):
    raise KeyboardInterrupt("killed between write and rename")
rename, os.replace = os.replace, killed
try:
    example.save_checkpoint(directory, 20, state(20))
except KeyboardInterrupt:
    pass
os.replace = rename
# a SIGKILL runs no cleanup: leave a half-written file as one would
whole = (directory / "step-00000010.pt").read_bytes()
(directory / ".step-00000030.pt.tmp-4242").write_bytes(whole[: len(whole) // 2])

def loads(path):
    try:
        return torch.load(path, weights_only=True)["step"]
    except Exception as e:
        return repr(e)

seen = {"after_crash": example.latest_checkpoint(directory).name}
(directory / "latest").unlink()
seen["without_pointer"] = example.latest_checkpoint(directory).name
(directory / "latest").write_text("step-00000090.pt\\n")
seen["pointer_to_missing"] = example.latest_checkpoint(directory).name
seen["checkpoints"] = {p.name: loads(p) for p in directory.glob("step-*.pt")}
print(json.dumps(seen))
"""


def test_a_crash_between_write_and_rename_never_leaves_a_checkpoint_that_fails_to_load(
        launch, checkpoint_dir):
    probe = launch(checkpoint_dir, ["python", "-c", CRASH_PROBE, EXAMPLE_IN_CONTAINER, CHECKPOINTS_IN_CONTAINER])
    run = finish(probe)
    assert run.exit_code == 0, run.output
    seen = json.loads(run.output.strip().splitlines()[-1])
    assert seen["after_crash"] == seen["without_pointer"] == seen["pointer_to_missing"] == "step-00000010.pt"
    assert seen["checkpoints"] == {"step-00000010.pt": 10}
    assert ".step-00000030.pt.tmp-4242" in listing(checkpoint_dir)
