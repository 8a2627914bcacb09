"""A Google Cloud node boots for real from its metadata: the gcp-g2-dev stack planned offline (with the golden image
the emulated nodes pull and the team's key, as the other clouds' emulated stacks have them), and its GPU node
booted on an emulated host whose cloud-init reads the planned instance's metadata from Google's metadata server
(tests/nodeboot/gce_metadata.py, reached as metadata.google.internal) instead of a seed: user-data's files
written, its units enabled and the steps that need no cloud API up, the key from the `ssh-keys` attribute logging
in, a request without Metadata-Flavor refused, and a preemption seen by the node's spot watcher.

One host, no head: the node's munge step reads the key from Secret Manager (secretmanager.googleapis.com, with curl
and a token from the metadata server), which this emulated cloud does not serve yet, so its golden container stays
waiting for that step, as a real node waits for its head."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

import emulated_host
import emulated_stack
import gce_metadata
import stand_ins
from goldenenv import catalog, plan, slurm, stackconfig

pytestmark = pytest.mark.node_boot

STACK = "gcp-g2-dev"
INSTANCE = "gcp:compute/instance:Instance"
HERE = Path(__file__).resolve().parent
PROJECT_NUMBER = 123456789012
INSTANCE_ID = 4567890123456789012
SPOTWATCH = Path(__file__).resolve().parents[2] / "goldenenv" / "spotwatch.py"


def metadata_server(client, image: str, network, state: Path):
    """gce_metadata.py in a container, on the node's network under the metadata server's names."""
    server = client.containers.run(
        image, entrypoint=["/usr/bin/python3", "/stand-ins/gce_metadata.py", "/state"], detach=True,
        name=f"ge-gce-metadata-{uuid.uuid4().hex[:4]}", labels={"goldenenv.test": "gce-metadata"},
        volumes={str(HERE): {"bind": "/stand-ins", "mode": "ro"}, str(state): {"bind": "/state", "mode": "rw"}})
    network.connect(server, aliases=["metadata.google.internal", "metadata"])
    deadline = time.monotonic() + 30
    while b"metadata server ready" not in server.logs():
        server.reload()
        if server.status == "exited" or time.monotonic() > deadline:
            raise RuntimeError(f"the metadata server did not start:\n{server.logs().decode()}")
        time.sleep(0.2)
    return server


@pytest.fixture(scope="module")
def gcp_node(client, host_image, golden_ref, stack_key, tmp_path_factory):
    """The stack's first GPU node booting from its planned metadata: (booted node, planned instance, state folder)."""
    config = emulated_stack.stack_config(STACK, golden_ref, stack_key["public"])
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    resources, _ = plan.run_program(STACK, config, plan.offline_context(spec))  # the offline plan's program run
    instance = next(r for r in resources
                    if r.type == INSTANCE and not r.name.endswith(f"-{slurm.HEAD_HOSTNAME}"))
    it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
    name = f"ge-{STACK}-{uuid.uuid4().hex[:4]}"
    network, address = emulated_stack.stack_network(client, f"{name}-net0", str(spec.network.cidr))
    state = tmp_path_factory.mktemp("gce-metadata")
    gce_metadata.write_state(state, gce_metadata.instance_document(
        name=instance.props["name"], instance_id=INSTANCE_ID, zone=instance.props["zone"],
        project=instance.props["project"], project_number=PROJECT_NUMBER, machine_type=instance.props["machineType"],
        ip=address, attributes=instance.props["metadata"],
        service_account=f"ge-{STACK}@{instance.props['project']}.iam.gserviceaccount.com"))
    server = host = None
    try:
        server = metadata_server(client, host_image, network, state)
        capture = emulated_stack.CAPTURES / f"nvidia_smi_{it.name}.csv"
        host = emulated_host.Host.create(
            client, host_image, name=name, networks=[network.name], user_data="", public_key="", login="ubuntu",
            key=stack_key["key"], shares=[], sharedfs=None, nvme=None, erdma=0, gpus=it.gpu_count,
            nvidia_smi=capture.read_text() if capture.exists() else "",
            health=emulated_stack.healthy_hardware(spec, it), extra_files=stand_ins.gce_files(),
            hostname=instance.props["name"], address=address, seed=False)
        user_data = instance.props["metadata"]["user-data"]
        booted = emulated_stack.Booted("node", host, user_data, spec, {}, {})
        host.wait_for("cloud-init's final stage", lambda: host.sh(
            "test -e /var/lib/cloud/instance/boot-finished")[0] == 0, timeout=240)
        yield booted, instance, state
    finally:
        if host is not None:
            host.remove()
        if server is not None:
            server.remove(force=True)
        network.remove()


def fetch(host, path: str, flavor: bool = True) -> dict:
    """A GET of the metadata server from the node, as its programs make it: {status, body, flavor (answer's)}."""
    code = ("import json, sys, urllib.request, urllib.error\n"
            "req = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]))\n"
            "try:\n    r = urllib.request.urlopen(req, timeout=10)\n"
            "except urllib.error.HTTPError as e:\n    r = e\n"
            "print(json.dumps({'status': r.status, 'body': r.read().decode(), "
            "'flavor': r.headers.get('Metadata-Flavor')}))\n")
    url = f"http://metadata.google.internal/computeMetadata/v1/{path}"
    headers = json.dumps({"Metadata-Flavor": "Google"} if flavor else {})
    rc, out = host.sh(f"python3 -c {shlex.quote(code)} {shlex.quote(url)} {shlex.quote(headers)}")
    assert rc == 0, out
    return json.loads(out)


def test_the_node_boots_from_the_user_data_the_metadata_server_gives_it(gcp_node):
    booted, instance, state = gcp_node
    host = booted.host
    result = json.loads(host.sh("cat /run/cloud-init/result.json")[1])["v1"]
    assert result["datasource"].startswith("DataSourceGCE"), result
    steps = ("write_files", "runcmd", "scripts_user", "ssh")
    assert not [e for e in result["errors"] if any(step in e for step in steps)], result["errors"]
    assert host.sh("ls /var/lib/cloud/seed/nocloud")[0] != 0, "no seed: the user data came from the metadata server"
    data = json.loads(host.sh("cat /run/cloud-init/instance-data.json")[1])["v1"]
    assert (data["cloud_name"], data["platform"]) == ("gce", "gce")
    assert data["instance_id"] == str(INSTANCE_ID)
    assert data["availability_zone"] == instance.props["zone"]
    assert data["local_hostname"] == instance.props["name"]

    asked = gce_metadata.requests_of(state)
    crawled = [(path, flavor) for method, path, flavor in asked if method == "GET"]
    assert ("/computeMetadata/v1/instance/attributes/?recursive=True", "Google") in crawled, crawled

    # every file the planned user-data writes, as it wrote it; runcmd enabled every unit, the golden container's too
    written = yaml.safe_load(instance.props["metadata"]["user-data"])["write_files"]
    for entry in written:
        rc, content = host.sh(f"cat {shlex.quote(entry['path'])}")
        assert rc == 0 and content == entry["content"], entry["path"]
    enabled = host.sh("systemctl is-enabled " + " ".join(booted.units))[1].split()
    assert enabled == ["enabled"] * len(booted.units), dict(zip(booted.units, enabled))
    assert "goldenenv-container.service" in booted.units, "the plan gave the node its golden container"

    # the steps that need no cloud API run; the golden container waits for the munge key (Secret Manager, the head)
    host.wait_for("scratch and the health evidence up", lambda: host.units_state(
        ["goldenenv-scratch.service", "goldenenv-health-evidence.timer"]) == {
        "goldenenv-scratch.service": "active", "goldenenv-health-evidence.timer": "active"}, timeout=120)
    host.wait_for("the golden container waiting for its munge key", lambda: "waiting for goldenenv-munge.service" in
                  host.sh("journalctl -b -u goldenenv-container --no-pager")[1], timeout=120)
    assert host.golden() is None, "no golden container without the munge key its slurmd needs"


def test_the_key_in_the_instance_metadata_logs_in(gcp_node, stack_key):
    booted, instance, _ = gcp_node
    attributes = instance.props["metadata"]
    assert attributes["ssh-keys"] == f"ubuntu:{stack_key['public']}" and attributes["enable-oslogin"] == "FALSE"
    host = booted.host
    done = subprocess.run(["ssh", "-F", str(stack_key["config"]), f"ubuntu@{host.address}", "hostname"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == instance.props["name"]


def test_the_metadata_server_answers_only_requests_that_say_metadata_flavor_google(gcp_node):
    host = gcp_node[0].host
    refused = fetch(host, "instance/attributes/user-data", flavor=False)
    assert refused["status"] == 403 and "#cloud-config" not in refused["body"]
    given = fetch(host, "instance/attributes/user-data")
    assert (given["status"], given["flavor"]) == (200, "Google")
    assert given["body"] == gcp_node[1].props["metadata"]["user-data"]
    token = json.loads(fetch(host, "instance/service-accounts/default/token")["body"])
    assert token["token_type"] == "Bearer" and token["access_token"] and token["expires_in"] > 0


def test_a_preemption_reaches_the_nodes_spot_watcher_through_the_metadata_server(gcp_node):
    booted, _, state = gcp_node
    host = booted.host
    host.container.put_archive("/usr/local/bin", emulated_host.tar_of({"spotwatch": (SPOTWATCH.read_text(), 0o755)}))
    watcher = ("python3 /usr/local/bin/spotwatch --cloud gcp --interval 0.5 --fallback-after 0.5 -- sleep 60 "
               "> /tmp/spotwatch.log 2>&1; echo $? > /tmp/spotwatch.rc")
    assert host.sh(f"nohup sh -c {shlex.quote(watcher)} >/dev/null 2>&1 &")[0] == 0
    time.sleep(2)
    assert host.sh("test -e /tmp/spotwatch.rc")[0] != 0, host.sh("cat /tmp/spotwatch.log")[1]
    gce_metadata.set_preempted(state, True)
    host.wait_for("the watcher to act on the preemption",
                  lambda: host.sh("test -e /tmp/spotwatch.rc")[0] == 0, timeout=30)
    log = host.sh("cat /tmp/spotwatch.log")[1]
    assert host.sh("cat /tmp/spotwatch.rc")[1].strip() == str(128 + 15), log
    assert "gcp spot notice: preempt at" in log and "sent SIGTERM" in log, log
    polls = [f for m, p, f in gce_metadata.requests_of(state) if p == "/computeMetadata/v1/instance/preempted"]
    assert polls and set(polls) == {"Google"}
