"""A Google Cloud node boots for real from its metadata: the gcp-g2-dev stack planned offline (with the golden image
the emulated nodes pull and the team's key, as the other clouds' emulated stacks have them), and its GPU node
booted on an emulated host whose cloud-init reads the planned instance's metadata from Google's metadata server
(tests/nodeboot/gce_metadata.py, reached as metadata.google.internal) instead of a seed: user-data's files
written, its units enabled and the steps that need no cloud API up, /scratch a folder on the root disk (the catalog's
g2 types have no Local SSD), the key from the `ssh-keys` attribute logging in as ubuntu, who reaches the golden
container the way `jobs` and `validate` do (sudo: Google's image puts ubuntu outside the docker group), a request
without Metadata-Flavor refused, and a preemption seen by the node's spot watcher.

One host, no head: the node's munge step reads the stack's munge key from Secret Manager (secretmanager.googleapis.com
over TLS, the emulated cloud's: tests/nodeboot/gcp_apis.py) with curl and its service account's token from the
metadata server. The test does what the head's first boot does, adding the secret's first version (1024 random
bytes, with the head's service account), so the node finds the key, writes it root-only and its golden container
starts past its munge wait (its slurmd then finds no head to fetch its configuration from, and systemd starts the
container again every 15 s, as a real node does until its head is up)."""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import time
import uuid
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

import emulated_host
import emulated_stack
import gce_metadata
import gcp_apis
import node_logins
import stand_ins
from goldenenv import catalog, nodeboot, plan, remote, slurm, stackconfig
from goldenenv.images import bundle
from goldenenv.images.dockerfile import UID

pytestmark = pytest.mark.node_boot

STACK = "gcp-g2-dev"
INSTANCE = "gcp:compute/instance:Instance"
HERE = Path(__file__).resolve().parent
PROJECT_NUMBER = 123456789012
INSTANCE_ID = 4567890123456789012
MUNGE_SCRIPT = "munge-key-gcp.sh"
LOGIN = "ubuntu-sudoer"
"""The emulated host's login (emulated_host.LOGINS): ubuntu, with passwordless sudo and outside the docker group."""
MUNGE_KEY_BYTES = 1024
"""What the head's munge step adds as the secret's first version (templates/node/munge-key-gcp.sh.j2)."""


class GcpNode(NamedTuple):
    booted: emulated_stack.Booted
    instance: object
    """The planned instance (its metadata is what the metadata server serves)."""
    state: Path
    """The metadata server's state folder (gce_metadata)."""
    secret: str
    """The munge key's secret: projects/<project>/secrets/<id>."""
    key: bytes
    """The secret's first version, as the head would have added it."""
    account: str
    """The node's service account (whose token the metadata server hands out)."""



@pytest.fixture(scope="module")
def gcp_node(client, host_image, golden_ref, stack_key, cloud_apis, tmp_path_factory) -> GcpNode:
    """The stack's first GPU node booting from its planned metadata, its munge key's secret holding the key the head
    would have written (Secret Manager on the emulated cloud, reached as secretmanager.googleapis.com)."""
    config = emulated_stack.stack_config(STACK, golden_ref, stack_key["public"])
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    resources, _ = plan.run_program(STACK, config, plan.offline_context(spec))  # the offline plan's program run
    instance = next(r for r in resources
                    if r.type == INSTANCE and not r.name.endswith(f"-{slurm.HEAD_HOSTNAME}"))
    head = next(r for r in resources if r.type == INSTANCE and r.name.endswith(f"-{slurm.HEAD_HOSTNAME}"))
    user_data = instance.props["metadata"]["user-data"]
    secret = emulated_stack.script_values(user_data, MUNGE_SCRIPT)["secret"]
    account, head_account = instance.props["serviceAccount"]["email"], head.props["serviceAccount"]["email"]
    it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
    name = f"ge-{STACK}-{uuid.uuid4().hex[:4]}"
    network, address = emulated_stack.stack_network(client, f"{name}-net0", str(spec.network.cidr))
    state = tmp_path_factory.mktemp("gce-metadata")
    gce_metadata.write_state(state, gce_metadata.instance_document(
        name=instance.props["name"], instance_id=INSTANCE_ID, zone=instance.props["zone"],
        project=instance.props["project"], project_number=PROJECT_NUMBER, machine_type=instance.props["machineType"],
        ip=address, attributes=instance.props["metadata"], service_account=account))
    # the service accounts' tokens (the node's from its metadata server) and IAM on the secret, as the plan binds it
    token, head_token = gce_metadata.new_token(), gce_metadata.new_token()
    gce_metadata.set_token(state, token)
    gcp_apis.register(cloud_apis.folder, tokens={token: account, head_token: head_account}, secrets={
        secret: {"project_number": PROJECT_NUMBER,
                 "members": gcp_apis.members_of(resources, secret.rsplit("/", 1)[-1])}})
    # the head's first boot: the secret's first version, 1024 random bytes
    key = os.urandom(MUNGE_KEY_BYTES)
    status, added = gcp_apis.call(cloud_apis.address, cloud_apis.authority.cert_pem, "POST", f"/v1/{secret}:addVersion",
                                  head_token, {"payload": {"data": base64.b64encode(key).decode()}})
    assert status == 200 and added["state"] == "ENABLED", added
    server = host = None
    try:
        cloud_apis.attach(network.name, [gcp_apis.HOST])
        server = emulated_stack.gce_metadata_server(client, host_image, network, state)
        capture = emulated_stack.CAPTURES / f"nvidia_smi_{it.name}.csv"
        host = emulated_host.Host.create(
            client, host_image, name=name, networks=[network.name], user_data="", public_key="", login=LOGIN,
            key=stack_key["key"], shares=[], sharedfs=None, nvme=None, erdma=0, gpus=it.gpu_count,
            nvidia_smi=capture.read_text() if capture.exists() else "",
            health=emulated_stack.healthy_hardware(spec, it), extra_files=stand_ins.gce_files(),
            hostname=instance.props["name"], address=address, trusted_ca=cloud_apis.authority.cert_pem, seed=False)
        booted = emulated_stack.Booted("node", host, user_data, spec, {}, {})
        host.wait_for("cloud-init's final stage", lambda: host.sh(
            "test -e /var/lib/cloud/instance/boot-finished")[0] == 0, timeout=240)
        yield GcpNode(booted, instance, state, secret, key, account)
    finally:
        if host is not None:
            host.remove()
        if server is not None:
            server.remove(force=True)
        cloud_apis.detach(network.name)
        emulated_host.remove_network(network)


def fetch(host, path: str, flavor: bool = True) -> dict:
    """A GET of the metadata server from the node: {status, body, flavor (the answer's Metadata-Flavor)}."""
    got = emulated_host.http_get(host, f"http://metadata.google.internal/computeMetadata/v1/{path}",
                                 {"Metadata-Flavor": "Google"} if flavor else {})
    return {**got, "flavor": got["headers"].get("Metadata-Flavor")}


def test_the_node_boots_from_the_user_data_the_metadata_server_gives_it(gcp_node):
    booted, instance, state = gcp_node[:3]
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
        assert rc == 0 and content == emulated_host.written(entry), entry["path"]
    enabled = host.sh("systemctl is-enabled " + " ".join(booted.units))[1].split()
    assert enabled == ["enabled"] * len(booted.units), dict(zip(booted.units, enabled))
    assert "goldenenv-container.service" in booted.units, "the plan gave the node its golden container"

    host.wait_for("scratch and the health evidence up", lambda: host.units_state(
        ["goldenenv-scratch.service", "goldenenv-health-evidence.timer"]) == {
        "goldenenv-scratch.service": "active", "goldenenv-health-evidence.timer": "active"}, timeout=120)


def test_the_node_reads_the_munge_key_the_head_wrote_and_its_golden_container_starts(gcp_node, cloud_apis,
                                                                                      golden_ref):
    host = gcp_node.booted.host
    values = emulated_stack.script_values(gcp_node.booted.user_data, MUNGE_SCRIPT)
    key_file, ready = values["key_file"], values["ready"]
    host.wait_for("the munge key from Secret Manager", lambda: host.sh(f"test -e {ready}")[0] == 0, timeout=180)
    assert host.units_state(["goldenenv-munge.service"]) == {"goldenenv-munge.service": "active"}

    # the secret's version, byte for byte, readable by root only
    folder = str(Path(key_file).parent)
    _, modes = host.sh(f"stat -c '%U %G %a %s' {shlex.quote(key_file)} && stat -c '%U %G %a' {shlex.quote(folder)}")
    assert modes.splitlines() == [f"root root 400 {MUNGE_KEY_BYTES}", "root root 700"], modes
    rc, encoded = host.sh(f"base64 -w0 {shlex.quote(key_file)}")
    assert rc == 0 and base64.b64decode(encoded) == gcp_node.key
    assert host.sh(f"cat {shlex.quote(key_file)}", user="ubuntu")[0] != 0, "only root reads the key"
    assert host.sh(f"ls {shlex.quote(folder)}")[1].split() == ["munge.key"], "no work files left beside it"
    journal = host.sh("journalctl -b -u goldenenv-munge --no-pager")[1]
    assert f"munge key from {gcp_node.secret} at {key_file}" in journal
    assert base64.b64encode(gcp_node.key).decode()[:24] not in journal, "the key is in no log"

    # the node asked with its service account's token, over TLS, and only read (the head added the version)
    calls = gcp_apis.requests_of(cloud_apis.folder)
    reads = [(caller, status) for method, path, caller, status in calls
             if (method, path) == ("GET", f"/v1/{gcp_node.secret}/versions/latest:access")]
    assert reads and reads[-1] == (gcp_node.account, 200), calls
    assert not [c for c in calls if c[2] == gcp_node.account and c[0] != "GET"], calls

    # past its munge wait: the golden container starts from the locked digest and its entry point gets past munged
    # (start_munge, with the key mounted from key_file) to slurmd. No head here: slurmd cannot fetch its configuration
    # from the head's address and ends; systemd starts the container again every 15 s, as it would until the head is up
    started = f"goldenenv-container: starting container goldenenv from {golden_ref}"

    def container_journal() -> list[str]:
        return host.sh("journalctl -b -u goldenenv-container --no-pager")[1].splitlines()

    host.wait_for("the golden container started, munged up and slurmd registering", lambda: any(
        "goldenenv-slurm: slurmd" in line and "registering with" in line for line in container_journal()), timeout=180)
    lines = container_journal()
    first = next(i for i, line in enumerate(lines) if started in line)
    after = "\n".join(lines[first:])
    assert "waiting for goldenenv-munge.service" not in after, after
    assert "no munge key at" not in after and "registering with" in after, after


def test_secret_manager_refuses_a_call_without_the_service_accounts_token(gcp_node, cloud_apis):
    host, secret = gcp_node.booted.host, gcp_node.secret
    url = f"https://{gcp_apis.HOST}/v1/{secret}/versions/latest:access"
    code = "curl -sS -o /dev/null -w '%{http_code}' "
    # from the node, over TLS with the name checked against the run's CA: no token, no key
    assert host.sh(code + shlex.quote(url)) == (0, "401")
    token = json.loads(fetch(host, "instance/service-accounts/default/token")["body"])["access_token"]
    bearer = shlex.quote(f"Authorization: Bearer {token}")
    assert host.sh(f"{code} -H {bearer} {shlex.quote(url)}") == (0, "200")
    other = url.replace(secret.rsplit("/", 1)[-1], "another-stacks-munge")
    assert host.sh(f"{code} -H {bearer} {shlex.quote(other)}") == (0, "404"), "only the stack's secret is there"
    add = f"https://{gcp_apis.HOST}/v1/{secret}:addVersion"
    assert host.sh(f"{code} -X POST -H {bearer} -H 'Content-Type: application/json' "
                   f"--data '{{\"payload\": {{\"data\": \"eA==\"}}}}' {shlex.quote(add)}") == (0, "403"), \
        "a node only reads the key (secretAccessor)"
    # and the API's answer to a call without credentials, as Google gives it
    status, answer = gcp_apis.call(cloud_apis.address, cloud_apis.authority.cert_pem, "GET",
                                   f"/v1/{secret}/versions/latest:access")
    assert status == 401 and answer["error"]["status"] == "UNAUTHENTICATED" and "payload" not in answer


def test_the_key_in_the_instance_metadata_logs_in(gcp_node, stack_key):
    booted, instance = gcp_node[:2]
    attributes = instance.props["metadata"]
    assert attributes["ssh-keys"] == f"ubuntu:{stack_key['public']}" and attributes["enable-oslogin"] == "FALSE"
    host = booted.host
    done = subprocess.run(["ssh", "-F", str(stack_key["config"]), f"ubuntu@{host.address}", "hostname"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == instance.props["name"]


def test_scratch_stays_a_folder_on_the_root_disk_as_the_catalog_gives_the_type_no_local_ssd(gcp_node):
    booted = gcp_node.booted
    host, spec = booted.host, booted.spec
    scratch = spec.storage.local_nvme.mount_point
    assert catalog.instance_type(spec.cloud, spec.nodes[0].instance_type).local_nvme_count == 0, \
        "g2-standard-8: no bundled Local SSD (Google's GPU machine types page)"
    host.wait_for("goldenenv-scratch active", lambda: host.units_state(
        [nodeboot.SCRATCH_UNIT]).get(nodeboot.SCRATCH_UNIT) == "active", timeout=120)
    _, log = host.sh(f"journalctl -b --no-pager -u {nodeboot.SCRATCH_UNIT}")
    assert f"{scratch} is on the root volume" in log and "mdadm" not in log, log
    assert host.sh(f"mountpoint -q {scratch}")[0] != 0, "no file system of its own"
    rc, found = host.sh(f"findmnt -no TARGET -T {scratch} && stat -c %u {scratch}")
    assert rc == 0 and found.split() == ["/", str(UID)], found


def test_the_keys_user_reaches_the_golden_container_as_jobs_and_validate_do_and_the_engine_only_through_sudo(
        gcp_node, stack_key, client, golden_ref):
    """Google's image puts ubuntu outside the docker group (node_login: sudo): goldenenv's own ssh target and exec
    prefix reach the container as its image's user, and a plain `docker exec` as ubuntu is refused by the engine
    socket's permissions."""
    image_user = client.images.get(golden_ref).attrs["Config"]["User"]
    node_logins.assert_reaches_golden_only_through_sudo(gcp_node.booted, "ubuntu", remote.Ssh(str(stack_key["config"])),
                                                        golden_ref, image_user)


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
    booted, _, state = gcp_node[:3]
    host = booted.host
    script = bundle.spot_watcher().decode()  # the image's: the clouds' notice modules bundled in
    host.container.put_archive("/usr/local/bin", emulated_host.tar_of({"spotwatch": (script, 0o755)}))
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
