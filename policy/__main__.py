"""goldenenv guardrails as a Pulumi policy pack: one stack policy per rule of goldenenv.guardrails.

Run with `pulumi preview --policy-pack policy`. Required tags come from the `untagged-resource` policy's
config, e.g. a file passed with `--policy-pack-config`:
    {"untagged-resource": {"requiredTags": {"project": "llm-pretrain", "owner": "ml-team"}}}
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
