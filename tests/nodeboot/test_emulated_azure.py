"""An Azure node boots for real from its custom data: the azure-ndh100-2node stack planned offline (with the golden
image the emulated nodes pull and the team's key, as the other clouds' emulated stacks have them; its InfiniBand and
Managed Lustre off, as the emulated host has no HCA and no AMLFS to mount: test_emulated_local_nvme.py and the unit
tests hold those steps), and its scale set's first VM booted on an emulated host whose cloud-init takes it through its
own Azure datasource, as on Azure: the provisioning media's ovf-env.xml (the scale set's osProfile: computer name,
admin user, customData) and the instance document from the Instance Metadata Service at 169.254.169.254, then its
ready report to the WireServer at 168.63.129.16; no NoCloud seed (tests/nodeboot/azure_imds.py serves both addresses
from a container the host routes them to, as Azure's DHCP lease does). The host's disks are a recorded ND H100 v5's
(its 8 NVMe Direct Disks bare beside the OS and resource disks). User data's files written, its units enabled and
the steps that need no cloud API up, /scratch on the RAID0 of exactly the NVMe Direct Disks, the scale set's key
logging in as its admin user, who reaches the golden container the way `jobs` and `validate` do (sudo: the image
puts azureuser outside the docker group), a request without `Metadata: true` refused, and a preemption of this VM,
not another's, seen by the node's spot watcher.

One host, no head: the node's munge step reads the stack's munge key from its Key Vault (<vault>.vault.azure.net over
TLS: tests/nodeboot/azure_apis.py, with the plan's role assignments) with curl and its pool identity's token from
IMDS. The test does what the head's first boot does, setting the secret (1024 random bytes, base64) with the head's
identity, so the node finds the key, writes it root-only and its golden container starts past its munge wait (its
slurmd then finds no head to fetch its configuration from, and systemd starts the container again every 15 s, as a
real node does until its head is up)."""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

import azure_apis
import azure_imds
import certificates
import emulated_host
import emulated_stack
import node_logins
import stand_ins
from goldenenv import catalog, nodeboot, plan, remote, stackconfig
from goldenenv.images import bundle
from goldenenv.images.dockerfile import UID

pytestmark = pytest.mark.node_boot

STACK = "azure-ndh100-2node"
OFF = {"goldenenv:nodes": {"rdma": False}, "goldenenv:storage": {"parallelFs": {"enabled": False}}}
"""What the emulated host cannot give the stack's node: InfiniBand HCAs, a Managed Lustre file system."""
NVME_CAPTURES = emulated_stack.CAPTURES / "local_nvme"
SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
VM = "azure-native:compute:VirtualMachine"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
VAULT = "azure-native:keyvault:Vault"
HERE = Path(__file__).resolve().parent
MUNGE_SCRIPT = "munge-key-azure.sh"
MUNGE_KEY_BYTES = 1024
"""What the head's munge step sets as the secret's value, base64 (templates/node/munge-key-azure.sh.j2)."""
INSTANCE_ID = 0
"""The scale set's first VM: named <scale set>_0, its computer name <prefix>000000 (base 36, six digits)."""


class AzureNode(NamedTuple):
    booted: emulated_stack.Booted
    scale_set: object
    """The planned scale set (its model is what IMDS and the provisioning media give the VM)."""
    state: Path
    """The platform's and the vault's state folder (azure_imds, azure_apis)."""
    vm_name: str
    vm_id: str
    computer_name: str
    vault_host: str
    secret: str
    key: bytes
    """The secret's value as the head set it."""
    node_identity: dict
    """The pool's identity: client_id, object_id, resource_id."""
    head_identity: dict
    head_user_data: str
    vault_address: str
    authority: certificates.Authority
    disks: stand_ins.Disks
    """The recorded ND H100 v5's disks the host has."""
    nvme: Path
    """The machine folder standing for the NVMe Direct Disks' array."""


def platform(client, image: str, network, state: Path, name: str, servers: list) -> str:
    """azure_imds.py in a container on the node's network, holding IMDS's and the WireServer's addresses: its own
    address there (where the host routes them)."""
    servers.append(client.containers.run(
        image, entrypoint=["/bin/sh", "-c", f"ip addr add {azure_imds.IMDS_ADDRESS}/32 dev eth0 && "
                                            f"ip addr add {azure_imds.WIRESERVER_ADDRESS}/32 dev eth0 && "
                                            "exec python3 /stand-ins/azure_imds.py /state"],
        detach=True, name=name, network=network.name, cap_add=["NET_ADMIN"],
        labels={"goldenenv.test": "azure-platform"},
        volumes={str(HERE): {"bind": "/stand-ins", "mode": "ro"}, str(state): {"bind": "/state", "mode": "rw"}}))
    return _started(servers[-1], "azure platform ready", network)


def key_vault(client, image: str, network, state: Path, name: str, vault_host: str, servers: list) -> str:
    """azure_apis.py in a container on the node's network, under the vault's name: its address there."""
    servers.append(client.containers.run(
        image, entrypoint=["python3", "/stand-ins/azure_apis.py", "/state"], detach=True, name=name,
        network=network.name,
        networking_config={network.name: client.api.create_endpoint_config(aliases=[vault_host])},
        labels={"goldenenv.test": "azure-key-vault"},
        volumes={str(HERE): {"bind": "/stand-ins", "mode": "ro"}, str(state): {"bind": "/state", "mode": "rw"}}))
    return _started(servers[-1], "key vault ready", network)


def _started(server, ready: str, network) -> str:
    deadline = time.monotonic() + 30
    while ready.encode() not in server.logs():
        server.reload()
        if server.status == "exited" or time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} did not start:\n{server.logs().decode()}")
        time.sleep(0.2)
    server.reload()
    return server.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]


def identity_of(resources, resource_id: str) -> dict:
    found = next(r for r in resources if r.type == IDENTITY and r.id == resource_id)
    return {"client_id": found.outputs["clientId"], "object_id": found.outputs["principalId"],
            "resource_id": found.id}


@pytest.fixture(scope="module")
def azure_node(client, host_image, golden_ref, stack_key, cloud_apis, tmp_path_factory) -> AzureNode:
    """The stack's scale set's first VM booting from its planned custom data, its munge key's secret holding the key
    the head would have set (Key Vault on the emulated platform, reached as <vault>.vault.azure.net)."""
    config = emulated_stack.stack_config(STACK, golden_ref, stack_key["public"])
    config.update({key: {**config[key], **value} for key, value in OFF.items()})
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    resources, _ = plan.run_program(STACK, config, plan.offline_context(spec))  # the offline plan's program run
    scale_set = next(r for r in resources if r.type == SCALE_SET)
    head = next(r for r in resources if r.type == VM)
    vault = next(r for r in resources if r.type == VAULT)
    model = scale_set.props["virtualMachineProfile"]
    os_profile = model["osProfile"]
    user_data = base64.b64decode(os_profile["customData"]).decode()
    values = emulated_stack.script_values(user_data, MUNGE_SCRIPT)
    vault_host = urllib.parse.urlsplit(values["vault_url"]).hostname
    node_identity = identity_of(resources, scale_set.props["identity"]["userAssignedIdentities"][0])
    head_identity = identity_of(resources, head.props["identity"]["userAssignedIdentities"][0])
    tenant = vault.props["properties"]["tenantId"]
    scale_set_name = scale_set.props["vmScaleSetName"]
    vm_name, vm_id = f"{scale_set_name}_{INSTANCE_ID}", str(uuid.uuid4())
    computer_name = f"{os_profile['computerNamePrefix']}{INSTANCE_ID:06d}"
    linux = os_profile["linuxConfiguration"]
    keys = [{"keyData": k["keyData"], "path": k["path"]} for k in linux["ssh"]["publicKeys"]]
    it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
    name = f"ge-{STACK}-{uuid.uuid4().hex[:4]}"
    network, address = emulated_stack.stack_network(client, f"{name}-net0", str(spec.network.cidr))
    state = tmp_path_factory.mktemp("azure-platform")
    subscription = vault.id.split("/")[2]
    group = scale_set.props["resourceGroupName"]
    azure_imds.write_state(state, azure_imds.instance_document(
        name=vm_name, vm_id=vm_id, location=scale_set.props["location"],
        zone=(scale_set.props.get("zones") or [""])[0], vm_size=scale_set.props["sku"]["name"],
        computer_name=computer_name, admin_username=os_profile["adminUsername"], public_keys=keys,
        subscription_id=subscription, resource_group=group,
        resource_id=f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/"
                    f"virtualMachineScaleSets/{scale_set_name}/virtualMachines/{INSTANCE_ID}",
        image=model["storageProfile"]["imageReference"], priority=model.get("priority", "Regular"),
        eviction_policy=model.get("evictionPolicy", ""), tags=scale_set.props.get("tags") or {}, address=address,
        prefix=24, mac="00:0d:3a:" + ":".join(f"{int(b):02x}" for b in address.split(".")[1:]),
        scale_set=scale_set_name), identities={node_identity["client_id"]: node_identity}, tenant_id=tenant)
    authority = cloud_apis.authority  # the run's one CA: a second with the same name would shadow it in the bundle
    azure_apis.register(state, vault=vault.props["vaultName"], vault_id=vault.id, tenant_id=tenant,
                        assignments=azure_apis.assignments_of(resources, vault.id),
                        certificate_pem=authority.server_pem(vault_host))
    ovf = azure_imds.ovf_env(hostname=computer_name, username=os_profile["adminUsername"],
                             custom_data=os_profile["customData"],
                             disable_password=linux["disablePasswordAuthentication"], public_keys=keys,
                             provision_agent=linux.get("provisionVMAgent", True))
    servers, host = [], None
    try:
        platform_address = platform(client, host_image, network, state, f"{name}-platform", servers)
        vault_address = key_vault(client, host_image, network, state, f"{name}-vault", vault_host, servers)
        # the head's first boot: no secret yet, then its first version, 1024 random bytes (base64)
        head_token = azure_imds.issue_token(state, object_id=head_identity["object_id"],
                                            client_id=head_identity["client_id"],
                                            resource_id=head_identity["resource_id"],
                                            resource=azure_apis.RESOURCE, tenant_id=tenant)["access_token"]
        path = f"/secrets/{values['secret']}?api-version={values['api_version']}"
        status, answer = azure_apis.call(vault_address, authority.cert_pem, vault_host, "GET", path, head_token)
        assert (status, answer["error"]["code"]) == (404, "SecretNotFound"), answer
        key = os.urandom(MUNGE_KEY_BYTES)
        status, answer = azure_apis.call(vault_address, authority.cert_pem, vault_host, "PUT", path, head_token, {
            "value": base64.b64encode(key).decode(), "contentType": "application/octet-stream"})
        assert status == 200 and answer["attributes"]["enabled"], answer
        capture = emulated_stack.CAPTURES / f"nvidia_smi_{it.name}.csv"
        disks = stand_ins.Disks.recorded(NVME_CAPTURES / f"{spec.cloud}_{it.name}.txt")
        nvme = tmp_path_factory.mktemp("nvme-direct-disks")
        (nvme / "left-by-the-last-tenant").write_text("x")
        host = emulated_host.Host.create(
            client, host_image, name=name, networks=[network.name], user_data="", public_key="",
            login=os_profile["adminUsername"], key=stack_key["key"], shares=[str(nvme)], sharedfs=None,
            nvme=str(nvme), erdma=0, gpus=it.gpu_count, nvidia_smi=capture.read_text() if capture.exists() else "",
            health=emulated_stack.healthy_hardware(spec, it), disks=disks,
            extra_files=azure_imds.host_files(ovf=ovf, vm_id=vm_id, platform_address=platform_address),
            hostname=computer_name, address=address, trusted_ca=authority.cert_pem, seed=False)
        booted = emulated_stack.Booted("node", host, user_data, spec, {}, {})
        host.wait_for("cloud-init's final stage", lambda: host.sh(
            "test -e /var/lib/cloud/instance/boot-finished")[0] == 0, timeout=240)
        head_user_data = base64.b64decode(head.props["osProfile"]["customData"]).decode()
        yield AzureNode(booted, scale_set, state, vm_name, vm_id, computer_name, vault_host, values["secret"], key,
                        node_identity, head_identity, head_user_data, vault_address, authority, disks, nvme)
    finally:
        if host is not None:
            host.remove()
        for server in servers:
            server.remove(force=True)
        emulated_host.remove_network(network)


def fetch(host, path: str, metadata: bool = True) -> dict:
    """A GET of IMDS from the node, as its programs make it: {status, body, headers}."""
    return emulated_host.http_get(host, f"http://{azure_imds.IMDS_ADDRESS}{path}",
                                  {"Metadata": "true"} if metadata else {})


def test_the_node_boots_from_its_custom_data_through_cloud_inits_azure_datasource(azure_node):
    booted, scale_set = azure_node.booted, azure_node.scale_set
    host = booted.host
    result = json.loads(host.sh("cat /run/cloud-init/result.json")[1])["v1"]
    assert result["datasource"].startswith("DataSourceAzure"), result
    steps = ("write_files", "runcmd", "scripts_user", "ssh")
    assert not [e for e in result["errors"] if any(step in e for step in steps)], result["errors"]
    assert host.sh("ls /var/lib/cloud/seed/nocloud")[0] != 0, "no NoCloud seed: the Azure datasource's"
    data = json.loads(host.sh("cat /run/cloud-init/instance-data.json")[1])["v1"]
    assert (data["cloud_name"], data["platform"]) == ("azure", "azure")
    assert data["instance_id"] == azure_node.vm_id, "the VM's id, as its SMBIOS system UUID gives it"
    assert data["region"] == scale_set.props["location"]
    assert data["local_hostname"] == azure_node.computer_name

    # the instance document asked of IMDS as cloud-init does, and the ready report Azure waits for
    asked = [(path, header) for method, path, header in azure_imds.requests_of(azure_node.state) if method == "GET"]
    assert ("/metadata/instance?api-version=2021-08-01&extended=true", "true") in asked, asked
    assert azure_imds.health_reports(azure_node.state) == ["Ready"], "the VM reported ready to the WireServer once"

    # every file the custom data writes, as it wrote it; runcmd enabled every unit, the golden container's too
    written = yaml.safe_load(booted.user_data)["write_files"]
    for entry in written:
        rc, content = host.sh(f"cat {shlex.quote(entry['path'])}")
        assert rc == 0 and content == emulated_host.written(entry), entry["path"]
    enabled = host.sh("systemctl is-enabled " + " ".join(booted.units))[1].split()
    assert enabled == ["enabled"] * len(booted.units), dict(zip(booted.units, enabled))
    assert "goldenenv-container.service" in booted.units, "the plan gave the node its golden container"

    host.wait_for("scratch and the health evidence up", lambda: host.units_state(
        ["goldenenv-scratch.service", "goldenenv-health-evidence.timer"]) == {
        "goldenenv-scratch.service": "active", "goldenenv-health-evidence.timer": "active"}, timeout=120)


def test_scratch_is_the_raid0_of_exactly_the_nvme_direct_disks_not_the_os_disk(azure_node):
    booted = azure_node.booted
    host, spec, disks = booted.host, booted.spec, azure_node.disks
    scratch = spec.storage.local_nvme.mount_point
    it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
    assert len(disks.local) == it.local_nvme_count == 8, "ND H100 v5: 8 local NVMe disks"
    host.wait_for("goldenenv-scratch active", lambda: host.units_state(
        [nodeboot.SCRATCH_UNIT]).get(nodeboot.SCRATCH_UNIT) == "active", timeout=180)
    _, log = host.sh(f"journalctl -b --no-pager -u {nodeboot.SCRATCH_UNIT}")
    assert f"on the {len(disks.local)} local NVMe disks" in log and f"/dev/md0 mounted at {scratch}" in log, log
    rc, members = host.sh(f"cat {stand_ins.DISK_STATE}/members {stand_ins.DISK_STATE}/array")
    assert rc == 0 and sorted(members.split()) == sorted([*disks.local, "/dev/md0"]), \
        "/dev/md0 of exactly the NVMe Direct Disks: not the OS disk, the resource disk or the DVD drive"
    assert not (azure_node.nvme / "left-by-the-last-tenant").exists(), "a new file system: the disks start empty"
    rc, owner = host.sh(f"mountpoint -q {scratch} && stat -c %u {scratch} && touch {scratch}/probe")
    assert rc == 0 and owner.split() == [str(UID)], owner
    assert (azure_node.nvme / "probe").exists(), f"{scratch} is the array's file system, not a folder on the OS disk"


def test_the_scale_sets_key_logs_in_as_its_admin_user_and_passwords_are_off(azure_node, stack_key):
    linux = azure_node.scale_set.props["virtualMachineProfile"]["osProfile"]["linuxConfiguration"]
    admin = azure_node.scale_set.props["virtualMachineProfile"]["osProfile"]["adminUsername"]
    assert [k["keyData"] for k in linux["ssh"]["publicKeys"]] == [stack_key["public"]]
    assert linux["disablePasswordAuthentication"] is True
    host = azure_node.booted.host
    assert "Retrieved 1 keys from IMDS" in host.sh("cat /var/log/cloud-init.log")[1], "the key came from IMDS"
    done = subprocess.run(["ssh", "-F", str(stack_key["config"]), f"{admin}@{host.address}", "hostname"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == azure_node.computer_name
    rc, sshd = host.sh("sshd -T 2>/dev/null | grep -i '^passwordauthentication'")
    assert sshd.split() == ["passwordauthentication", "no"], sshd


def test_the_admin_user_reaches_the_golden_container_as_jobs_and_validate_do_and_the_engine_only_through_sudo(
        azure_node, stack_key, client, golden_ref):
    """The image puts azureuser outside the docker group (node_login: sudo): goldenenv's own ssh target and exec
    prefix reach the container as its image's user, and a plain `docker exec` as azureuser is refused by the engine
    socket's permissions."""
    admin = azure_node.scale_set.props["virtualMachineProfile"]["osProfile"]["adminUsername"]
    assert admin == "azureuser"
    image_user = client.images.get(golden_ref).attrs["Config"]["User"]
    node_logins.assert_reaches_golden_only_through_sudo(azure_node.booted, admin, remote.Ssh(str(stack_key["config"])),
                                                        golden_ref, image_user)


def test_the_node_reads_the_munge_key_the_head_wrote_and_its_golden_container_starts(azure_node, golden_ref):
    host = azure_node.booted.host
    values = emulated_stack.script_values(azure_node.booted.user_data, MUNGE_SCRIPT)
    assert values["client_id"] == azure_node.node_identity["client_id"], "the pool's own identity"
    key_file, ready = values["key_file"], values["ready"]
    host.wait_for("the munge key from Key Vault", lambda: host.sh(f"test -e {ready}")[0] == 0, timeout=180)
    assert host.units_state(["goldenenv-munge.service"]) == {"goldenenv-munge.service": "active"}

    # the secret's value, byte for byte, readable by root only
    folder = str(Path(key_file).parent)
    _, modes = host.sh(f"stat -c '%U %G %a %s' {shlex.quote(key_file)} && stat -c '%U %G %a' {shlex.quote(folder)}")
    assert modes.splitlines() == [f"root root 400 {MUNGE_KEY_BYTES}", "root root 700"], modes
    rc, encoded = host.sh(f"base64 -w0 {shlex.quote(key_file)}")
    assert rc == 0 and base64.b64decode(encoded) == azure_node.key
    admin = azure_node.scale_set.props["virtualMachineProfile"]["osProfile"]["adminUsername"]
    assert host.sh(f"cat {shlex.quote(key_file)}", user=admin)[0] != 0, "only root reads the key"
    assert host.sh(f"ls {shlex.quote(folder)}")[1].split() == ["munge.key"], "no work files left beside it"
    journal = host.sh("journalctl -b -u goldenenv-munge --no-pager")[1]
    assert f"munge key from {values['vault_url']}/secrets/{azure_node.secret} at {key_file}" in journal, journal
    assert base64.b64encode(azure_node.key).decode()[:24] not in journal, "the key is in no log"

    # the node asked with its identity's token (from IMDS, with Metadata: true), over TLS, and only read
    tokens = [h for m, p, h in azure_imds.requests_of(azure_node.state) if p.startswith("/metadata/identity/")]
    assert tokens and set(tokens) == {"true"}
    node = azure_node.node_identity["object_id"]
    calls = azure_apis.requests_of(azure_node.state)
    reads = [(caller, status) for method, path, caller, status in calls
             if (method, path) == ("GET", f"/secrets/{azure_node.secret}?api-version={values['api_version']}")]
    assert reads and reads[-1] == (node, 200), calls
    assert not [c for c in calls if c[2] == node and c[0] != "GET"], calls

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


def test_imds_and_key_vault_refuse_what_azure_refuses(azure_node):
    host, values = azure_node.booted.host, emulated_stack.script_values(azure_node.booted.user_data, MUNGE_SCRIPT)
    # IMDS: no Metadata: true, no metadata and no token
    refused = fetch(host, "/metadata/instance?api-version=2021-02-01", metadata=False)
    assert refused["status"] == 400
    assert json.loads(refused["body"]) == {"error": "Bad request. Required metadata header not specified"}
    token_path = "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fvault.azure.net"
    refused = fetch(host, f"{token_path}&client_id={azure_node.node_identity['client_id']}", metadata=False)
    assert (refused["status"], json.loads(refused["body"])["error"]) == (400, "bad_request_102")
    # the head's identity is not this VM's: no token for it
    other = fetch(host, f"{token_path}&client_id={azure_node.head_identity['client_id']}")
    assert (other["status"], json.loads(other["body"])) == (
        400, {"error": "invalid_request", "error_description": "Identity not found"})
    given = fetch(host, f"{token_path}&client_id={azure_node.node_identity['client_id']}")
    token = json.loads(given["body"])
    assert given["status"] == 200 and token["token_type"] == "Bearer" and token["resource"] == azure_apis.RESOURCE
    assert fetch(host, "/metadata/instance/compute/name?api-version=2021-02-01&format=text")["body"] == \
        azure_node.vm_name

    # Key Vault, from the node over TLS with the name checked against the run's CA: no token, no key
    url = f"{values['vault_url']}/secrets/{azure_node.secret}?api-version={values['api_version']}"
    code = "curl -sS -o /dev/null -w '%{http_code}' "
    assert host.sh(code + shlex.quote(url)) == (0, "401")
    bearer = shlex.quote(f"Authorization: Bearer {token['access_token']}")
    assert host.sh(f"{code} -H {bearer} {shlex.quote(url)}") == (0, "200")
    assert host.sh(f"{code} -H {bearer} {shlex.quote(url.replace(azure_node.secret, 'another-stacks-key'))}") == \
        (0, "404"), "only the stack's secret is there"
    rc, answer = host.sh(f"curl -sS -X PUT -H {bearer} -H 'Content-Type: application/json' "
                         f"--data '{{\"value\": \"eA==\"}}' {shlex.quote(url)}")
    assert rc == 0 and json.loads(answer)["error"]["innererror"]["code"] == "ForbiddenByRbac", \
        "a node only reads the key (Key Vault Secrets User)"


def test_a_preemption_of_this_vm_reaches_the_spot_watcher_and_another_vms_does_not(azure_node):
    host, state = azure_node.booted.host, azure_node.state
    script = bundle.spot_watcher().decode()  # the image's: the clouds' notice modules bundled in
    host.container.put_archive("/usr/local/bin", emulated_host.tar_of({"spotwatch": (script, 0o755)}))
    watcher = ("python3 /usr/local/bin/spotwatch --cloud azure --interval 0.5 --fallback-after 0.5 -- sleep 60 "
               "> /tmp/spotwatch.log 2>&1; echo $? > /tmp/spotwatch.rc")
    assert host.sh(f"nohup sh -c {shlex.quote(watcher)} >/dev/null 2>&1 &")[0] == 0
    scale_set = azure_node.scale_set.props["vmScaleSetName"]
    azure_imds.schedule(state, "Preempt", [f"{scale_set}_1"])  # the placement group's other VM
    time.sleep(2.5)
    assert host.sh("test -e /tmp/spotwatch.rc")[0] != 0, host.sh("cat /tmp/spotwatch.log")[1]
    azure_imds.schedule(state, "Preempt", [azure_node.vm_name])
    host.wait_for("the watcher to act on the preemption",
                  lambda: host.sh("test -e /tmp/spotwatch.rc")[0] == 0, timeout=30)
    log = host.sh("cat /tmp/spotwatch.log")[1]
    assert host.sh("cat /tmp/spotwatch.rc")[1].strip() == str(128 + 15), log
    assert "azure spot notice: preempt at" in log and "sent SIGTERM" in log, log
    polls = [h for m, p, h in azure_imds.requests_of(state) if p.startswith("/metadata/scheduledevents")]
    assert len(polls) >= 3 and set(polls) == {"true"}


def test_the_heads_munge_step_sets_a_key_when_the_vault_holds_none_and_only_then(azure_node):
    """The head's own script (its custom data's), run on this host given the head's identity, with its key file and
    secret moved aside so the node's stay as they are: no secret yet, so it sets one (1024 random bytes), and a
    second boot reads that one instead of setting another."""
    host, state = azure_node.booted.host, azure_node.state
    script = next(f["content"] for f in yaml.safe_load(azure_node.head_user_data)["write_files"]
                  if Path(f["path"]).name == MUNGE_SCRIPT)
    values = emulated_stack.script_values(azure_node.head_user_data, MUNGE_SCRIPT)
    assert values["client_id"] == azure_node.head_identity["client_id"], "the head's own identity"
    moved = {"key_file": "/root/head-munge/munge.key", "ready": "/run/head-munge.ready", "secret": "munge-key-head"}
    lines = [next((f"{k}={v}" for k, v in moved.items() if line.startswith(f"{k}=")), line)
             for line in script.splitlines()]
    host.container.put_archive("/root", emulated_host.tar_of({"head-munge.sh": ("\n".join(lines) + "\n", 0o700)}))
    head = azure_node.head_identity
    azure_imds.attach_identity(state, head["client_id"], {k: head[k] for k in ("object_id", "resource_id")})
    try:
        first = host.sh("/root/head-munge.sh")
        second = host.sh("/root/head-munge.sh")
    finally:
        azure_imds.attach_identity(state, head["client_id"], None)
    assert first[0] == 0 and "setting a new munge key (1024 random bytes)" in first[1], first
    assert second[0] == 0 and "setting a new munge key" not in second[1], second
    _, modes = host.sh(f"stat -c '%U %a %s' {moved['key_file']}")
    assert modes.split() == ["root", "400", str(MUNGE_KEY_BYTES)]
    calls = [(m, status) for m, path, caller, status in azure_apis.requests_of(state)
             if path.startswith(f"/secrets/{moved['secret']}?") and caller == head["object_id"]]
    assert calls == [("GET", 404), ("PUT", 200), ("GET", 200)], "set once, then read"
    token = azure_imds.issue_token(state, object_id=head["object_id"], client_id=head["client_id"],
                                   resource_id=head["resource_id"], resource=azure_apis.RESOURCE,
                                   tenant_id="-")["access_token"]
    status, secret = azure_apis.call(azure_node.vault_address, azure_node.authority.cert_pem, azure_node.vault_host,
                                     "GET", f"/secrets/{moved['secret']}?api-version={values['api_version']}", token)
    assert status == 200 and secret["contentType"] == "application/octet-stream"
    rc, encoded = host.sh(f"base64 -w0 {moved['key_file']}")
    assert base64.b64decode(secret["value"]) == base64.b64decode(encoded), "the key file is the vault's value"
    assert base64.b64encode(base64.b64decode(secret["value"])).decode()[:24] not in first[1] + second[1]
