"""What each Azure identity goldenenv creates needs (least privilege as data), and the judge of its grants.

Identities are the managed identities the components create (nodes, head, the stop function's app and the identity
its host reads its storage with) and the one first-party service principal the stack grants something to (the HPC
Cache resource provider, for Managed Lustre's blob integration). Built-in role ids are read from "Azure built-in
roles" (learn.microsoft.com/azure/role-based-access-control/built-in-roles), operations from "Azure resource
provider operations" (learn.microsoft.com/azure/role-based-access-control/resource-provider-operations).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.privilege import Need, action_problem, component_chain, escalates, first, is_wildcard, referenced

BUILT_IN_ROLES = "https://learn.microsoft.com/azure/role-based-access-control/built-in-roles"
OPERATIONS = "https://learn.microsoft.com/azure/role-based-access-control/resource-provider-operations"
AMLFS_PREREQUISITES = "https://learn.microsoft.com/azure/azure-managed-lustre/amlfs-prerequisites"

ROLE_IDS = {
    "AcrPull": "7f951dda-4ed3-4680-a7ca-43fe172d538d",
    "Key Vault Secrets User": "4633458b-17de-408a-b874-0445c86b69e6",
    "Key Vault Secrets Officer": "b86a8fe4-44ce-4948-aee5-eccb2c155cd7",
    "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Account Contributor": "17d1049b-9a84-46fb-8f53-869881c3d3ab",
    "Owner": "8e3af657-a8ff-443c-a75c-2fe8c4bcb635",
    "Contributor": "b24988ac-6180-42a0-ab88-20f7382dd24c",
    "User Access Administrator": "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9",
    "Reader": "acdd72a7-3385-48ef-bd42-f606fba81ae7",
}
"""Built-in role name -> its id, the same in every subscription (BUILT_IN_ROLES)."""
ROLE_NAMES = {role_id: name for name, role_id in ROLE_IDS.items()}

COMPUTE_ACTIONS = (
    "Microsoft.Compute/virtualMachineScaleSets/read",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/instanceView/read",
    "Microsoft.Compute/virtualMachineScaleSets/deallocate/action",
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/instanceView/read",
    "Microsoft.Compute/virtualMachines/deallocate/action",
)
"""List the group's scale sets and their instances (with instance views: power state, last provisioning time),
list its VMs and read the head's instance view, deallocate (OPERATIONS, Microsoft.Compute). Never powerOff, start,
write or delete."""
IDLE_ACTIONS = ("Microsoft.Insights/metrics/read",)
"""The idle stop reads the scale sets' Percentage CPU."""
BUDGET_ACTIONS = ("Microsoft.Consumption/budgets/read",)
"""The hard stop reads the budget's current spend ("List the budgets by a subscription or a management group");
budgets live at the subscription, the only action granted there."""

SUBSCRIPTION, GROUP, RESOURCE = 0, 1, 2
"""How narrow a role assignment's scope is: the subscription, a resource group, or one resource under it."""
LEVEL_WORDS = {SUBSCRIPTION: "the whole subscription", GROUP: "a resource group", RESOURCE: "one resource"}

NEEDS: dict[str, Need] = {
    "node": Need("the GPU nodes' managed identity",
                 roles=frozenset({"AcrPull", "Key Vault Secrets User", "Storage Blob Data Contributor"}),
                 scope="the stack's registry, key vault and data container (one resource each)",
                 sources=(BUILT_IN_ROLES,)),
    "head": Need("the Slurm head's managed identity",
                 roles=frozenset({"AcrPull", "Key Vault Secrets Officer", "Storage Blob Data Contributor"}),
                 scope="the stack's registry, key vault and data container (one resource each)",
                 sources=(BUILT_IN_ROLES,)),
    "stop": Need("the stop function's identity", frozenset(COMPUTE_ACTIONS + IDLE_ACTIONS + BUDGET_ACTIONS),
                 unscoped=frozenset(BUDGET_ACTIONS),
                 scope="the stack's compute resource group (budgets read at the subscription)",
                 sources=(OPERATIONS,)),
    "stop-storage": Need("the stop function's storage identity", roles=frozenset({"Storage Blob Data Owner"}),
                         scope="the function app's own storage account", sources=(BUILT_IN_ROLES,)),
    "agent:hpc-cache": Need("the HPC Cache resource provider (Managed Lustre's blob integration)",
                            roles=frozenset({"Storage Account Contributor", "Storage Blob Data Contributor"}),
                            scope="the stack's data storage account", sources=(AMLFS_PREREQUISITES,)),
}
GROUP_KINDS = frozenset({"stop"})
"""Identities whose custom role is assigned at the compute resource group; every built-in role goes to one resource."""

IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
FUNCTION_APP = "azure-native:web:WebApp"
ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
ASSIGNMENT = "azure-native:authorization:RoleAssignment"


def _kind(resource: Any) -> str | None:
    """The table's row of a planned identity (a user-assigned identity, or the stop function's app)."""
    chain = component_chain(resource.urn)
    if resource.type == IDENTITY:
        return ("stop-storage" if "goldenenv:azure:BudgetStop" in chain
                else "head" if resource.name.endswith("-head-identity") else "node")
    if resource.type == FUNCTION_APP and "goldenenv:azure:BudgetStop" in chain:
        return "stop"
    return None


def _principals(ctx: Any) -> dict[str, str]:
    """principal id -> the table's row, for every identity the plan creates (ids known: `goldenenv plan`)."""
    found: dict[str, str] = {}
    for resource in ctx.resources:
        kind = _kind(resource)
        identity = resource.outputs.get("identity") if resource.type == FUNCTION_APP else resource.outputs
        if kind and isinstance(identity, dict) and identity.get("principalId"):
            found[str(identity["principalId"])] = kind
    return found


def level(scope: str) -> int:
    parts = [p for p in str(scope).lower().split("/") if p]
    if "providers" in parts:
        return RESOURCE
    return GROUP if "resourcegroups" in parts else SUBSCRIPTION


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def _custom(role_id: str, ctx: Any) -> Any:
    return next((r for r in ctx.resources if r.type == ROLE_DEFINITION
                 and str(r.props.get("roleDefinitionId", "")).lower() == role_id), None)


def _actions(definition: Any) -> list[str]:
    return [str(a) for p in definition.props.get("permissions") or () if isinstance(p, dict)
            for key in ("actions", "dataActions") for a in p.get(key) or ()]


def _check_definition(resource: Any) -> Iterator[str]:
    broad = [a for a in _actions(resource) if is_wildcard(a) or escalates(a)]
    if broad:
        yield (f"{_label(resource)} allows {', '.join(broad)}: a custom role never needs a wildcard or "
               f"Microsoft.Authorization (the power to grant itself anything); list the operations its holder calls.")


def _assignment_problem(resource: Any, ctx: Any) -> str | None:
    role_id = str(resource.props.get("roleDefinitionId") or "").rsplit("/", 1)[-1].lower()
    if not role_id:
        definition = referenced(resource, "roleDefinitionId", ctx.resources, (ROLE_DEFINITION,))
        role_id = str(definition.props.get("roleDefinitionId", "")).lower() if definition is not None else ""
    name = ROLE_NAMES.get(role_id, role_id)
    principal = str(resource.props.get("principalId") or "")
    kind = _principals(ctx).get(principal) if principal else None
    if not principal:
        source = referenced(resource, "principalId", ctx.resources, (IDENTITY, FUNCTION_APP))
        kind = _kind(source) if source is not None else None
        if kind is None and "-lustre-rp-" not in resource.name:
            return None  # a principal not known yet (a preview) and named by no planned identity
    if kind is None and "goldenenv:azure:DataStore" in component_chain(resource.urn) and "-lustre-rp-" in resource.name:
        kind = "agent:hpc-cache"
    if kind is None:
        return (f"gives {name} to principal {principal}, an identity the stack does not create (a user, group or "
                f"another application is a broader principal than the component that needs it)")
    need = NEEDS[kind]
    scope = str(resource.props.get("scope", ""))
    custom = _custom(role_id, ctx)
    if custom is not None:
        actions = _actions(custom)
        problems = first(p for p in (action_problem(a, need) for a in actions) if p)
        if problems:
            return f"gives {need.identity} a role allowing {'; '.join(problems)}; it needs {need.describe()}"
        widest = SUBSCRIPTION if all(a in need.unscoped for a in actions) else GROUP
    else:
        if name not in need.roles:
            return f"gives {need.identity} {name}, which the table does not list; it needs {need.describe()}"
        widest = RESOURCE
    if level(scope) < widest:
        return (f"gives {need.identity} {name} on {LEVEL_WORDS[level(scope)]} ({scope}), a wider scope than it "
                f"needs: {need.describe()}")
    return None


def judge(resource: Any, ctx: Any) -> Iterator[str]:
    """grant-broader-than-needed on Azure."""
    if resource.type == ROLE_DEFINITION:
        yield from _check_definition(resource)
    elif resource.type == ASSIGNMENT:
        problem = _assignment_problem(resource, ctx)
        if problem:
            yield f"{_label(resource)} {problem}."
