"""goldenenv guardrails as a Pulumi policy pack: one stack policy per rule of goldenenv.guardrails.

Run with `pulumi preview --policy-pack policy`. Required tags come from the `untagged-resource` policy's
config, e.g. a file passed with `--policy-pack-config`:
    {"untagged-resource": {"requiredTags": {"project": "llm-pretrain", "owner": "ml-team"}},
     "budget-not-planned": {"hardStop": true}}
budget-not-planned expects a budget on every stack that rents machines: give it {"budgetNone": true} for a stack
that says `goldenenv:budget: none`, and {"hardStop": true} to require the budget's stop as well.
budget-stop-chain follows the budget to the nodes; it reads the stack's values from its own config
({"requiredTags": {...}, "hardStop": true, "monthlyLimit": 500, "currency": "USD", "ttlHours": 12}) and judges no
amount, currency or schedule it is not given (`goldenenv plan` passes them from the stack file); the advisory
budget-stop-chain-unverified says so when its own config lacks monthlyLimit or currency (give it the same values).

The engine does not pass retainOnDelete to policies, so data-store-not-retained judges only what it can see
(forceDestroy, protect, final backups) and the advisory data-store-retention-unverified names each data store
whose survival of `pulumi destroy` it cannot verify; `goldenenv plan` sees the option and checks it for real.
"""

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, PolicyPack, StackValidationPolicy

from goldenenv import guardrails

ENFORCEMENT = {
    guardrails.Severity.ERROR: EnforcementLevel.MANDATORY,
    guardrails.Severity.WARNING: EnforcementLevel.ADVISORY,
}


def _policy(rule: guardrails.Rule) -> StackValidationPolicy:
    schema = guardrails.POLICY_CONFIG_SCHEMAS.get(rule.id)
    return StackValidationPolicy(
        name=rule.id,
        description=rule.description,
        validate=guardrails.stack_validation(rule),
        enforcement_level=ENFORCEMENT[rule.severity],
        config_schema=PolicyConfigSchema(properties=dict(schema)) if schema else None,
    )


PolicyPack(name="goldenenv-guardrails", policies=[_policy(rule) for rule in guardrails.RULES])
