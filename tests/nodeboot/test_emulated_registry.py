"""A Google Cloud head pulls its golden image from Artifact Registry with its own identity, and only with the grant
the plan gives it: gcp-g2-dev planned offline with the golden image under the stack's repository
(`<region>-docker.pkg.dev/<project>/<repository>/<lock>@sha256:...`, the plan's imageRepository), its Slurm head
booted from its planned metadata on an emulated host (the metadata server and Secret Manager stand-ins, as in
test_emulated_gcp.py), and the registry answered by tests/nodeboot/registry_stand_in.py under its real name: the
head's boot logs in as `oauth2accesstoken` with its metadata token (templates/node/registry-login-gar.sh.j2, which
logs in to `*-docker.pkg.dev` only) and pulls by digest.

One host, the cloud's IAM changed under it, in the order of the tests: first the plan's IAM on the repository
without the head's binding, so its pull gets Artifact Registry's denial in goldenenv-container's journal and no
container starts; a service account the plan binds nothing to gets the denial too; then the plan's IAM as planned
(roles/artifactregistry.reader for the head's service account), and the unit's next try pulls and starts the golden
container, slurmctld answering. The image is the golden one under a digest of this run
(emulated_stack.unseen_golden): this
machine's engine, which makes every emulated host's pulls, would serve a digest it pulled before from its own store
without asking the registry."""

from __future__ import annotations

import contextlib
import shlex
import uuid
from types import SimpleNamespace
from typing import NamedTuple

import docker
import pytest

import emulated_host
import emulated_stack
import head_accounting
import gce_metadata
import gcp_apis
import registry_stand_in
import stand_ins
from goldenenv import plan, slurm, stackconfig

pytestmark = pytest.mark.node_boot

STACK = "gcp-g2-dev"
INSTANCE = "gcp:compute/instance:Instance"
INSTANCE_ID = 4123456789012345678
PROJECT_NUMBER = 123456789012
DENIED = 'denied: Permission "artifactregistry.repositories.downloadArtifacts" denied on resource "{}"'
"""Artifact Registry's answer to a pull without the permission, as docker prints it (the GKE module's issue #1779
and Google's troubleshooting page quote it)."""


class GarHead(NamedTuple):
    host: emulated_host.Host
    ref: str
    """What the head pulls: the plan's repository URL @ the golden image's digest."""
    account: str
    """The head's service account (whose token its metadata server hands out)."""
    repository: str
    """projects/<project>/locations/<region>/repositories/<id>"""
    planned: dict
    """The plan's IAM on the stack's repository: email -> roles."""
    registry: registry_stand_in.RegistryStandIn
    identity: registry_stand_in.ArtifactRegistry


def planned(golden_ref: str, public_key: str):
    """The stack planned offline with the golden image's digest under the stack's own repository URL (a first
    plan gives the URL): (spec, resources, outputs, ref)."""
    config = emulated_stack.stack_config(STACK, golden_ref, public_key)
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    _, outputs = plan.run_program(STACK, config, plan.offline_context(spec))
    ref = f"{outputs['imageRepository']}@{golden_ref.split('@', 1)[1]}"
    config = emulated_stack.stack_config(STACK, ref, public_key)
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    resources, outputs = plan.run_program(STACK, config, plan.offline_context(spec))
    return spec, resources, outputs, ref


@pytest.fixture(scope="module")
def gar_head(client, host_image, golden_ref, stack_key, cloud_apis, tmp_path_factory) -> GarHead:
    golden_ref = emulated_stack.unseen_golden(client, golden_ref)
    spec, resources, outputs, ref = planned(golden_ref, stack_key["public"])
    head = next(r for r in resources if r.type == INSTANCE and r.name.endswith(f"-{slurm.HEAD_HOSTNAME}"))
    user_data = head.props["metadata"]["user-data"]
    account = head.props["serviceAccount"]["email"]
    secret = emulated_stack.script_values(user_data, "munge-key-gcp.sh")["secret"]
    members = registry_stand_in.artifact_registry_members(resources)
    assert len(members) == 1, f"one repository per stack: {sorted(members)}"
    repository, planned_members = next(iter(members.items()))
    # the head's token: Secret Manager (its munge step) and Artifact Registry both know it as the head's account
    token = gce_metadata.new_token()
    gcp_apis.register(cloud_apis.folder, tokens={token: account}, secrets={
        secret: {"project_number": PROJECT_NUMBER,
                 "members": gcp_apis.members_of(resources, secret.rsplit("/", 1)[-1])}})
    identity = registry_stand_in.ArtifactRegistry(spec.region, {token: account}, {
        repository: {email: roles for email, roles in planned_members.items() if email != account}})
    upstream, _, upstream_repo = golden_ref.split("@", 1)[0].partition("/")
    path = outputs["imageRepository"].split("/", 1)[1]
    name = f"ge-{STACK}-registry-{uuid.uuid4().hex[:4]}"
    network, address = emulated_stack.stack_network(client, f"{name}-net0", str(spec.network.cidr))
    state = tmp_path_factory.mktemp("gce-metadata")
    gce_metadata.write_state(state, gce_metadata.instance_document(
        name=head.props["name"], instance_id=INSTANCE_ID, zone=head.props["zone"], project=head.props["project"],
        project_number=PROJECT_NUMBER, machine_type=head.props["machineType"], ip=address,
        attributes=head.props["metadata"], service_account=account))
    gce_metadata.set_token(state, token)
    with contextlib.ExitStack() as stack:
        stack.callback(emulated_host.remove_network, network)
        stack.callback(lambda: [client.images.remove(tag) for tag in _pulled(client, ref)])  # once the host is gone
        registry = stack.enter_context(registry_stand_in.serve(identity, upstream, {path: upstream_repo},
                                                               cloud_apis.authority))
        cloud_apis.attach(network.name, [gcp_apis.HOST])
        stack.callback(cloud_apis.detach, network.name)
        server = emulated_stack.gce_metadata_server(client, host_image, network, state)
        stack.callback(server.remove, force=True)
        host = emulated_host.Host.create(
            client, host_image, name=name, networks=[network.name], user_data="", public_key="", login="ubuntu",
            key=stack_key["key"], shares=[], sharedfs=None, nvme=None, erdma=0, gpus=0, nvidia_smi="",
            extra_files=stand_ins.gce_files(), hostname=slurm.HEAD_HOSTNAME, address=address,
            trusted_ca=cloud_apis.authority.cert_pem, seed=False)
        stack.callback(host.remove)
        yield GarHead(host, ref, account, repository, planned_members, registry, identity)


def _pulled(client, ref: str) -> list[str]:
    """The engine's names for what the head pulled (removed at the end: the engine is this machine's)."""
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return []
    return [ref]


def container_journal(host: emulated_host.Host) -> str:
    return host.sh("journalctl -b -u goldenenv-container --no-pager")[1]


def test_the_plan_grants_the_heads_service_account_a_pull_role_on_the_stacks_repository(gar_head):
    roles = gar_head.planned.get(gar_head.account, [])
    assert any(registry_stand_in.ARTIFACT_REGISTRY_PULL in registry_stand_in.ARTIFACT_REGISTRY_ROLES.get(r, ())
               for r in roles), gar_head.planned
    assert gar_head.ref.startswith(f"{gar_head.identity.name}/{gar_head.repository.split('/')[1]}/"
                                   f"{gar_head.repository.rsplit('/', 1)[1]}/")


def test_without_the_grant_the_heads_pull_gets_artifact_registrys_denial_and_no_container(gar_head):
    host = gar_head.host
    denial = DENIED.format(gar_head.repository)
    host.wait_for("Artifact Registry's denial in goldenenv-container's journal",
                  lambda: denial in container_journal(host), timeout=240)
    assert host.golden() is None, "no golden container without the image"
    journal = container_journal(host)
    assert "Login Succeeded" in journal, "the token is the head's: the login works, the pull is refused"
    assert "starting container goldenenv" not in journal
    calls = gar_head.registry.requests
    logins = [c for c in calls if c[1].startswith("/v2/token?") and "account=oauth2accesstoken" in c[1]]
    assert logins and {c[2:] for c in logins} == {(gar_head.account, 200)}, calls
    manifests = [c for c in calls if "/manifests/" in c[1]]
    assert manifests and {c[2:] for c in manifests} == {(gar_head.account, 403)}, calls


def test_a_service_account_without_a_binding_gets_the_denial(gar_head):
    other = "ge-other@" + gar_head.account.split("@", 1)[1]
    token = gce_metadata.new_token()
    gar_head.identity.tokens[token] = other
    assert other not in gar_head.planned
    rc, out = gar_head.host.sh(
        f"export DOCKER_CONFIG=$(mktemp -d) && printf %s {token} | docker login --username oauth2accesstoken "
        f"--password-stdin {gar_head.identity.name} && docker pull {shlex.quote(gar_head.ref)} 2>&1; "
        "rc=$?; rm -rf \"$DOCKER_CONFIG\"; exit $rc")
    assert rc != 0 and DENIED.format(gar_head.repository) in out, out
    rc, out = gar_head.host.sh(
        f"export DOCKER_CONFIG=$(mktemp -d) && printf %s not-a-token | docker login --username oauth2accesstoken "
        f"--password-stdin {gar_head.identity.name} 2>&1; rc=$?; rm -rf \"$DOCKER_CONFIG\"; exit $rc")
    assert rc != 0 and "unauthorized" in out, out


def test_with_the_planned_grant_the_head_pulls_by_digest_and_its_golden_container_starts(gar_head):
    host = gar_head.host
    gar_head.identity.members[gar_head.repository] = gar_head.planned
    host.wait_for("the golden container running, slurmctld answering", lambda: host.golden() is not None and (
        "UP" in host.sh("docker exec goldenenv scontrol ping")[1]), timeout=120)
    assert f"goldenenv-container: starting container goldenenv from {gar_head.ref}" in container_journal(host)
    assert gar_head.ref in host.golden().image.attrs["RepoDigests"]
    pulled = [c for c in gar_head.registry.requests if "/manifests/" in c[1] and c[3] == 200]
    assert pulled and {c[2] for c in pulled} == {gar_head.account}, gar_head.registry.requests


def test_the_started_head_runs_slurmdbd_with_the_password_it_made_from_secret_managers_key(gar_head):
    """Google Cloud's head, once its container runs (the test above): slurmdbd on its own MariaDB, the stack's
    cluster registered, the password made from the munge key it read from the Secret Manager stand-in
    (tests/nodeboot/head_accounting.py)."""
    head = SimpleNamespace(host=gar_head.host)
    user_data = gar_head.host.sh("cat /var/lib/cloud/instance/user-data.txt")[1]
    head_accounting.shows_accounting(head, SimpleNamespace(stack=STACK), {"the head's user data": user_data})
