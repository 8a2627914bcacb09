"""What each Google Cloud identity goldenenv creates needs (least privilege as data), and the judge of its grants.

Identities are the service accounts the components create (nodes, head, the stop function and the identity its
trigger runs as) and the Google-managed service agents the stack grants something to (Cloud Scheduler publishes the
TTL/idle tick, Managed Lustre's agent reads and writes the bucket). Predefined roles are read from "IAM basic and
predefined roles reference" (cloud.google.com/iam/docs/roles-permissions), permissions of custom roles from the
permissions reference (cloud.google.com/iam/docs/permissions-reference).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from goldenenv.privilege import Need, action_problem, component_chain, escalates, first, is_wildcard, referenced

ROLES_REFERENCE = "https://cloud.google.com/iam/docs/roles-permissions"
PERMISSIONS_REFERENCE = "https://cloud.google.com/iam/docs/permissions-reference"
DEFAULT_ACCOUNT = "https://cloud.google.com/compute/docs/access/service-accounts#default_service_account"

STOP_PERMISSIONS = ("compute.instances.get", "compute.instances.list", "compute.instances.stop",
                    "compute.zoneOperations.get")
"""instances.aggregatedList needs compute.instances.list; stop needs compute.instances.stop; get and
zoneOperations.get let the function (or an operator acting as it) look at a node and its stop operation
(cloud.google.com/compute/docs/reference/rest/v1/instances/stop, "IAM Permissions")."""
IDLE_PERMISSIONS = ("compute.machineTypes.get", "monitoring.timeSeries.list")
"""The idle stop reads a node's vCPU count and its CPU utilisation."""
LUSTRE_IMPORT_PERMISSIONS = ("lustre.instances.get", "lustre.instances.importData", "lustre.operations.get")
"""The head imports the bucket into Managed Lustre (cloud.google.com/managed-lustre/docs/access-control)."""

BUCKET_ROLE = "roles/storage.objectUser"
"""Read and write the bucket's objects, not its IAM or settings: datasets in, checkpoints out."""
REPOSITORY_READER = "roles/artifactregistry.reader"
"""What a host needs to pull from the stack's repository (Artifact Registry access control: Reader)."""
NODE_SECRET_ROLE = "roles/secretmanager.secretAccessor"
HEAD_SECRET_ROLES = ("roles/secretmanager.secretAccessor", "roles/secretmanager.secretVersionAdder",
                     "roles/secretmanager.viewer")
"""Secret Manager's roles (IAM roles for Secret Manager): the head lists the secret's versions (viewer), adds the
first one (secretVersionAdder) and reads it (secretAccessor); a node only reads it."""
NODE_ROLES = (BUCKET_ROLE, NODE_SECRET_ROLE, REPOSITORY_READER)
HEAD_ROLES = (BUCKET_ROLE, *HEAD_SECRET_ROLES, REPOSITORY_READER)

NEEDS: dict[str, Need] = {
    "node": Need("the GPU nodes' service account", roles=frozenset(NODE_ROLES),
                 scope="the stack's bucket, munge secret and image repository (never the project)",
                 sources=(ROLES_REFERENCE,)),
    "head": Need("the Slurm head's service account", frozenset(LUSTRE_IMPORT_PERMISSIONS), frozenset(HEAD_ROLES),
                 unscoped=frozenset(LUSTRE_IMPORT_PERMISSIONS),
                 scope="the stack's bucket, munge secret and image repository; the Lustre import at the project",
                 sources=(ROLES_REFERENCE, PERMISSIONS_REFERENCE)),
    "stop": Need("the stop function's service account", frozenset(STOP_PERMISSIONS + IDLE_PERMISSIONS),
                 unscoped=frozenset(STOP_PERMISSIONS + IDLE_PERMISSIONS),
                 scope="the project, through one custom role (Compute Engine lists and stops by label, not by IAM)",
                 sources=(PERMISSIONS_REFERENCE,)),
    "stop-trigger": Need("the stop function's trigger identity", roles=frozenset({"roles/run.invoker"}),
                         scope="the stop function's Cloud Run service", sources=(ROLES_REFERENCE,)),
    "agent:cloudscheduler": Need("Cloud Scheduler's service agent", roles=frozenset({"roles/pubsub.publisher"}),
                                 scope="the stop function's topic", sources=(ROLES_REFERENCE,)),
    "agent:lustre": Need("Managed Lustre's service agent", roles=frozenset({BUCKET_ROLE}),
                         scope="the stack's bucket", sources=(ROLES_REFERENCE,)),
}

ACCOUNT = "gcp:serviceaccount/account:Account"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
INSTANCE_TYPES = ("gcp:compute/instance:Instance", "gcp:compute/instanceTemplate:InstanceTemplate",
                  "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate")
PROJECT_GRANTS = ("gcp:projects/iAMMember:IAMMember", "gcp:projects/iAMBinding:IAMBinding",
                  "gcp:projects/iAMPolicy:IAMPolicy")
AGENT = re.compile(r"^serviceAccount:service-\d+@gcp-sa-(?P<service>[a-z0-9-]+)\.iam\.gserviceaccount\.com$")
DEFAULT_COMPUTE = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")
EVERYONE = ("allusers", "allauthenticatedusers")


def kind_of(account: Any) -> str | None:
    chain = component_chain(account.urn)
    if "goldenenv:gcp:GpuNodePool" in chain:
        return "node"
    if "goldenenv:gcp:SlurmHead" in chain:
        return "head"
    if "goldenenv:gcp:BudgetStop" in chain:
        return "stop-trigger" if account.name.endswith("-trigger-sa") else "stop"
    return None


def _accounts(ctx: Any) -> dict[str, str | None]:
    """member string -> the table's row, for every planned service account."""
    found = {}
    for account in ctx.resources:
        if account.type == ACCOUNT:
            email = account.outputs.get("email") or (
                f"{account.props.get('accountId')}@{account.props.get('project', '')}.iam.gserviceaccount.com")
            found[f"serviceAccount:{email}"] = kind_of(account)
            found[f"serviceAccount:{account.props.get('accountId')}@planned"] = kind_of(account)
    return found


def _is_grant(resource: Any) -> bool:
    kind = resource.type.rsplit(":", 1)[-1].lower()
    return kind.endswith(("iammember", "iambinding"))


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def _custom_role(role: str, ctx: Any) -> Any:
    for candidate in ctx.resources:
        if candidate.type == CUSTOM_ROLE and role.endswith(f"/roles/{candidate.props.get('roleId')}"):
            return candidate
    return None


def _member_problem(member: str, role: str, resource: Any, ctx: Any) -> str | None:
    if member.lower() in EVERYONE:
        return f"gives {role} to {member}: everyone (on the internet, or with any Google account)"
    match = AGENT.match(member)
    kind = f"agent:{match['service']}" if match else _accounts(ctx).get(member, "unplanned")
    if kind == "unplanned":
        return (f"gives {role} to {member}, an identity the stack does not create (a user, group, domain or another "
                f"account is a broader principal than the component that needs it)")
    need = NEEDS.get(kind) if kind else None
    if need is None:
        return f"gives {role} to {member}, which has no row in the least-privilege table (gcp/privilege.py NEEDS)"
    custom = _custom_role(role, ctx)
    if custom is not None:
        problems = first(p for p in (action_problem(str(a), need) for a in custom.props.get("permissions") or ()) if p)
        if problems:
            return f"gives {need.identity} {role}, holding {'; '.join(problems)}; it needs {need.describe()}"
        return None
    if role not in need.roles:
        return f"gives {need.identity} {role}, which the table does not list; it needs {need.describe()}"
    if resource.type in PROJECT_GRANTS and role not in need.unscoped:
        return (f"gives {need.identity} {role} on the whole project, a wider scope than it needs: "
                f"{need.describe()}")
    return None


def _check_custom_role(resource: Any) -> Iterator[str]:
    broad = [str(p) for p in resource.props.get("permissions") or () if is_wildcard(str(p)) or escalates(str(p))]
    if broad:
        yield (f"{_label(resource)} holds {', '.join(broad)}: a custom role never needs a wildcard or the power to "
               f"change who may do what (setIamPolicy); list the permissions its holder calls.")


def _check_host(resource: Any, ctx: Any) -> Iterator[str]:
    accounts = resource.props.get("serviceAccount")
    email = accounts.get("email") if isinstance(accounts, dict) else None
    if email is None and referenced(resource, "serviceAccount", ctx.resources, (ACCOUNT,)) is not None:
        return  # its own account's email, not known yet (a preview)
    if not email or email == "default" or DEFAULT_COMPUTE.match(str(email)):
        yield (f"{_label(resource)} runs as the default compute service account ({email or 'no email given'}), "
               f"which the project gives roles/editor by default ({DEFAULT_ACCOUNT}): give it the pool's own "
               f"service account.")


def _check_policy_data(resource: Any, ctx: Any) -> Iterator[str]:
    """A whole IAM policy (policyData: {"bindings": [{"role", "members"}]}) judged binding by binding."""
    try:
        bindings = json.loads(resource.props.get("policyData") or "{}").get("bindings") or []
    except (ValueError, AttributeError):
        bindings = []
    for binding in bindings:
        for member in binding.get("members") or ():
            problem = _member_problem(str(member), str(binding.get("role", "")), resource, ctx)
            if problem:
                yield f"{_label(resource)} {problem}."


def judge(resource: Any, ctx: Any) -> Iterator[str]:
    """grant-broader-than-needed on Google Cloud."""
    if resource.type == CUSTOM_ROLE:
        yield from _check_custom_role(resource)
        return
    if resource.type in INSTANCE_TYPES:
        yield from _check_host(resource, ctx)
        return
    if resource.type.rsplit(":", 1)[-1].lower().endswith("iampolicy"):
        yield from _check_policy_data(resource, ctx)
        return
    if not _is_grant(resource):
        return
    role = str(resource.props.get("role") or "")
    if not role:
        custom = referenced(resource, "role", ctx.resources, (CUSTOM_ROLE,))
        role = f"projects/-/roles/{custom.props.get('roleId')}" if custom is not None else ""
    members = [resource.props.get("member")] + list(resource.props.get("members") or ())
    if resource.props.get("member") is None:
        account = referenced(resource, "member", ctx.resources, (ACCOUNT,))
        if account is not None:
            members.append(f"serviceAccount:{account.props.get('accountId')}@planned")
    for member in [str(m) for m in members if m]:
        problem = _member_problem(member, role, resource, ctx)
        if problem:
            yield f"{_label(resource)} {problem}."
