"""Least privilege as data: what each identity a component creates needs, and how a grant is judged against it.

Each cloud writes its table once, as ``NEEDS`` in goldenenv/clouds/<cloud>/privilege.py: identity kind -> ``Need``
(the actions or permissions it calls, the managed roles it may hold, how narrow their scope must be, the public page
each comes from). The programs read the same constants to write their grants, and the rule
``grant-broader-than-needed`` reads them to judge every planned grant: a wildcard, an action or role the table does
not list, a wider scope or a broader principal is an error naming the identity, the grant and what it needs.

Like goldenenv.guardrails this is a lowest-layer module: plain data and functions, no goldenenv import.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Need:
    """What one kind of identity needs, and nothing more."""

    identity: str
    """In words, as a message names it ("the GPU nodes' role")."""
    actions: frozenset[str] = frozenset()
    """The API actions (AWS/Alibaba), permissions (Google Cloud) or operations (Azure) it calls."""
    roles: frozenset[str] = frozenset()
    """Managed policies (AWS ARNs, Alibaba system policy names), predefined roles (Google Cloud) or built-in roles
    (Azure, by name) it may hold."""
    unscoped: frozenset[str] = frozenset()
    """Actions the provider cannot scope to a resource (Describe/List calls): they may take Resource "*"."""
    scope: str = "the stack's own resources"
    """The widest scope its grants may have, in words."""
    sources: tuple[str, ...] = ()
    """Public pages the actions and roles are read from."""

    def describe(self) -> str:
        held = sorted(self.actions) + sorted(self.roles)
        return f"{', '.join(held) or 'nothing'} on {self.scope}"


BROAD_WORDS = ("setiampolicy", "microsoft.authorization/")
"""Actions that let an identity grant itself anything: never needed by a node or a function."""


def is_wildcard(action: str) -> bool:
    """An action naming more than one operation: `*`, `ec2:*`, `iam:Create*`, `Microsoft.Compute/*`."""
    return "*" in action or "?" in action


def escalates(action: str) -> bool:
    """An action that edits who may do what (setIamPolicy, Microsoft.Authorization/*, iam:*)."""
    lowered = action.lower()
    return any(word in lowered for word in BROAD_WORDS) or lowered.startswith(("iam:", "ram:"))


def action_problem(action: str, need: Need) -> str | None:
    """Why one action in a grant is more than ``need`` allows; None when the table lists it."""
    if is_wildcard(action):
        return f"the wildcard {action!r}"
    if action.lower() not in {a.lower() for a in need.actions}:
        return f"{action!r}, which the table does not list" + (" (it edits access itself)" if escalates(action)
                                                                else "")
    return None


def _items(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def document(value: Any) -> Mapping[str, Any]:
    """A policy document given as JSON text or a mapping; {} when it is neither."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, Mapping) else {}
    return {}


def component_chain(urn: str) -> list[str]:
    """The component types a resource is created under, outermost first, read from its URN
    (urn:pulumi:STACK::PROJECT::goldenenv:aws:GpuNodePool$aws:iam/role:Role::NAME): whose identity it is."""
    parts = urn.split("::")
    return parts[2].split("$")[:-1] if len(parts) > 2 else []


def statements(policy: Any) -> list[Mapping[str, Any]]:
    """The statements of an IAM or RAM policy document (JSON text or a mapping; one statement or a list)."""
    return [s for s in _items(document(policy).get("Statement")) if isinstance(s, Mapping)]


def statement_problems(policy: Any, need: Need) -> Iterator[str]:
    """What an identity policy (AWS IAM, Alibaba RAM: the same grammar) allows beyond ``need``: a NotAction or
    NotResource Allow (everything but a list), a wildcard or unlisted action, or Resource "*" on an action the
    provider lets one scope."""
    statements = _items(document(policy).get("Statement"))
    for statement in statements:
        if not isinstance(statement, Mapping) or str(statement.get("Effect", "")).lower() != "allow":
            continue
        if "NotAction" in statement or "NotResource" in statement:
            yield "an Allow with NotAction or NotResource (everything except a list)"
            continue
        actions = [str(a) for a in _items(statement.get("Action"))]
        for action in actions:
            problem = action_problem(action, need)
            if problem:
                yield problem
        resources = [str(r) for r in _items(statement.get("Resource"))]
        if "*" in resources:
            scoped = [a for a in actions if not is_wildcard(a) and a.lower() not in {u.lower() for u in need.unscoped}
                      and a.lower() in {n.lower() for n in need.actions}]
            for action in scoped:
                yield f"{action!r} on Resource \"*\" (the table scopes it to {need.scope})"


def first(values: Iterable[str]) -> list[str]:
    """Each message once, in order."""
    seen: dict[str, None] = {}
    for value in values:
        seen.setdefault(value, None)
    return list(seen)


def trust_problems(policy: Any) -> Iterator[str]:
    """Who a role's trust policy lets assume it beyond a cloud service (ec2, lambda, ecs, fc...): an account, a
    user, or everyone is a broader principal than the component the role exists for."""
    for statement in _items(document(policy).get("Statement")):
        if not isinstance(statement, Mapping) or str(statement.get("Effect", "")).lower() != "allow":
            continue
        principal = statement.get("Principal")
        if "NotPrincipal" in statement or not isinstance(principal, Mapping) or set(principal) != {"Service"}:
            yield f"lets {json.dumps(principal if principal is not None else statement.get('NotPrincipal'))} assume it"


def referenced(resource: Any, prop: str, resources: Iterable[Any], types: tuple[str, ...]) -> Any:
    """The planned resource of one of ``types`` whose output ``prop`` was built from, by the engine's property
    dependencies (a policy-pack preview, where ids, emails and principal ids are still unknown); None if none."""
    urns = set((getattr(resource, "property_dependencies", None) or {}).get(prop, ()))
    return next((r for r in resources if r.urn in urns and r.type in types), None)
