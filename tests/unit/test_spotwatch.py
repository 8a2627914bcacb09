"""The spot watcher against a fake metadata endpoint: it signals the training once per notice, and never crashes."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from goldenenv import spotwatch
from goldenenv.images.dockerfile import SPOTWATCH, dockerfile, write_context
from goldenenv.images import bundle
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import load

WATCHER = Path(spotwatch.__file__)

TRAINING = """
import os, signal, sys, time
time.sleep(float(sys.argv[3]))  # importing torch takes a while
signals = []
signal.signal(signal.SIGUSR1, lambda s, f: signals.append(s))
open(sys.argv[1], "w").write("ready")
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline and not signals:
    time.sleep(0.02)
time.sleep(0.5)  # a second signal would arrive here
print("signals", len(signals), flush=True)
sys.exit(0 if signals else 3)
"""
"""A stand-in for a training rank: ARGV ready-file wait-seconds start-delay; catches SIGUSR1, exits 0 after it
(3 if none came in time)."""


class FakeMetadata:
    """IMDS-like endpoint: answers from the fields below, records every request."""

    def __init__(self) -> None:
        self.token: str | None = "tok-1"  # None: PUT /latest/api/token is refused (403)
        self.require_token = True
        self.aws_action: dict | None = None
        self.aliyun_time: str | None = None
        self.fail_with: int | None = None  # every request answers this status
        self.requests: list[tuple[str, str, dict]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):
                fake.requests.append(("PUT", self.path, {k.lower(): v for k, v in self.headers.items()}))
                if fake.fail_with:
                    return self._answer(fake.fail_with)
                ttl = (self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
                       or self.headers.get("X-aliyun-ecs-metadata-token-ttl-seconds"))
                if self.path != "/latest/api/token" or not ttl or fake.token is None:
                    return self._answer(403)
                self._answer(200, fake.token)

            def do_GET(self):
                fake.requests.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
                if fake.fail_with:
                    return self._answer(fake.fail_with)
                token = (self.headers.get("X-aws-ec2-metadata-token")
                         or self.headers.get("X-aliyun-ecs-metadata-token"))
                if fake.require_token and (token is None or token != fake.token):
                    return self._answer(401)
                if self.path == "/latest/meta-data/spot/instance-action" and fake.aws_action:
                    return self._answer(200, json.dumps(fake.aws_action))
                if self.path == "/latest/meta-data/instance/spot/termination-time" and fake.aliyun_time:
                    return self._answer(200, fake.aliyun_time)
                self._answer(404)

        return Handler

    def gets(self, path: str) -> list[dict]:
        return [headers for method, p, headers in self.requests if method == "GET" and p == path]


@pytest.fixture
def metadata():
    fake = FakeMetadata()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def in_two_minutes() -> str:
    return (datetime.now(timezone.utc) + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")


def watched(tmp_path: Path, metadata: FakeMetadata, cloud: str, wait_s: float, start_delay: float = 0.0):
    return subprocess.Popen(
        [sys.executable, str(WATCHER), "--cloud", cloud, "--metadata-url", metadata.url, "--interval", "0.2",
         "--", sys.executable, "-c", TRAINING, str(tmp_path / "ready"), str(wait_s), str(start_delay)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_watched(tmp_path: Path, metadata: FakeMetadata, cloud: str, wait_s: float):
    ready = tmp_path / "ready"
    watcher = watched(tmp_path, metadata, cloud, wait_s)
    deadline = time.monotonic() + 10
    while not ready.exists():
        assert watcher.poll() is None and time.monotonic() < deadline, watcher.communicate()
        time.sleep(0.02)
    return watcher


def test_no_notice_means_no_signal_and_the_command_exit_code_comes_through(tmp_path, metadata):
    watcher = start_watched(tmp_path, metadata, "aws", 1.5)
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 3, err
    assert "signals 0" in out
    assert "spot notice:" not in err
    polls = metadata.gets("/latest/meta-data/spot/instance-action")
    assert len(polls) >= 3, "it keeps polling while the command runs"
    assert all(h.get("x-aws-ec2-metadata-token") == "tok-1" for h in polls)


def test_an_aws_notice_through_imdsv2_signals_the_training_once_and_logs_the_deadline(tmp_path, metadata):
    watcher = start_watched(tmp_path, metadata, "aws", 15)
    time.sleep(0.5)
    deadline = in_two_minutes()
    metadata.aws_action = {"action": "terminate", "time": deadline}
    started = time.monotonic()
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 0, err
    assert time.monotonic() - started < 3, "noticed within a few poll periods"
    assert "signals 1" in out, "one signal, not one per poll"
    assert f"aws spot notice: terminate at {deadline}" in err
    assert "s left" in err and "sent SIGUSR1" in err
    tokens = [headers for method, path, headers in metadata.requests if method == "PUT"]
    assert tokens and tokens[0]["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"
    assert len(tokens) == 1, "the session token is reused until it expires"


def test_an_alibaba_termination_time_in_hardened_mode_signals_the_training(tmp_path, metadata):
    watcher = start_watched(tmp_path, metadata, "alicloud", 15)
    deadline = in_two_minutes()
    metadata.aliyun_time = deadline
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 0, err
    assert "signals 1" in out
    assert f"alicloud spot notice: terminate at {deadline}" in err
    polls = metadata.gets("/latest/meta-data/instance/spot/termination-time")
    assert polls and all(h.get("x-aliyun-ecs-metadata-token") == "tok-1" for h in polls)
    assert not metadata.gets("/latest/meta-data/spot/instance-action")


def test_alibaba_in_normal_mode_needs_no_token(tmp_path, metadata):
    metadata.token, metadata.require_token = None, False
    metadata.aliyun_time = in_two_minutes()
    watcher = start_watched(tmp_path, metadata, "alicloud", 15)
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 0, err
    assert "signals 1" in out


def test_a_refused_token_or_failing_endpoint_is_logged_once_and_polling_goes_on(tmp_path, metadata):
    metadata.token = None  # IMDSv2 required but no token given: every GET answers 401
    watcher = start_watched(tmp_path, metadata, "aws", 15)
    time.sleep(0.7)
    metadata.token, metadata.fail_with = None, 500
    time.sleep(0.5)
    metadata.fail_with = None
    metadata.token = "tok-2"
    metadata.aws_action = {"action": "stop", "time": in_two_minutes()}
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 0, err
    assert "signals 1" in out
    assert "token refused" in err and "still polling" in err
    assert err.count("still polling") == 1, "an endpoint that keeps failing is logged once, not every poll"
    assert "metadata endpoint answers again" in err
    assert "aws spot notice: stop at" in err
    assert "Traceback" not in err


def test_an_unreachable_endpoint_never_crashes_the_watcher(tmp_path, metadata):
    metadata.server.shutdown()
    metadata.server.server_close()
    watcher = start_watched(tmp_path, metadata, "aws", 1.0)
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 3, "the command's own exit code"
    assert "still polling" in err and "Traceback" not in err


def test_a_command_that_catches_nothing_gets_the_fallback_signal(tmp_path, metadata):
    metadata.aws_action = {"action": "terminate", "time": in_two_minutes()}
    watcher = subprocess.Popen(
        [sys.executable, str(WATCHER), "--cloud", "aws", "--metadata-url", metadata.url, "--interval", "0.2",
         "--fallback-after", "0.5", "--", "sleep", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 128 + 15, err
    assert "no process under" in err and "sent SIGTERM" in err


def test_a_notice_before_the_training_catches_the_signal_waits_for_its_handler(tmp_path, metadata):
    metadata.aws_action = {"action": "terminate", "time": in_two_minutes()}
    watcher = watched(tmp_path, metadata, "aws", 15, start_delay=1.0)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert "signals 1" in out, "signalled once its handler was there, not killed before"


def test_notice_bodies_parse_into_an_action_and_a_deadline(metadata):
    metadata.aws_action = {"action": "terminate", "time": "2017-09-18T08:22:00Z"}
    notice = spotwatch.Metadata("aws", metadata.url).notice()
    assert (notice.action, notice.deadline) == ("terminate", datetime(2017, 9, 18, 8, 22, tzinfo=timezone.utc))
    metadata.aliyun_time = "2015-01-05T18:02:00Z"
    notice = spotwatch.Metadata("alicloud", metadata.url).notice()
    assert notice.deadline == datetime(2015, 1, 5, 18, 2, tzinfo=timezone.utc)
    metadata.aws_action = None
    assert spotwatch.Metadata("aws", metadata.url).notice() is None


def test_the_watcher_is_copied_into_every_golden_image(tmp_path):
    for name in ("cpu-dev", "cuda-slim"):
        assert f"COPY spotwatch.py {SPOTWATCH}\n" in dockerfile(load(name), "base:1")
    context = write_context(load("cpu-dev"), "base:1", BuildOptions(), tmp_path)
    copied = context / "spotwatch.py"
    assert copied.read_bytes() == bundle.spot_watcher()
    assert copied.stat().st_mode & 0o755 == 0o755
    assert copied.read_text().startswith("#!/usr/bin/env python3\n")


def test_the_watcher_imports_nothing_but_the_standard_library():
    imported = subprocess.run(
        [sys.executable, "-I", "-c", "import runpy, sys; sys.argv = ['w', '--help'];"
         f"runpy.run_path({str(WATCHER)!r}, run_name='__main__')"], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert "usage: goldenenv-spotwatch" in imported.stdout
    for path in [WATCHER, *spotwatch.notice_files().values()]:
        assert not re.search(r"^\s*(from|import)\s+goldenenv", path.read_text(), re.MULTILINE), path


@pytest.fixture
def fake_scontrol(tmp_path, monkeypatch):
    """scontrol on PATH that records its arguments: the watcher's Slurm calls, as slurmctld would receive them."""
    calls = tmp_path / "scontrol.calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return calls


def test_in_a_slurm_job_a_notice_checkpoints_then_requeues_the_job(tmp_path, metadata, fake_scontrol, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    ready = tmp_path / "ready"
    watcher = subprocess.Popen(
        [sys.executable, str(WATCHER), "--cloud", "aws", "--metadata-url", metadata.url, "--interval", "0.2",
         "--requeue-job", "--", sys.executable, "-c", TRAINING, str(ready), "15", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not ready.exists():
        assert watcher.poll() is None, watcher.communicate()
        time.sleep(0.02)
    metadata.aws_action = {"action": "stop", "time": in_two_minutes()}
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 0 and "signals 1" in out, err
    assert fake_scontrol.read_text().splitlines() == ["requeue 42"], "requeued once, after the checkpoint"
    assert err.index("sent SIGUSR1") < err.index("requeueing Slurm job 42")


def test_without_a_notice_the_job_is_never_requeued(tmp_path, metadata, fake_scontrol, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    done = subprocess.run([sys.executable, str(WATCHER), "--cloud", "aws", "--metadata-url", metadata.url,
                           "--interval", "0.2", "--requeue-job", "--", sys.executable, "-c", "print('trained')"],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and not fake_scontrol.exists()


def test_on_the_node_a_notice_drains_it_with_the_notice_as_the_reason(tmp_path, metadata, fake_scontrol):
    watcher = subprocess.Popen([sys.executable, str(WATCHER), "--cloud", "alicloud", "--metadata-url", metadata.url,
                                "--interval", "0.2", "--drain-node", "gpu-3"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)
    assert watcher.poll() is None, "it waits for a notice"
    deadline = in_two_minutes()
    metadata.aliyun_time = deadline
    watcher.communicate(timeout=20)
    assert watcher.returncode == 0
    assert fake_scontrol.read_text().splitlines() == [
        f"update nodename=gpu-3 state=drain reason=goldenenv spot: alicloud terminate at {deadline}"]


def _gce_metadata():
    """tests/nodeboot/gce_metadata.py: the metadata server the emulated Google Cloud node boots from."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "nodeboot" / "gce_metadata.py"
    spec = importlib.util.spec_from_file_location("gce_metadata", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gce_metadata = _gce_metadata()


@pytest.fixture
def gce(tmp_path):
    """Google's metadata server for one instance (not preempted): (state folder, base URL)."""
    state = tmp_path / "gce"
    state.mkdir()
    gce_metadata.write_state(state, gce_metadata.instance_document(
        name="ml-gpu-0", instance_id=4567890123456789012, zone="us-central1-a", project="ml-project",
        project_number=123456789012, machine_type="g2-standard-8", ip="10.0.0.2", attributes={},
        service_account="nodes@ml-project.iam.gserviceaccount.com"))
    server = gce_metadata.serve(state)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_a_google_preemption_signals_the_training_and_every_poll_says_metadata_flavor_google(tmp_path, gce):
    state, url = gce
    ready = tmp_path / "ready"
    watcher = subprocess.Popen(
        [sys.executable, str(WATCHER), "--cloud", "gcp", "--metadata-url", url, "--interval", "0.2",
         "--", sys.executable, "-c", TRAINING, str(ready), "15", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not ready.exists():
        assert watcher.poll() is None, watcher.communicate()
        time.sleep(0.02)
    time.sleep(0.6)
    assert watcher.poll() is None, "FALSE is no notice"
    gce_metadata.set_preempted(state, True)
    started = time.monotonic()
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 0, err
    assert time.monotonic() - started < 3, "noticed within a few poll periods"
    assert "signals 1" in out
    assert "gcp spot notice: preempt at" in err, err
    assert "(30 s left)" in err or "(29 s left)" in err, "Google's 30-second warning"
    polls = [flavor for method, path, flavor in gce_metadata.requests_of(state)
             if path == "/computeMetadata/v1/instance/preempted"]
    assert len(polls) >= 3 and set(polls) == {"Google"}
    assert not any(path.startswith("/latest/") for _, path, _ in gce_metadata.requests_of(state)), "no token asked"


def test_google_notice_deadline_is_its_thirty_seconds_and_false_is_no_notice(gce):
    state, url = gce
    assert spotwatch.Metadata("gcp", url).notice() is None
    gce_metadata.set_preempted(state, True)
    before = datetime.now(timezone.utc)
    notice = spotwatch.Metadata("gcp", url).notice()
    assert (notice.cloud, notice.action, notice.raw) == ("gcp", "preempt", "TRUE")
    assert 28 <= notice.seconds_left(before) <= 31, "Google's 30-second warning"


def test_google_refuses_a_request_without_metadata_flavor_which_the_watcher_always_sends(gce):
    state, url = gce
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(url + spotwatch.CLOUD_FACTS["gcp"].notice_path), timeout=5)
    assert caught.value.code == 403 and caught.value.headers["Metadata-Flavor"] == "Google"
    assert spotwatch.Metadata("gcp", url).notice() is None
    assert [flavor for _, _, flavor in gce_metadata.requests_of(state)] == ["-", "Google"]


def test_on_a_google_node_a_preemption_drains_it(tmp_path, gce, fake_scontrol):
    state, url = gce
    gce_metadata.set_preempted(state, True)
    done = subprocess.run([sys.executable, str(WATCHER), "--cloud", "gcp", "--metadata-url", url, "--interval", "0.2",
                           "--drain-node", "gpu-0"], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    (line,) = fake_scontrol.read_text().splitlines()
    assert line.startswith("update nodename=gpu-0 state=drain reason=goldenenv spot: gcp preempt at ")


def _spot_clouds() -> list[str]:
    from goldenenv import clouds

    return [name for name in clouds.names() if clouds.Capability.SPOT in clouds.get(name).capabilities]


@pytest.mark.parametrize("cloud", _spot_clouds())
def test_every_cloud_that_runs_spot_nodes_has_its_notice_module_found_and_bundled(cloud, tmp_path):
    """A cloud of the registry that offers spot pools brings goldenenv/clouds/<cloud>/spot_notice.py: the watcher
    finds it by discovery, polls its endpoint with its headers, and the image's watcher (one file, run alone with the
    standard library only) offers it as --cloud."""
    assert cloud in spotwatch.notice_files(), f"goldenenv/clouds/{cloud}/spot_notice.py is missing"
    facts = spotwatch.CLOUD_FACTS[cloud]
    assert facts.default_url.startswith("http://") and facts.notice_path.startswith("/") and facts.vendor
    assert facts.machine_path is None or facts.machine_path.startswith("/")
    assert spotwatch.VENDORS[facts.vendor] == (cloud,), "each shipped cloud's DMI vendor is its own"
    alone = tmp_path / "goldenenv-spotwatch"
    alone.write_bytes(bundle.spot_watcher())
    done = subprocess.run([sys.executable, "-I", "-S", str(alone), "--help"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert cloud in done.stdout.split("--cloud {")[1].split("}")[0].split(",")


def test_a_copied_cloud_folder_with_a_notice_module_is_watched_by_its_own_name(tmp_path):
    """A renamed copy of a cloud's spot notice module, beside a copy of the watcher, is found with no other file
    changed, and its notices say its folder's name."""
    (tmp_path / "clouds" / "scratch").mkdir(parents=True)
    shutil.copy(WATCHER, tmp_path / "spotwatch.py")
    shutil.copy(spotwatch.notice_files()["gcp"], tmp_path / "clouds" / "scratch" / "spot_notice.py")
    probe = ("import runpy, sys; w = runpy.run_path(sys.argv[1]); n = w['NOTICES']['scratch']('TRUE');"
             "print(w['CLOUDS'], n.cloud, n.action)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(tmp_path / "spotwatch.py")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["('scratch',)", "scratch", "preempt"]


def _watcher_with_a_copy_of_alibaba(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A copy of the watcher beside Alibaba's notice module and a renamed copy of it (acmecloud, a cloud on
    Alibaba's machines), loaded as a module on a machine whose DMI vendor is Alibaba's."""
    for cloud in ("alicloud", "acmecloud"):
        (tmp_path / "clouds" / cloud).mkdir(parents=True)
        shutil.copy(spotwatch.notice_files()["alicloud"], tmp_path / "clouds" / cloud / "spot_notice.py")
    shutil.copy(WATCHER, tmp_path / "spotwatch.py")
    spec = importlib.util.spec_from_file_location("copied_spotwatch", tmp_path / "spotwatch.py")
    watcher = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, watcher)  # its dataclasses look their module up there
    spec.loader.exec_module(watcher)
    dmi = tmp_path / "dmi"
    dmi.mkdir()
    (dmi / "sys_vendor").write_text("Alibaba Cloud\n")
    monkeypatch.setattr(watcher, "DMI_FOLDER", dmi)
    monkeypatch.delenv("GOLDENENV_CLOUD", raising=False)
    return watcher


def test_on_a_vendor_two_clouds_share_the_watcher_asks_which_and_starts_nothing(tmp_path, monkeypatch, capsys):
    """Two clouds on the machine's DMI vendor and no --cloud: it exits 2 naming --cloud and both clouds, rather
    than polling whichever was found last."""
    watcher = _watcher_with_a_copy_of_alibaba(tmp_path, monkeypatch)
    assert watcher.VENDORS["Alibaba Cloud"] == ("acmecloud", "alicloud")
    started = tmp_path / "started"
    assert watcher.main(["--", sys.executable, "-c", f"open({str(started)!r}, 'w')"]) == 2
    said = capsys.readouterr().err
    assert "give --cloud (one of acmecloud, alicloud) or GOLDENENV_CLOUD" in said, said
    assert not started.exists()


def test_on_a_vendor_two_clouds_share_the_cloud_given_is_watched(tmp_path, monkeypatch, capsys):
    watcher = _watcher_with_a_copy_of_alibaba(tmp_path, monkeypatch)
    started = tmp_path / "started"
    assert watcher.main(["--cloud", "acmecloud", "--metadata-url", "http://127.0.0.1:9", "--interval", "0.05", "--",
                         sys.executable, "-c", f"open({str(started)!r}, 'w')"]) == 0
    assert started.exists() and "watching acmecloud spot notices" in capsys.readouterr().err


def test_on_a_vendor_of_one_cloud_the_watcher_finds_it(tmp_path, monkeypatch):
    dmi = tmp_path / "dmi"
    dmi.mkdir()
    (dmi / "sys_vendor").write_text("Google\n")
    monkeypatch.setattr(spotwatch, "DMI_FOLDER", dmi)
    assert spotwatch.detect_clouds() == ("gcp",)
    monkeypatch.setattr(spotwatch, "DMI_FOLDER", tmp_path / "no-dmi")
    assert spotwatch.detect_clouds() == ()


def test_a_cloud_without_spot_pools_has_no_notice_to_watch():
    from goldenenv import clouds

    assert set(spotwatch.CLOUDS) == set(_spot_clouds()), "a notice module for a cloud without spot pools, or none " \
        "for one with them"
    assert "local" in clouds.names() and "local" not in spotwatch.CLOUDS


def test_the_cloud_facts_keep_aws_alibaba_and_google_as_they_were_and_add_azure():
    facts = spotwatch.CLOUD_FACTS
    assert (facts["aws"].notice_path, facts["alicloud"].notice_path) == (
        "/latest/meta-data/spot/instance-action", "/latest/meta-data/instance/spot/termination-time")
    assert facts["gcp"].headers == {"Metadata-Flavor": "Google"} and facts["gcp"].token_headers is None
    assert facts["gcp"].default_url == "http://metadata.google.internal"
    assert all(facts[c].machine_path is None for c in ("aws", "alicloud", "gcp")), "their notices are the machine's"
    # Azure's Scheduled Events at the version its docs call current, with the header IMDS wants, no token
    assert facts["azure"].notice_path == "/metadata/scheduledevents?api-version=2020-07-01"
    assert facts["azure"].headers == {"Metadata": "true"} and facts["azure"].token_headers is None
    assert facts["azure"].machine_path == "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
    # the four clouds' vendors as they were; a cloud added later brings its own (its spot_notice.py), kept beside them
    assert spotwatch.VENDORS.items() >= {"Amazon EC2": ("aws",), "Alibaba Cloud": ("alicloud",), "Google": ("gcp",),
                                         "Microsoft Corporation": ("azure",)}.items()


METADATA_ADDRESSES = {"aws": "http://169.254.169.254", "alicloud": "http://100.100.100.200",
                      "gcp": "http://metadata.google.internal", "azure": "http://169.254.169.254",
                      "tencent": "http://metadata.tencentyun.com"}
"""Each cloud's metadata address as its metadata docs give it (literal anchors: a new cloud adds its row;
Tencent's: https://www.tencentcloud.com/document/product/213/4934)."""


def test_each_cloud_is_watched_at_its_own_metadata_address():
    """Literal anchors from the clouds' metadata docs: EC2's link-local IMDS, ECS's 100.100.100.200 (an Alibaba node
    watching 169.254.169.254 never saw its notice), Compute Engine's metadata.google.internal, Azure's IMDS at the
    same link-local address as EC2's."""
    from goldenenv import spotwatch

    watched = {c: f.default_url for c, f in spotwatch.CLOUD_FACTS.items()}
    assert watched.items() >= METADATA_ADDRESSES.items()
    assert set(watched) <= set(METADATA_ADDRESSES), f"add the cloud's documented address to METADATA_ADDRESSES: {watched}"


def _nodeboot_module(name: str):
    """A module of tests/nodeboot (the emulated hosts' cloud endpoints), loaded by path."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "nodeboot" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


azure_imds = _nodeboot_module("azure_imds")
AZURE_VM = "ml-gpu_3"
"""A Uniform scale set's VM name, as IMDS's compute/name gives it: <scale set>_<instance id>."""


@pytest.fixture
def azure(tmp_path):
    """Azure's IMDS for one VM of a scale set, no event scheduled: (state folder, base URL)."""
    state = tmp_path / "azure"
    state.mkdir()
    azure_imds.write_state(state, azure_imds.instance_document(
        name=AZURE_VM, vm_id="2ec8ee77-1a34-4c64-b8d4-4b3a8d4c9f10", location="eastus", zone="1",
        vm_size="Standard_ND96isr_H100_v5", computer_name="ml-gpu000003", admin_username="azureuser",
        public_keys=[], subscription_id="00000000-0000-0000-0000-000000000000", resource_group="rg-ml",
        resource_id="/subscriptions/0/resourceGroups/rg-ml/providers/Microsoft.Compute/virtualMachineScaleSets/ml-gpu"
                    "/virtualMachines/3", image={}, priority="Spot", eviction_policy="Deallocate", tags={},
        address="10.0.0.7", prefix=24, mac="00:0d:3a:00:00:07", scale_set="ml-gpu"), identities={},
        tenant_id="11111111-1111-1111-1111-111111111111")
    server = azure_imds.serve(state)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_an_azure_preemption_of_this_vm_signals_the_training_and_every_poll_says_metadata_true(tmp_path, azure):
    state, url = azure
    ready = tmp_path / "ready"
    watcher = subprocess.Popen(
        [sys.executable, str(WATCHER), "--cloud", "azure", "--metadata-url", url, "--interval", "0.2",
         "--", sys.executable, "-c", TRAINING, str(ready), "15", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not ready.exists():
        assert watcher.poll() is None, watcher.communicate()
        time.sleep(0.02)
    # the placement group's other VMs' events, and maintenance that keeps this VM, are no notice
    azure_imds.schedule(state, "Preempt", ["ml-gpu_0", "ml-gpu_1"])
    azure_imds.schedule(state, "Freeze", [AZURE_VM], notice_s=900)
    azure_imds.schedule(state, "Reboot", [AZURE_VM], notice_s=900)
    time.sleep(0.8)
    assert watcher.poll() is None, "another VM's preemption and this VM's maintenance are no notice"
    azure_imds.schedule(state, "Preempt", ["ml-gpu_2", AZURE_VM])
    started = time.monotonic()
    out, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 0, err
    assert time.monotonic() - started < 3, "noticed within a few poll periods"
    assert "signals 1" in out
    assert "azure spot notice: preempt at" in err, err
    assert "(30 s left)" in err or "(29 s left)" in err, "Azure's 30-second Preempt notice, from NotBefore"
    asked = azure_imds.requests_of(state)
    polls = [h for m, p, h in asked if p == spotwatch.CLOUD_FACTS["azure"].notice_path]
    assert len(polls) >= 3 and set(polls) == {"true"}
    names = [h for m, p, h in asked if p == spotwatch.CLOUD_FACTS["azure"].machine_path]
    assert names == ["true"], "the VM's name is asked once"


def test_azure_notices_are_this_vms_preempt_or_terminate_only_with_notbefore_as_the_deadline(azure):
    state, url = azure
    metadata = spotwatch.Metadata("azure", url)
    assert metadata.notice() is None, "no event: no notice"
    for kind in ("Freeze", "Reboot", "Redeploy"):
        azure_imds.schedule(state, kind, [AZURE_VM], notice_s=600)
    azure_imds.schedule(state, "Preempt", ["ml-gpu_30"])  # a name that only begins like this VM's
    azure_imds.schedule(state, "Terminate", ["ml-gpu_0"], notice_s=300)
    assert metadata.notice() is None
    azure_imds.schedule(state, "Terminate", [AZURE_VM.upper()], notice_s=300)
    notice = spotwatch.Metadata("azure", url).notice()
    assert (notice.cloud, notice.action) == ("azure", "terminate"), "VM names compare as Azure's do, any case"
    assert 295 <= notice.seconds_left() <= 301
    assert json.loads(notice.raw)["EventType"] == "Terminate"


def test_azure_notbefore_is_rfc_1123_and_blank_once_the_event_started():
    """Recorded shapes from "Scheduled Events for Linux VMs" (its event properties and example responses)."""
    body = json.dumps({"DocumentIncarnation": 2, "Events": [{
        "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventStatus": "Scheduled", "EventType": "Preempt",
        "ResourceType": "VirtualMachine", "Resources": ["WestNO_0", "WestNO_1"],
        "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "", "EventSource": "Platform",
        "DurationInSeconds": -1}]})
    notice = spotwatch.NOTICES["azure"](body, "WestNO_1")
    assert (notice.action, notice.deadline) == ("preempt", datetime(2016, 9, 19, 18, 29, 47, tzinfo=timezone.utc))
    assert spotwatch.NOTICES["azure"](body, "WestNO_2") is None, "another VM's event"
    started = json.loads(body)
    started["Events"][0].update(EventStatus="Started", NotBefore="")
    notice = spotwatch.NOTICES["azure"](json.dumps(started), "WestNO_0")
    assert notice.action == "preempt" and notice.deadline is None, "under way already: no deadline to show"
    assert spotwatch.NOTICES["azure"](json.dumps({"DocumentIncarnation": 1, "Events": []}), "WestNO_0") is None
    with pytest.raises(spotwatch.MetadataError):
        spotwatch.NOTICES["azure"]("<html>proxy error</html>", "WestNO_0")


def test_azure_refuses_a_request_without_metadata_true_which_the_watcher_always_sends(azure):
    state, url = azure
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(url + spotwatch.CLOUD_FACTS["azure"].notice_path), timeout=5)
    assert caught.value.code == 400
    assert json.loads(caught.value.read()) == {"error": "Bad request. Required metadata header not specified"}
    assert spotwatch.Metadata("azure", url).notice() is None
    assert [h for _, _, h in azure_imds.requests_of(state)] == ["-", "true", "true"]


def test_on_an_azure_node_a_preemption_drains_it(azure, fake_scontrol):
    state, url = azure
    azure_imds.schedule(state, "Preempt", [AZURE_VM])
    done = subprocess.run([sys.executable, str(WATCHER), "--cloud", "azure", "--metadata-url", url,
                           "--interval", "0.2", "--drain-node", "gpu-3"], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    (line,) = fake_scontrol.read_text().splitlines()
    assert line.startswith("update nodename=gpu-3 state=drain reason=goldenenv spot: azure preempt at ")
