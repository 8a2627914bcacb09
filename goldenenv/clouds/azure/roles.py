"""Azure RBAC: built-in roles by name, and one way to grant a role to a managed identity on one scope.

Built-in role definition ids are the same in every subscription ("Azure built-in roles", learn.microsoft.com:
role-based-access-control/built-in-roles); each id below was read there or in its generated listing (azure/oav
azureBuiltInRoles.ts, `az role definition list`). A role assignment's name must be a GUID; goldenenv derives it from
the assignment's resource name (uuid5), so the same plan names it the same way and Azure refuses a duplicate rather
than adding a second one.
"""

from __future__ import annotations

import uuid

import pulumi
import pulumi_azure_native as azure

BUILT_IN = {
    "AcrPull": "7f951dda-4ed3-4680-a7ca-43fe172d538d",
    "Key Vault Secrets User": "4633458b-17de-408a-b874-0445c86b69e6",
    "Key Vault Secrets Officer": "b86a8fe4-44ce-4948-aee5-eccb2c155cd7",
    "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Account Contributor": "17d1049b-9a84-46fb-8f53-869881c3d3ab",
}
"""AcrPull: pull only (Microsoft.ContainerRegistry/registries/pull/read). Key Vault Secrets User: read secret
contents; Officer: also set them (vaults with the RBAC permission model only). Storage Blob Data Contributor: read,
write and delete blobs and containers; Owner: also their ACLs (what a function app's host needs of its own storage
account). Storage Account Contributor: manage storage accounts, keys included ("Permits management of storage
accounts. Provides access to the account key"): what Managed Lustre's resource provider needs on the linked
account, with Storage Blob Data Contributor (amlfs-prerequisites.md)."""
NAMESPACE = uuid.UUID("6f1c2a3e-6d2b-4f59-9a51-2f3c8e7d0b24")
"""goldenenv's uuid5 namespace for role assignment names."""


def role_definition_id(subscription_id: pulumi.Input[str], role: str) -> pulumi.Output[str]:
    """The subscription-scoped id ARM takes for a built-in role."""
    return pulumi.Output.from_input(subscription_id).apply(
        lambda s: f"/subscriptions/{s}/providers/Microsoft.Authorization/roleDefinitions/{BUILT_IN[role]}")


def assignment_name(resource_name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, resource_name))


def grant(name: str, *, role: str, scope: pulumi.Input[str], principal_id: pulumi.Input[str],
          subscription_id: pulumi.Input[str], opts: pulumi.ResourceOptions) -> azure.authorization.RoleAssignment:
    """`role` for a managed identity (a service principal) on `scope` only: never wider than the one resource."""
    return azure.authorization.RoleAssignment(
        name, role_assignment_name=assignment_name(name), scope=scope, principal_id=principal_id,
        principal_type="ServicePrincipal", role_definition_id=role_definition_id(subscription_id, role), opts=opts)
