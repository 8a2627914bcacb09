"""A spot notice becomes a checkpoint: train_ddp.py under the image's goldenenv-spotwatch, a fake IMDSv2 beside it.

The notice is switched on mid-training; the run must checkpoint its last completed step and exit 0 well
inside AWS's two-minute window, and a resumed run must continue at the next step. (That a resumed run
ends where an uninterrupted one does is test_train_example's job.)
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from goldenenv.images.build import build
from goldenenv.images.dockerfile import SPOTWATCH, BuildOptions
from goldenenv.images.lock import load

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
EXAMPLE_IN_CONTAINER = "/work/train_ddp.py"
CHECKPOINTS_IN_CONTAINER = "/checkpoints"
NOTICE_IN_CONTAINER = "/notice"
RUN_LIMIT_S = 150
NOTICE_WINDOW_S = 120
"""AWS's two-minute warning."""
STOPPED_WITHIN_S = 30
METADATA_PORT = 8080

FAKE_IMDS = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NOTICE = os.path.join(sys.argv[1], "instance-action")
TOKEN = "fake-imdsv2-token"

class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body=""):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self.answer(200, TOKEN)
        self.answer(400)

    def do_GET(self):
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            return self.answer(401)  # IMDSv2 required, as on an instance with http-tokens=required
        if self.path == "/latest/meta-data/spot/instance-action" and os.path.exists(NOTICE):
            return self.answer(200, open(NOTICE).read())
        self.answer(404)

    def log_message(self, fmt, *args):
        print("imds", self.command, self.path, args[1], flush=True)

ThreadingHTTPServer(("0.0.0.0", int(sys.argv[2])), Handler).serve_forever()
"""
"""AWS's instance metadata service as far as spot notices go: token, then instance-action (404 until switched on)."""


@pytest.fixture(scope="module")
def image(client) -> str:
    """The cpu-dev image as the current templates build it (cached layers: only the watcher's COPY may rerun)."""
    return build(load("cpu-dev"), BuildOptions.from_environment(), client, log=lambda m: None).tag


def writable(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o777)  # the image's user (uid 1000) writes here
    return path


@pytest.fixture
def site(client, image, tmp_path):
    """An internal network holding a fake metadata endpoint; yields a launcher of training containers on it."""
    name = f"goldenenv-spotwatch-{uuid.uuid4().hex[:8]}"
    network = client.networks.create(name, internal=True)
    notice_dir = writable(tmp_path / "notice")
    started = [client.containers.run(
        image, ["python3", "-c", FAKE_IMDS, NOTICE_IN_CONTAINER, str(METADATA_PORT)], detach=True,
        name=f"{name}-imds", network=name, volumes={str(notice_dir): {"bind": NOTICE_IN_CONTAINER, "mode": "ro"}})]

    def launch(checkpoints: Path, command: list[str]):
        container = client.containers.run(
            image, ["timeout", str(RUN_LIMIT_S), *command], detach=True, network=name,
            environment={"GOLDENENV_CHECKPOINTS": CHECKPOINTS_IN_CONTAINER,
                         "GOLDENENV_METADATA_URL": f"http://{name}-imds:{METADATA_PORT}"},
            volumes={str(EXAMPLE): {"bind": EXAMPLE_IN_CONTAINER, "mode": "ro"},
                     str(checkpoints): {"bind": CHECKPOINTS_IN_CONTAINER, "mode": "rw"}})
        started.append(container)
        return container

    launch.notice_dir = notice_dir
    launch.imds = started[0]
    yield launch
    for container in started:
        container.remove(force=True)
    network.remove()


def torchrun(*args: str) -> list[str]:
    return ["torchrun", "--standalone", "--nproc-per-node", "2", EXAMPLE_IN_CONTAINER, "--log-every", "1", *args]


def logged_steps(output: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^step (\d+) loss", output, re.MULTILINE)]


def event(output: str, name: str) -> dict:
    found = [json.loads(line) for line in output.splitlines() if line.startswith(f'{{"event": "{name}"')]
    assert len(found) == 1, output
    return found[0]


def finish(container) -> tuple[int, str]:
    code = container.wait(timeout=RUN_LIMIT_S + 30)["StatusCode"]
    return code, container.logs().decode()


def test_a_spot_notice_mid_training_checkpoints_the_last_step_and_the_resumed_run_loses_none(site, tmp_path):
    checkpoints = writable(tmp_path / "checkpoints")
    victim = site(checkpoints, [SPOTWATCH, "--cloud", "aws", "--interval", "1", "--",
                                *torchrun("--steps", "2000", "--checkpoint-every", "50", "--sleep-per-step", "0.05")])
    deadline = time.monotonic() + 90
    while max(logged_steps(victim.logs().decode()), default=0) < 10:
        victim.reload()
        assert victim.status in ("created", "running"), finish(victim)[1]
        assert time.monotonic() < deadline, victim.logs().decode()
        time.sleep(0.1)

    terminate_at = datetime.now(timezone.utc) + timedelta(seconds=NOTICE_WINDOW_S)
    notice = {"action": "terminate", "time": terminate_at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    (site.notice_dir / "instance-action").write_text(json.dumps(notice))
    noticed = time.monotonic()
    code, output = finish(victim)
    took = time.monotonic() - noticed

    assert code == 0, output
    assert took < STOPPED_WITHIN_S, f"{took:.1f} s from notice to exit\n{output}"
    assert f"aws spot notice: terminate at {notice['time']}" in output
    assert "sent SIGUSR1 to" in output
    interrupted = event(output, "interrupted")
    stopped_at = interrupted["final_step"]
    assert interrupted["cause"] == "SIGUSR1"
    assert stopped_at == max(logged_steps(output)), "the checkpoint holds the last completed step"
    assert (checkpoints / "latest").read_text().strip() == f"step-{stopped_at:08d}.pt"
    assert (checkpoints / f"step-{stopped_at:08d}.pt").is_file()
    assert interrupted["checkpoint"] == f"{CHECKPOINTS_IN_CONTAINER}/step-{stopped_at:08d}.pt"
    assert re.search(r"imds GET /latest/meta-data/spot/instance-action 200", site.imds.logs().decode())

    (site.notice_dir / "instance-action").unlink()  # the node came back: no notice pending on it
    total = stopped_at + 10
    resumed = site(checkpoints, [SPOTWATCH, "--cloud", "aws", "--interval", "1", "--",
                                 *torchrun("--steps", str(total), "--checkpoint-every", "50")])
    code, output = finish(resumed)
    assert code == 0, output
    assert f"resumed from step {stopped_at} " in output
    assert logged_steps(output)[0] == stopped_at + 1, "it starts at the next step: none repeated, none skipped"
    done = event(output, "done")
    assert (done["resumed_from"], done["final_step"]) == (stopped_at, total)
    assert "spot notice:" not in output
