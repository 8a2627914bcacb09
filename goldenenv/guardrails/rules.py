"""The rule set, in the order findings are reported, and the evaluation of every rule over a plan."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from goldenenv.guardrails.context import Context, Rule, _each_provider
from goldenenv.guardrails.exposure import (_check_head_public_ip, _check_imdsv1, _check_ingress_open, _check_public_ip,
                                          _check_s3_public, _check_slurmctld_open, _check_ssh_open,
                                          _check_unencrypted_storage, _check_unencrypted_topic)
from goldenenv.guardrails.model import (BUDGET_CHAIN_UNVERIFIED, BUDGET_NOT_PLANNED, BUDGET_STOP_CHAIN, HOLDS_NO_DATA,
                                        HOLDS_TAG, SLURMCTLD_PORT, UNTAGGED_RESOURCE, Finding, PlannedResource,
                                        Severity)
from goldenenv.guardrails.spend import (_check_budget_planned, _check_chain_unverified, _check_stop_chain,
                                       _check_untagged)
from goldenenv.guardrails.upkeep import (_check_bucket_services, _check_data_retained, _check_pull_granted,
                                        _check_retention_unverified, _check_teardown)


RULES: tuple[Rule, ...] = (
    Rule(UNTAGGED_RESOURCE, "Taggable resources carry the required tags, and launch templates tag what they "
         "launch, so every dollar is attributed and no forgotten cluster hides on the bill.",
         Severity.ERROR, _check_untagged),
    Rule("ssh-open-to-world", "SSH (tcp/22, or all ports) is reachable from no more than a private range and a "
         "small admin allowance: the public addresses the sources admit, in any form (short forms, any prefix, "
         "IPv4 and IPv6) and summed over the union of every rule of a group and of every group of the plan, are at "
         "most one /8 (IPv4) and one /32 (IPv6), as network.adminCidrs allows; a source that is no network counts "
         "as the whole internet.",
         Severity.ERROR, _check_ssh_open),
    Rule("ingress-open-to-world", "No security group rule allows inbound traffic from 0.0.0.0/0 or ::/0.",
         Severity.WARNING, _check_ingress_open),
    Rule("unencrypted-storage", "Disks, file systems and buckets are encrypted at rest, judged as they will be: "
         "a node's root disk from an image counts as unencrypted unless a block device mapping (AWS) or "
         "systemDiskEncrypted (Alibaba) says otherwise or the account default is planned, and a bucket needs its "
         "server-side encryption (S3, OSS).", Severity.ERROR, _check_unencrypted_storage),
    Rule("unencrypted-topic", "SNS topics (budget and interruption alerts) are encrypted with KMS.",
         Severity.WARNING, _check_unencrypted_topic),
    Rule("imdsv1-allowed", "Instances and launch templates require IMDSv2 (httpTokens \"required\"), judged on "
         "the effective options: an instance's own metadata options over its launch template's.", Severity.ERROR,
         _check_imdsv1),
    Rule("public-ip-on-gpu-node", "Nodes are not reachable from the internet by any path: no public IP on the node "
         "or its subnet (associatePublicIpAddress, mapPublicIpOnLaunch, internetMaxBandwidthOut, accessConfigs), no "
         "elastic IP or EIP association on it, no global IPv6 address (ipv6AddressCount, "
         "assignIpv6AddressOnCreation, ipv6AccessConfigs), and no serial console open to SSH (serial-port-enable).",
         Severity.ERROR, _check_public_ip),
    Rule("data-store-not-retained", "Buckets and file systems holding datasets and checkpoints survive "
         "`pulumi destroy` (retainOnDelete, no forceDestroy; a file system is linked to a retained bucket or "
         f"takes a final backup). A store is exempt only by saying what it holds instead ({HOLDS_TAG}: "
         f"{' or '.join(HOLDS_NO_DATA)}, written by the program on a function's own bucket or account, and named "
         "by `goldenenv plan`), never by being named by a function.", Severity.ERROR,
         _check_data_retained),
    Rule("data-store-retention-unverified", "Where retainOnDelete cannot be read (a policy pack: the engine does "
         "not report it), say that a data store's survival of `pulumi destroy` is unverified.", Severity.WARNING,
         _check_retention_unverified),
    Rule("s3-public-access", "No bucket (S3, OSS, Cloud Storage) is public: no policy Allow to Principal \"*\" "
         "(any form) or with NotPrincipal unless a condition keeps it in the account, no public-read, "
         "public-read-write or authenticated-read ACL (inline or separate), and a public access block with every "
         "setting on (absent counts as open); on Cloud Storage, public access prevention enforced and no IAM or "
         "ACL grant to allUsers or allAuthenticatedUsers.", Severity.ERROR, _check_s3_public),
    Rule("slurmctld-beyond-cluster", f"No security group rule opens slurmctld's port (tcp/{SLURMCTLD_PORT}) to an "
         "address range: only the cluster's own security groups reach the Slurm head.", Severity.ERROR,
         _check_slurmctld_open),
    Rule("public-ip-on-head", "The Slurm head says outright that it takes no public IP.", Severity.ERROR,
         _check_head_public_ip),
    Rule(BUDGET_NOT_PLANNED, "A stack that rents machines plans its budget, and the budget's stop (a hard stop's "
         "function and what runs it), unless the stack says `budget: none`.", Severity.ERROR,
         _check_budget_planned),
    Rule(BUDGET_STOP_CHAIN, "The stack's budget reaches its nodes: it watches this stack (its filter names the "
         "stack's tag, its amount and currency are the stack's, it alerts at 100 % of actual spend and its stop at no "
         "more), its notification reaches the stop function (an enabled topic, action group or timer, a "
         "subscription, a trigger), the function is switched on (hard stop on, not a dry run), its identity may "
         "stop this stack's nodes, and a time to live or idle stop has its schedule planned.", Severity.ERROR,
         _check_stop_chain),
    Rule(BUDGET_CHAIN_UNVERIFIED, "Where the stack's budget values cannot be read (a policy pack given no "
         "monthlyLimit or currency), say that the budget's amount and currency are unverified.", Severity.WARNING,
         _check_chain_unverified),
    Rule("pull-not-granted", "Every host whose boot pulls from a planned image repository (head and nodes) holds a "
         "pull grant for that repository on its identity.", Severity.ERROR, _check_pull_granted),
    Rule("bucket-service-not-granted", "Every managed service that reads or writes the stack's bucket (a parallel "
         "file system's import and export, a data flow) has its service identity granted on the bucket.",
         Severity.ERROR, _check_bucket_services),
    Rule("teardown-blocked", "Nothing planned stops `destroy`, or a pool's resize or roll, from completing: no "
         "private-services peering deleted without removing it from the network, no placement fixed to a number "
         "of instances that are created one at a time.", Severity.ERROR, _check_teardown),
    Rule("grant-broader-than-needed", "Every identity a component creates holds what its cloud's least-privilege "
         "table (clouds/<cloud>/privilege.py) says it needs and no more: no wildcard, no action or role the table "
         "does not list (Owner, Contributor, roles/editor, AdministratorAccess...), no wider scope, no grant to a "
         "principal the stack does not create or to everyone, no host on the default compute service account.",
         Severity.ERROR, _each_provider("privilege")),
    Rule("host-not-hardened", "Hosts boot with the integrity their type supports (Secure Boot, vTPM, integrity "
         "monitoring, Trusted Launch) and take no password login, unless a named reason says why.",
         Severity.ERROR, _each_provider("host_hardening")),
    Rule("storage-not-hardened", "Storage accepts HTTPS only with TLS 1.2 or later, and no shared key unless a named "
         "reason says why.", Severity.ERROR, _each_provider("storage_hardening")),
    Rule("lifecycle-deletes-data", "No lifecycle rule deletes every object of a data store within a day (one "
         "without a prefix or tag filter): it would empty the datasets and checkpoints the stack keeps.",
         Severity.ERROR, _each_provider("data_lifecycle")),
)


def check_rule(rule: Rule, ctx: Context) -> Iterator[Finding]:
    for resource in ctx.resources:
        for message in rule.check(resource, ctx):
            yield Finding(rule.id, rule.severity, resource.urn, message)


def evaluate(resources: Sequence[PlannedResource], required_tags: Mapping[str, str], *,
             budget_opt_out: bool = False, hard_stop: bool | None = None, monthly_limit: float | None = None,
             currency: str | None = None, ttl_hours: float | None = None,
             idle_minutes: int | None = None) -> list[Finding]:
    """Every finding of every rule, in rule order then resource order.

    With no required tags, the tagging rule asks only that taggable resources carry some tags. budget_opt_out: the
    stack says `budget: none` (no budget expected); hard_stop: the stack's budget.hardStop (None: as the planned
    budget says); monthly_limit, currency, ttl_hours, idle_minutes: what the stack asks of its budget and lifecycle,
    which budget-stop-chain holds the plan to (None: not judged). A caller that knows the stack file passes them
    all (see Context).
    """
    ctx = Context(tuple(resources), dict(required_tags), budget_opt_out=budget_opt_out, hard_stop=hard_stop,
                  monthly_limit=monthly_limit, currency=currency, ttl_hours=ttl_hours, idle_minutes=idle_minutes)
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]
