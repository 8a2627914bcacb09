"""Rule, on every cloud: every host whose boot pulls from a registry holds a pull grant for that repository.

Each shipped stack is planned as `up` plans it once the golden image is pushed (image.ref names the stack's own
repository by digest), and every host whose user data pulls from a planned repository (the head and every pool's
nodes) must be granted pull there, as its cloud reads grants from the planned resources (ProviderFacts.pull_gap:
an instance profile role on AWS, a service account's Artifact Registry role on Google Cloud, a managed identity's
AcrPull on Azure, the registry login on Alibaba's personal edition ACR). The emulated hosts' registry accepts
any caller, so only the plan can show a head that cannot pull (issue 33 item 1: Google Cloud's head had none).
"""

from __future__ import annotations

import base64
import copy
import functools

import pytest

import shipped
from goldenenv import clouds, guardrails, plan, stackconfig
from goldenenv.clouds.base import UserDataLimit
from goldenenv.guardrails import PlannedResource

STACKS = shipped.STACKS
RULE = "pull-not-granted"
DIGEST = "sha256:" + "0123456789abcdef" * 4


SHIPPED = shipped.pulumi_stacks()
PULUMI_CLOUDS = [c for c in clouds.names() if clouds.get(c).uses_pulumi]


@functools.cache
def pushed(stack: str) -> tuple[str, plan.Plan]:
    """The stack's repository, and the stack planned with its golden image pushed there (image.ref by digest)."""
    config = stackconfig.read_stack_file(plan.stack_file(stack, STACKS))
    repository = plan.plan(stack, STACKS).outputs["imageRepository"]
    image = {**(config.get("goldenenv:image") or {}), "ref": f"{repository}@{DIGEST}"}
    return repository, plan.plan_config(stack, {**config, "goldenenv:image": image})


def pulling_hosts(resources: list[PlannedResource], repository: str) -> list[PlannedResource]:
    """The planned resources whose boot (as their cloud reads it) pulls from ``repository``."""
    return [r for r in resources
            if any(repository in (f.boot_script(r) or "") for f in guardrails.provider_facts())]


@pytest.mark.parametrize("cloud", PULUMI_CLOUDS)
def test_every_cloud_ships_a_stack_the_rule_is_held_over(cloud):
    assert cloud in {c for c, _ in SHIPPED}


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_every_host_that_pulls_the_golden_image_holds_a_pull_grant(cloud, stack):
    repository, planned = pushed(stack)
    hosts = pulling_hosts(planned.resources, repository)
    parents = {h.parent_urn for h in hosts}
    components = [r for r in planned.resources if not r.custom]
    pools = [c for c in components if c.type.endswith(":GpuNodePool")]
    heads = [c for c in components if c.type.endswith(":SlurmHead")]
    assert pools and all(p.urn in parents for p in pools), "every pool's nodes boot into the golden image"
    assert all(h.urn in parents for h in heads), "the head boots into the golden image too"
    refused = [f.message for f in planned.findings if f.rule == RULE]
    assert refused == []


def pulling_bare(host: PlannedResource, limit: UserDataLimit, script: str) -> PlannedResource:
    """The host with its user data, where its cloud's program passes it (UserDataLimit.inputs) and in that form,
    replaced by a script that only pulls: no login step either."""
    path = limit.inputs.get(host.type)
    if path is None:
        return host
    props = copy.deepcopy(host.props)
    *parents, last = path.split(".")
    holder = props
    for step in parents:
        holder = holder.setdefault(step, {})
    holder[last] = base64.b64encode(script.encode()).decode() if limit.base64 else script
    return PlannedResource(host.urn, host.type, host.name, props)


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_a_host_without_its_grant_is_refused(cloud, stack):
    """Only the hosts and the repositories left, each host booting a script that only pulls: nothing grants pull,
    neither an identity's role on the repository nor a login step in the boot (Alibaba's personal edition ACR
    admits a login rather than an identity), and each host is caught."""
    repository, planned = pushed(stack)
    limit = clouds.get(cloud).user_data_limit
    bare = f"#!/bin/sh\ndocker pull {repository}@{DIGEST}\n"
    hosts = [pulling_bare(h, limit, bare) for h in pulling_hosts(planned.resources, repository)]
    assert hosts == pulling_hosts(hosts, repository), "a host that only pulls still pulls, as its cloud reads it"
    facts = guardrails.facts_of(hosts[0].type) or next(  # a dynamic resource's token names no provider package
        f for f in guardrails.provider_facts() if hosts[0].type in f.instances)
    repos = [r for r in planned.resources if r.type in facts.repositories]
    findings = guardrails.evaluate([*hosts, *repos], {}, budget_opt_out=True)
    caught = {f.urn for f in findings if f.rule == RULE}
    assert caught == {h.urn for h in hosts}


def test_google_cloud_head_is_granted_reader_on_the_stack_repository():
    """Literal anchor (Artifact Registry access control: roles/artifactregistry.reader pulls)."""
    _, planned = pushed("gcp-a3mega-2node")
    head = next(r for r in planned.resources if r.type == "gcp:compute/instance:Instance" and r.name.endswith("-head"))
    email = head.props["serviceAccount"]["email"]
    grants = [r for r in planned.of_type("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")
              if r.props["member"] == f"serviceAccount:{email}"]
    assert [g.props["role"] for g in grants] == ["roles/artifactregistry.reader"]


@pytest.mark.parametrize("form", ["plain", "base64", "gzip+base64", "write_files gz+b64", "mime"])
def test_a_pull_is_seen_in_every_form_cloud_init_takes(form):
    """A boot compressed to fit its cloud's user-data limit still pulls: the rule reads through each encoding."""
    import gzip

    script = f"docker pull registry.example/golden@{DIGEST}"
    b64 = base64.b64encode
    encoded = {
        "plain": script,
        "base64": b64(script.encode()).decode(),
        "gzip+base64": b64(gzip.compress(script.encode())).decode(),
        "write_files gz+b64": "#cloud-config\nwrite_files:\n  - path: /usr/local/sbin/golden-image.sh\n"
                              f"    encoding: gz+b64\n    content: {b64(gzip.compress(script.encode())).decode()}\n",
        "mime": "Content-Type: multipart/mixed; boundary=XX\nMIME-Version: 1.0\n\n--XX\nContent-Type: "
                f"text/x-shellscript\nContent-Transfer-Encoding: base64\n\n{b64(script.encode()).decode()}\n--XX--\n",
    }[form]
    assert f"registry.example/golden@{DIGEST}" in guardrails.boot_text(encoded)
