"""A cold image build reports progress in a pipe: a line as each step ends with its seconds, and never 10 s without
a line, however long a pip install or a layer commit stays silent (issue 36: the image phase was silent for over
five minutes in CI). Fake build streams and debootstraps on an injected clock: no sleeps."""

from __future__ import annotations

import queue
import re
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from docker.errors import ImageNotFound
from rich.console import Console
from typer.testing import CliRunner

from goldenenv.images import base as base_module
from goldenenv.images.build import Built, build_context
from goldenenv.images.lock import Bootstrap
from goldenenv.progress import END, Steps

TAG = "goldenenv-test/progress:fake"
STEP_LINE = re.compile(r"^(step \d+/\d+ .*): (\d+\.\d) s")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedFeed:
    """What the engine sends, each item at its second on the fake clock; waiting for one moves the clock on."""

    def __init__(self, timeline: list[tuple[float, object]], clock: Clock):
        self.items, self.clock = list(timeline), clock

    def get(self, timeout: float):
        if not self.items:
            return END
        at, item = self.items[0]
        if at > self.clock.now + timeout:
            self.clock.now += timeout
            raise queue.Empty
        self.items.pop(0)
        self.clock.now = max(self.clock.now, at)
        return item


class CallFeed:
    """A blocking call that takes `seconds` on the fake clock."""

    def __init__(self, call, seconds: float, clock: Clock):
        self.call, self.clock, self.done_at, self.finished = call, clock, clock.now + seconds, False

    def get(self, timeout: float):
        if self.finished:
            return END
        if self.done_at > self.clock.now + timeout:
            self.clock.now += timeout
            raise queue.Empty
        self.clock.now, self.finished = self.done_at, True
        return next(iter(self.call))


def stream(at: float, text: str) -> tuple[float, dict]:
    return at, {"stream": text}


# A cold build as the classic builder streams it: a silent 50 s pip install, then a 40 s commit after its last line
BUILD = [
    stream(0.0, "Step 1/4 : FROM goldenenv/base-debian-bookworm:fake AS os\n"),
    stream(0.1, " ---> 3b1c6401ef1b\n"),
    stream(0.2, "Step 2/4 : RUN apt-get install -y slurmd munge\n"),
    stream(0.4, " ---> Running in 1e2f\n"),
    stream(8.0, "Setting up munge (0.5.15-2+deb12u1) ...\n"),
    stream(9.0, "Removing intermediate container 1e2f\n"),
    stream(9.5, " ---> 46d899696e46\n"),
    stream(9.6, "Step 3/4 : FROM os AS layer-torch\n"),
    stream(9.7, " ---> 46d899696e46\n"),
    stream(10.0, "Step 4/4 : RUN /opt/pip/bin/python -m pip install --no-deps --require-hashes --prefix /opt/layer "
                 "-r /tmp/requirements-torch.txt\n"),
    stream(10.5, " ---> Running in 9a8b\n"),
    stream(11.0, "Processing /tmp/goldenenv-build/wheelhouse/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl\n"),
    stream(12.0, "Installing collected packages: torch\n"),
    stream(62.0, "Successfully installed torch-2.13.0+cpu\n"),
    stream(101.0, "Removing intermediate container 9a8b\n"),
    stream(102.0, " ---> 641e2a57c253\n"),
    (102.5, {"aux": {"ID": "sha256:641e2a57c253"}}),
    stream(102.6, "Successfully built 641e2a57c253\n"),
]
"""Every step's seconds, from its Step line to its new image: 0.1, 9.3, 0.1, 92.0."""


class FakeImages:
    def get(self, ref):
        raise ImageNotFound(ref)

    def list(self, **filters):
        return []


class FakeEngine:
    """The classic builder's stream of BUILD; tags kept stages and has no images of its own."""

    def __init__(self):
        self.api, self.images, self.tagged = self, FakeImages(), []

    def build(self, **kwargs):
        return BUILD

    def tag(self, image_id, repository, tag):
        self.tagged.append(f"{repository}:{tag}")


@pytest.fixture
def built_in_a_pipe(tmp_path):
    """(lines, with the second each was written, the build's result)."""
    (tmp_path / "Dockerfile").write_text("FROM goldenenv/base-debian-bookworm:fake AS os\nFROM os AS layer-torch\n")
    clock, lines = Clock(), []
    steps = Steps(lambda text: lines.append((clock.now, text)), clock=clock,
                  feed=lambda items: TimedFeed(items, clock))
    built = build_context(FakeEngine(), tmp_path, TAG, "progress", steps=steps)
    return lines, built


def test_each_step_of_a_build_gets_a_line_with_its_seconds(built_in_a_pipe):
    lines, built = built_in_a_pipe
    ended = [STEP_LINE.match(text).groups() for _, text in lines if STEP_LINE.match(text)]
    assert [(name.split(" ", 2)[1], float(seconds)) for name, seconds in ended] == [
        ("1/4", 0.1), ("2/4", 9.3), ("3/4", 0.1), ("4/4", 92.0)]
    assert ended[1][0].startswith("step 2/4 os: RUN apt-get install"), "a step is named by its stage and instruction"
    assert ended[3][0].startswith("step 4/4 layer-torch: RUN /opt/pip/bin/python -m pip")
    assert ended[3][0].endswith("requirements-torch.txt"), "a long instruction keeps its end: which requirements"
    assert isinstance(built, Built) and built.steps == 4


def test_a_silent_pip_install_and_layer_commit_get_a_line_at_least_every_10_s(built_in_a_pipe):
    lines, _ = built_in_a_pipe
    seconds = [0.0] + [at for at, _ in lines]
    assert max(b - a for a, b in zip(seconds, seconds[1:])) <= 10 + 1e-9  # (the clock adds floats)
    beats = [text for _, text in lines if "so far" in text]
    assert beats, "the 92 s step had heartbeats"
    assert all(text.startswith("step 4/4 layer-torch: RUN") for text in beats), "a heartbeat names its step"
    assert "step 4/4 layer-torch" in beats[0] and "Installing collected packages: torch" in beats[0], \
        "and quotes the step's latest output"
    assert re.search(r": 20 s so far", "\n".join(beats)), "with its seconds so far"


def test_the_layer_commit_after_the_output_is_named_in_the_steps_line(built_in_a_pipe):
    lines, _ = built_in_a_pipe
    pip_line = next(text for _, text in lines if STEP_LINE.match(text) and "4/4" in text)
    assert "the last 40 s after its output: exit and layer commit" in pip_line  # output ends at 62, image at 102


def test_debootstrap_and_the_import_are_steps_with_heartbeats(monkeypatch):
    """debootstrap takes a minute or more and prints nothing until it ends: the base is reported like a build."""
    clock, lines, took = Clock(), [], iter([75.0, 12.0])  # debootstrap, then tar + docker import
    monkeypatch.setattr(base_module.shutil, "which",
                        lambda name: f"/usr/sbin/{name}" if name == "debootstrap" else None)
    monkeypatch.setattr(base_module.subprocess, "run",
                        lambda cmd, **kwargs: (rootfs_of(cmd), subprocess.CompletedProcess(cmd, 0, "", ""))[1])
    monkeypatch.setattr(base_module, "_import", lambda *args: None)
    steps = Steps(lambda text: lines.append((clock.now, text)), clock=clock,
                  feed=lambda call: CallFeed(call, next(took), clock))
    spec = Bootstrap(distro="debian", release="bookworm", mirror="http://deb.debian.org/debian",
                     packages=["python3", "python3-venv"])
    base_module.bootstrap(object(), spec, "goldenenv-test/base:fake", spec.mirror, steps)
    ended = [text for _, text in lines if "so far" not in text]
    assert ended == ["debootstrap bookworm (2 packages beyond minbase): 75.0 s",
                     "docker import of the base as goldenenv-test/base:fake: 12.0 s"]
    seconds = [0.0] + [at for at, _ in lines]
    assert max(b - a for a, b in zip(seconds, seconds[1:])) <= 10 + 1e-9  # (the clock adds floats)
    assert "debootstrap bookworm (2 packages beyond minbase): 70 s so far" in [text for _, text in lines]


def rootfs_of(cmd: list[str]) -> None:
    """What debootstrap leaves that bootstrap() edits: the target's apt and log folders."""
    rootfs = Path([arg for arg in cmd[1:] if not arg.startswith("--")][1])
    for folder in ("etc/apt", "var/log"):
        (rootfs / folder).mkdir(parents=True, exist_ok=True)


LONG = ("step 2/2 layer-torch: RUN /opt/pip/bin/python -m pip --python /opt … mp/requirements-torch.txt: 40 s so far"
        " · Installing collected packages: mpmath, typing-extensions, torch, sympy")


def test_image_build_in_a_pipe_prints_a_line_per_step(monkeypatch):
    """Not a terminal (CI, `| tee`): no progress bar that only draws at the end, but the build's own lines."""
    from goldenenv.cli import app
    from goldenenv.images import build as build_module

    def fake_build(lock, options, log=print, **kwargs):
        log("step 1/2 os: RUN apt-get install -y slurmd: 9.4 s")
        log(LONG)
        return Built(lock.tag, "sha256:fake", 95.0, 0, 2)

    monkeypatch.setattr(build_module, "build", fake_build)
    result = CliRunner().invoke(app, ["image", "build", "cpu-dev"])
    assert result.exit_code == 0, result.output
    assert "step 1/2 os: RUN apt-get install -y slurmd: 9.4 s" in result.output
    assert LONG in result.output, "a line is never wrapped: a log is read and grepped line by line"
    assert "built goldenenv/cpu-dev:" in result.output


def test_the_flow_in_a_pipe_prints_the_image_phase_lines(monkeypatch):
    from goldenenv import flow, lifecycle
    from goldenenv.images.dockerfile import BuildOptions

    def fake_image(spec, options, client, log, show=None):
        log("step 1/2 os: RUN apt-get install -y slurmd: 9.4 s")
        log(LONG)
        return "goldenenv/cpu-dev:fake"

    def no_cluster(*args, **kwargs):
        raise RuntimeError("no engine in this test")

    monkeypatch.setattr(lifecycle, "ensure_image", fake_image)
    monkeypatch.setattr(lifecycle, "up", no_cluster)
    out = StringIO()
    report = flow.run_flow(lifecycle.load_spec("local"), BuildOptions(), flow.Path("."), destroy_after=False,
                           console=Console(file=out, force_terminal=False, width=80), client=object())
    assert [p.name for p in report.phases] == ["image", "up"]
    assert "  image · step 1/2 os: RUN apt-get install -y slurmd: 9.4 s" in out.getvalue()
    assert f"  image · {LONG}\n" in out.getvalue(), "never wrapped at the console's 80 columns"


def test_mmdebstrap_where_installed_trusts_only_the_distributions_keyring(monkeypatch):
    """The faster bootstrap is used when installed, and is held to debootstrap's rule: the release's signature must
    check against the distribution's keyring; nothing tells apt to accept an unsigned release."""
    monkeypatch.setattr(base_module.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert base_module.bootstrapper() == "mmdebstrap"
    spec = Bootstrap(distro="debian", release="bookworm", mirror="http://deb.debian.org/debian",
                     packages=["python3", "procps"])
    cmd = base_module.debootstrap_command(spec, Path("/tmp/rootfs"), spec.mirror, "mmdebstrap")
    assert cmd[0] == "mmdebstrap" and "--variant=minbase" in cmd
    assert "--hook-dir=/usr/share/mmdebstrap/hooks/maybe-merged-usr" in cmd, "debootstrap's package set, not usrmerge's"
    assert "--keyring=/usr/share/keyrings/debian-archive-keyring.gpg" in cmd
    assert "--include=python3,procps" in cmd
    assert cmd[-3:] == ["bookworm", "/tmp/rootfs", "http://deb.debian.org/debian"]
    assert not [arg for arg in cmd if "insecure" in arg or "check-gpg" in arg or "trusted=yes" in arg]
    monkeypatch.setattr(base_module.shutil, "which", lambda name: "/usr/sbin/debootstrap" if name == "debootstrap"
                        else None)
    assert base_module.bootstrapper() == "debootstrap"
