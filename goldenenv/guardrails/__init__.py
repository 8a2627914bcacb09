"""Guardrails: rules over the resources a Pulumi program plans to create.

Rules are plain functions over plain data (``PlannedResource``: type token plus input properties in engine
form, camelCase), so the same rules serve ``goldenenv plan`` (resources recorded under Pulumi's mock runtime)
and Pulumi CLI users (the policy pack in ``policy/``, through ``from_policy_resource``). This is a low layer: it
imports nothing of goldenenv but ``goldenenv.netmath`` at import time, and does no work then.

The package is split by job, each module importing only those above it in this list:
  model      what the rules speak of: PlannedResource, Finding, Severity, Plan, the shared tags and rule ids
  plain      readers of plain engine data (booleans as strings, absent lists), shared with each cloud's facts
  facts      ProviderFacts, what each provider tells the rules, found in goldenenv/clouds/<cloud>/guardrail_facts.py
  context    Context (a Plan with every provider's facts) and Rule, whose check is given a Context
  tagging    which resources take tags, from the provider SDK
  exposure, spend, upkeep   the rules' checks, by what they guard (reach, spend, what outlasts a run)
  rules      RULES in report order, ``check_rule`` and ``evaluate``
  policy     the Pulumi policy pack's adapter
The CIDR maths (how much public space a set of sources admits) is goldenenv.netmath: spec.py judges adminCidrs
by it too. Every name callers used when this was one module is still importable from here.
"""

from __future__ import annotations

import sys
import types
from goldenenv.guardrails import facts as _facts
from goldenenv.guardrails.context import Context, Rule, _each_provider
from goldenenv.guardrails.facts import (FACTS_MODULE, BudgetWatch, Ingress, Messages, ProviderFacts, boot_text,
                                        provider_facts, register_facts)
from goldenenv.guardrails.model import (BUDGET_CHAIN_UNVERIFIED, BUDGET_NOT_PLANNED, BUDGET_STOP_CHAIN,
                                        HEAD_COMPONENT_KIND, HOLDS_NO_DATA, HOLDS_TAG, SLURMCTLD_PORT, SSH_PORT,
                                        STACK_TAG, UNTAGGED_RESOURCE, WORLD_CIDRS, Finding, Plan, PlannedResource,
                                        Severity)
from goldenenv.guardrails.plain import (_is_false, _is_true, _items, _label, _mapping, _port, _protocol, _refers_to,
                                        _sources)
from goldenenv.guardrails.exposure import PUBLIC_ACLS
from goldenenv.guardrails.policy import POLICY_CONFIG_SCHEMAS, from_policy_resource, stack_validation
from goldenenv.guardrails.rules import RULES, check_rule, evaluate
from goldenenv.guardrails.spend import _tag_problem, amount_gap, currency_gap, holds_flag, stack_value_gap
from goldenenv.guardrails.tagging import facts_of, is_taggable, tag_input
from goldenenv.netmath import (NOT_PUBLIC, PUBLIC_ALLOWANCE, WIDEST_PUBLIC_PREFIX, Network, cidr_union, describe_wide,
                               parse_network, public_addresses, public_space, wide_public_blocks)

__all__ = [
    "BUDGET_CHAIN_UNVERIFIED", "BUDGET_NOT_PLANNED", "BUDGET_STOP_CHAIN", "FACTS_MODULE", "HEAD_COMPONENT_KIND",
    "HOLDS_NO_DATA", "HOLDS_TAG", "NOT_PUBLIC", "POLICY_CONFIG_SCHEMAS", "PUBLIC_ACLS", "PUBLIC_ALLOWANCE", "RULES",
    "SLURMCTLD_PORT", "SSH_PORT", "STACK_TAG", "UNTAGGED_RESOURCE", "WIDEST_PUBLIC_PREFIX", "WORLD_CIDRS",
    "BudgetWatch", "Context", "Finding", "Ingress", "Messages", "Network", "Plan", "PlannedResource", "ProviderFacts",
    "Rule", "Severity", "amount_gap", "boot_text", "check_rule", "cidr_union", "currency_gap", "describe_wide", "evaluate",
    "facts_of", "from_policy_resource", "holds_flag", "is_taggable", "parse_network", "provider_facts",
    "public_addresses", "public_space", "register_facts", "stack_validation", "stack_value_gap", "tag_input",
    "wide_public_blocks",
    # readers shared with each cloud's guardrail_facts.py and stop_chain.py, named as they were
    "_each_provider", "_is_false", "_is_true", "_items", "_label", "_mapping", "_port", "_protocol", "_refers_to",
    "_sources", "_tag_problem",
]

def _in_facts(name: str) -> property:
    return property(lambda module: getattr(_facts, name), lambda module, value: setattr(_facts, name, value))


class _Guardrails(types.ModuleType):
    """The facts discovery's state lives in guardrails.facts: read or set here, it is read or set there, so
    ``guardrails.PROVIDERS`` is the one registry and a caller (a test) may point the discovery at another package."""

    FACTS_PACKAGE = _in_facts("FACTS_PACKAGE")
    PROVIDERS = _in_facts("PROVIDERS")
    _found = _in_facts("_found")


sys.modules[__name__].__class__ = _Guardrails
