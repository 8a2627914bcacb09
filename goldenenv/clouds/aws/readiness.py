"""Deploy readiness (`goldenenv plan --strict`): what AWS would refuse, or do badly, that Pulumi's mocks let pass.

Under the mock runtime every name fits, every tag set is accepted and every notification list is fine; AWS
refuses them at `up`, halfway through, or a later `up` replaces a node or orphans a bucket. These rules read the
planned resources (guardrails.PlannedResource, engine form) against the limits in ``limits`` and are written like
guardrails' rules: each a Rule whose check yields one message per problem, naming what is wrong and what is valid.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.aws import limits, reaper, spot
from goldenenv.clouds.aws.guardrail_facts import (
    DATA_REPOSITORY_ASSOCIATION, INSTANCE, LAUNCH_TEMPLATE, LUSTRE_FILE_SYSTEM,
)
from goldenenv.clouds.base import VcpuAsk, user_data_rule
from goldenenv.guardrails import Context, Finding, PlannedResource, Rule, Severity, check_rule, is_taggable
from goldenenv.spec import STACK_TAG_KEY

BUDGET = "aws:budgets/budget:Budget"
BUDGET_ACTION = "aws:budgets/budgetAction:BudgetAction"
AWS_PROVIDER = "pulumi:providers:aws"
METRIC_ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
POLICY_DOCUMENTS = {
    "aws:iam/rolePolicy:RolePolicy": "policy",
    "aws:iam/policy:Policy": "policy",
    "aws:kms/keyPolicy:KeyPolicy": "policy",
    "aws:sns/topicPolicy:TopicPolicy": "policy",
    "aws:s3/bucketPolicy:BucketPolicy": "policy",
}
"""Resource types carrying an IAM policy document (JSON text), and the property that holds it."""
ALARM_ACTIONS = ("alarmActions", "okActions", "insufficientDataActions")
POOL_COMPONENT = "goldenenv:aws:GpuNodePool"
"""A node pool's component, named "<stack>-<pool>": tells which part of a long name is the pool's name."""
FSX_BACKUPS = "https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateBackup.html"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


def _label(resource: PlannedResource) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} '{resource.name}'"


def _json(value: Any) -> Any:
    """Engine inputs carry documents (policies, provider defaultTags) as JSON text; unreadable is None."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _shown(text: str, room: int = 60) -> str:
    return repr(text if len(text) <= room else text[:room] + "...")


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


# ---------------------------------------------------------------- strict:budget-notifications

def _check_budget_notifications(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != BUDGET:
        return
    notes = [_mapping(n) for n in _items(resource.props.get("notifications"))]
    limit = limits.BUDGET_NOTIFICATIONS.value
    if len(notes) > limit:
        yield (f"{_label(resource)} has {len(notes)} notifications; AWS Budgets allows {limit} per budget "
               f"({limits.BUDGET_NOTIFICATIONS.source}): keep goldenenv:budget.alertThresholds and "
               f"goldenenv:budget.forecastThresholds within {limit} together, e.g. [50, 80, 100] and [100].")
    pairs = [(_number(n.get("threshold")), n.get("notificationType")) for n in notes]
    for threshold, kind in dict.fromkeys(p for p in pairs if pairs.count(p) > 1):
        yield (f"{_label(resource)} has two notifications at {threshold} % {kind}; AWS Budgets refuses a "
               f"threshold and type twice: list each threshold once.")
    for (threshold, kind), note in zip(pairs, notes, strict=True):
        at = f"{_label(resource)} notification at {threshold} % {kind}"
        emails = _items(note.get("subscriberEmailAddresses"))
        if len(emails) > limits.EMAILS_PER_NOTIFICATION.value:
            yield (f"{at} has {len(emails)} email subscribers; AWS Budgets allows "
                   f"{limits.EMAILS_PER_NOTIFICATION.value} per notification: list at most that many emails "
                   f"(goldenenv:budget.emails) and reach more people through a mailing list.")
        topics = _items(note.get("subscriberSnsTopicArns"))
        if len(topics) > limits.SNS_TOPICS_PER_NOTIFICATION.value:
            yield (f"{at} has {len(topics)} SNS topic subscribers; AWS Budgets allows "
                   f"{limits.SNS_TOPICS_PER_NOTIFICATION.value} per notification: publish to one topic and "
                   f"subscribe the others to it.")


# ---------------------------------------------------------------- strict:budget-action-instances

def _check_budget_action_instances(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != BUDGET_ACTION:
        return
    ssm = _mapping(_mapping(resource.props.get("definition")).get("ssmActionDefinition"))
    ids = _items(ssm.get("instanceIds"))
    limit = limits.BUDGET_ACTION_INSTANCE_IDS.value
    if len(ids) > limit:
        kind = ssm.get("actionSubType") or "SSM"
        yield (f"{_label(resource)} {kind} lists {len(ids)} instance ids; a budget action takes at most {limit} "
               f"({limits.BUDGET_ACTION_INSTANCE_IDS.source}): stop the nodes with a function of the stack "
               f"instead (goldenenv:budget.hardStop), which selects them by tag.")


# ---------------------------------------------------------------- strict:tag-limits

def _provider_default_tags(ctx: Context) -> list[tuple[str, Mapping[str, Any]]]:
    """Each aws provider of the plan with the tags its defaultTags puts on every resource it creates."""
    found = []
    for provider in ctx.of_type(AWS_PROVIDER):
        tags = _mapping(_mapping(_json(provider.props.get("defaultTags"))).get("tags"))
        found.append((provider.name, tags))
    return found


def _tag_set_problems(where: str, tags: Mapping[str, Any], from_provider: str | None, defaults: int) -> Iterator[str]:
    user_keys = [k for k in tags if not str(k).lower().startswith(limits.AWS_TAG_PREFIX)]
    limit = limits.TAGS_PER_RESOURCE.value
    if len(user_keys) > limit:
        origin = (f" ({len(user_keys) - defaults} of its own and {defaults} from the defaultTags of provider "
                  f"'{from_provider}')") if from_provider and defaults else ""
        yield (f"{where} would carry {len(user_keys)} tags{origin}; AWS allows {limit} user tags per resource "
               f"({limits.TAGS_PER_RESOURCE.source}): drop tags (goldenenv:tags.extra) to {limit} or fewer.")
    for key, value in tags.items():
        key = str(key)
        if len(key) > limits.TAG_KEY_LENGTH.value:
            yield (f"{where} tag key {_shown(key)} is {len(key)} characters; AWS allows "
                   f"{limits.TAG_KEY_LENGTH.value}: shorten the key.")
        if isinstance(value, str) and len(value) > limits.TAG_VALUE_LENGTH.value:
            yield (f"{where} tag {_shown(key)} has a value of {len(value)} characters; AWS allows "
                   f"{limits.TAG_VALUE_LENGTH.value}: shorten the value.")


def _check_tag_limits(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """The resource's tags with each aws provider's defaultTags (a plan does not record which provider a resource
    uses; goldenenv stacks have one): what AWS would store, judged once per provider, each problem said once."""
    if not resource.custom or not resource.type.startswith("aws:") or not is_taggable(resource.type):
        return
    own = _mapping(resource.props.get("tags"))
    said: dict[str, None] = {}
    for provider, defaults in _provider_default_tags(ctx) or [(None, {})]:
        merged = {**defaults, **own}
        added = len(set(defaults) - set(own))
        for message in _tag_set_problems(_label(resource), merged, provider, added):
            said.setdefault(message)
    if resource.type == LAUNCH_TEMPLATE:  # what it launches gets these, without the provider's defaultTags
        for spec in (_mapping(s) for s in _items(resource.props.get("tagSpecifications"))):
            where = f"{_label(resource)} tagSpecifications '{spec.get('resourceType')}'"
            for message in _tag_set_problems(where, _mapping(spec.get("tags")), None, 0):
                said.setdefault(message)
    yield from said


# ---------------------------------------------------------------- strict:name-length

def _blame(name: str, ctx: Context) -> str:
    """Which configured text makes a derived name long: the stack name, a pool name, the project tag."""
    parts = []
    stack = ctx.required_tags.get(STACK_TAG_KEY)
    if stack and stack in name:
        parts.append(f"the stack name ({stack!r}, {len(stack)} characters)")
        pools = {c.name[len(stack) + 1:] for c in ctx.of_type(POOL_COMPONENT) if c.name.startswith(f"{stack}-")}
        parts += [f"goldenenv:nodes.name ({pool!r})" for pool in sorted(pools)
                  if pool and re.search(rf"(^|-){re.escape(pool)}(-|$)", name)]
    project = ctx.required_tags.get(reaper.PROJECT_TAG_KEY)
    if project and len(project) > 1 and project in name:
        parts.append(f"goldenenv:tags.project ({project!r})")
    return f"shorten {' or '.join(parts)}" if parts else "shorten it"


def _check_name_length(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    limit = limits.NAME_LIMITS.get(resource.type)
    if limit is None or not resource.custom:
        return
    value = resource.props.get(limit.property)
    where = (f"{_label(resource)}: AWS allows {limit.max_length} characters in a {limit.kind} {limit.what} "
             f"({limit.source})")
    if isinstance(value, str) and value:
        if resource.type in limits.S3_BUCKET_TYPES:
            return  # strict:s3-bucket-name judges explicit bucket names whole
        if len(value) > limit.max_length:
            yield f"{where}; its {limit.property} {_shown(value)} is {len(value)}: {_blame(value, ctx)}."
        elif len(value) < limit.min_length:
            yield f"{where}, at least {limit.min_length}; its {limit.property} {value!r} is {len(value)}."
        return
    if not limit.autonamed or resource.import_id or (value is not None and not isinstance(value, str)):
        return  # text that is not a name, an adopted resource's own name, or a value unknown until deployment
    prefix = resource.props.get("namePrefix")
    if isinstance(prefix, str) and prefix:
        length = len(prefix) + limits.NAME_PREFIX_SUFFIX
        if length > limit.max_length:
            yield (f"{where}; its namePrefix {_shown(prefix)} plus the provider's {limits.NAME_PREFIX_SUFFIX} "
                   f"unique characters is {length}: {_blame(prefix, ctx)}.")
        return
    length = len(resource.name) + limits.AUTONAME_SUFFIX
    if length > limit.max_length:
        yield (f"{where}; it is auto-named from its resource name {_shown(resource.name)} plus Pulumi's "
               f"{limits.AUTONAME_SUFFIX}-character suffix (-xxxxxxx), {length} characters: "
               f"{_blame(resource.name, ctx)}, or set {limit.property} explicitly.")


# ---------------------------------------------------------------- strict:s3-bucket-name

def bucket_name_problems(name: str) -> list[str]:
    """Why S3 would refuse ``name`` for a general purpose bucket; empty when it is valid."""
    problems = []
    if not limits.S3_BUCKET_NAME_MIN <= len(name) <= limits.S3_BUCKET_NAME_MAX:
        problems.append(f"it is {len(name)} characters")
    bad = sorted(set(re.sub(r"[a-z0-9.-]", "", name)))
    if bad:
        problems.append(f"it holds characters S3 refuses: {''.join(bad)!r}")
    if name and not (name[0].isalnum() and name[0].isascii() and name[-1].isalnum() and name[-1].isascii()):
        problems.append("it does not begin and end with a lowercase letter or digit")
    if ".." in name:
        problems.append("it has two adjacent dots")
    try:
        ipaddress.IPv4Address(name)
        problems.append("it is formatted as an IP address")
    except ValueError:
        pass
    problems += [f"it begins with the reserved prefix {prefix!r}"
                 for prefix in limits.S3_RESERVED_PREFIXES if name.startswith(prefix)]
    problems += [f"it ends with the reserved suffix {suffix!r}"
                 for suffix in limits.S3_RESERVED_SUFFIXES if name.endswith(suffix)]
    return problems


def _check_bucket_name(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type not in limits.S3_BUCKET_TYPES:
        return
    name = resource.props.get("bucket")
    if isinstance(name, str) and name:
        problems = bucket_name_problems(name)
        if problems:
            yield (f"{_label(resource)} bucket name {_shown(name)} is not valid for S3: {'; '.join(problems)}. "
                   f"A bucket name is {limits.S3_BUCKET_NAME_MIN}-{limits.S3_BUCKET_NAME_MAX} lowercase letters, "
                   f"digits, hyphens and dots, begins and ends with a letter or digit, has no '..', is not an IP "
                   f"address and avoids the reserved prefixes and suffixes ({limits.S3_BUCKET_NAMING}).")
    elif name is None and resource.retain_on_delete:
        yield (f"{_label(resource)} is retained on destroy but has no explicit bucket name: Pulumi names it "
               f"'{resource.name}-' plus 7 random characters, so the next `up` cannot find it again, creates an "
               f"empty bucket beside it and the retained one, with its data, is orphaned; set bucket to a name "
               f"derived from the project and stack (or goldenenv:storage.bucket.bucketName).")


# ---------------------------------------------------------------- strict:launch-template-version

def _check_launch_template_version(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != INSTANCE:
        return
    template = resource.props.get("launchTemplate")
    if not isinstance(template, Mapping):
        return
    version = template.get("version")
    if isinstance(version, (int, float)) and not isinstance(version, bool) and float(version).is_integer():
        return
    if isinstance(version, str) and version.strip().isdigit():
        return
    found = f"version {version!r}" if version is not None else "no version (the template's default)"
    yield (f"{_label(resource)} launches from its launch template at {found}: \"$Default\" and \"$Latest\" move "
           f"whenever the template gets a new version, and the provider then replaces the node; set "
           f"launchTemplate.version to the template's version number (its latestVersion).")


# ---------------------------------------------------------------- strict:fsx-final-backup

def _links_to_s3(fs: PlannedResource, ctx: Context) -> str | None:
    """What links the file system to S3 (an association, or its own importPath), or None."""
    if str(fs.props.get("importPath") or "").startswith("s3://"):
        return f"its importPath {fs.props['importPath']}"
    ids = {v for v in (fs.id, fs.outputs.get("id"), fs.props.get("id")) if isinstance(v, str) and v}
    for association in ctx.of_type(DATA_REPOSITORY_ASSOCIATION):
        target = association.props.get("fileSystemId")
        if (isinstance(target, str) and target in ids) or \
                fs.urn in association.property_dependencies.get("fileSystemId", ()):
            return f"{_label(association)}"
    return None


def _check_fsx_final_backup(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != LUSTRE_FILE_SYSTEM:
        return
    skip = resource.props.get("skipFinalBackup")
    if skip is True or (isinstance(skip, str) and skip.strip().lower() == "true"):
        return
    link = _links_to_s3(resource, ctx)
    if link:
        found = f"sets skipFinalBackup {skip!r}" if skip is not None else "does not set skipFinalBackup"
        yield (f"{_label(resource)} is linked to S3 ({link}) and {found}: AWS backs up only persistent file "
               f"systems not linked to a data repository ({FSX_BACKUPS}), so the final backup is refused and the "
               f"delete fails; set skipFinalBackup=True (the retained bucket is the durable copy: export to it "
               f"before deleting).")


# ---------------------------------------------------------------- strict:iam-arn

def arn_problem(arn: str) -> str | None:
    """Why AWS would refuse, or never match, ``arn`` in a policy Resource or an alarm action; None when well formed."""
    if arn == "*":
        return None
    if not arn.startswith("arn:"):
        return "is neither an ARN nor \"*\""
    parts = arn.split(":")
    if len(parts) < 6:
        return (f"has {len(parts)} colon-separated fields; an ARN has at least 6: "
                f"arn:partition:service:region:account:resource ({limits.ARN_FORMAT})")
    _, part, service, region, account = parts[:5]
    resource = ":".join(parts[5:])
    if part not in limits.PARTITIONS and part != "*":
        return f"names partition {part!r}; known: {', '.join(sorted(limits.PARTITIONS))} (or *)"
    if not service:
        return "has no service field"
    if service == "automate":
        if len(parts) == 6 and account == "ec2" and resource in limits.AUTOMATE_ACTIONS:
            return None
        return (f"is not an EC2 alarm action: those pseudo ARNs carry no account and read "
                f"arn:{part}:automate:{region or 'REGION'}:ec2:ACTION, ACTION one of "
                f"{', '.join(sorted(limits.AUTOMATE_ACTIONS))} ({limits.AUTOMATE_ARN})")
    if _has_no_account(service, region, resource):
        if not account:
            return None
        return (f"has account {account!r}, but {service} ARNs like it have none: write "
                f"{':'.join([*parts[:4], '', *parts[5:]])}")
    if _is_account(service, account):
        return None
    if account:
        return f"has account {account!r}: write a 12-digit account id or a wildcard (*)"
    optional = limits.ARN_ACCOUNT_OPTIONAL.get(service, ())
    if optional and resource.startswith(optional):
        return None
    example = ":".join([*parts[:4], "*", *parts[5:]])
    return (f"has an empty account field, which {service} ARNs need, so it matches nothing; AWS shows them with the "
            f"account: write {example} (or the 12-digit account id in place of *)")


def _has_no_account(service: str, region: str, resource: str) -> bool:
    """S3 bucket and object ARNs have no region and no account; its access points, jobs and lenses have both."""
    if service == "s3":
        return not region and not resource.startswith(limits.ARN_S3_WITH_ACCOUNT)
    return service in limits.ARN_ACCOUNT_NONE


def _is_account(service: str, account: str) -> bool:
    return bool(re.fullmatch(r"\d{12}", account) or "*" in account or "?" in account or "${" in account
                or account in limits.ARN_ACCOUNT_WORDS.get(service, ()))


def _statements(document: Any) -> list[Mapping[str, Any]]:
    statements = _mapping(_json(document)).get("Statement")
    return [_mapping(s) for s in ([statements] if isinstance(statements, Mapping) else _items(statements))]


def _check_arns(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    prop = POLICY_DOCUMENTS.get(resource.type)
    if prop:
        for index, statement in enumerate(_statements(resource.props.get(prop))):
            sid = statement.get("Sid") or f"#{index}"
            for element in ("Resource", "NotResource"):
                value = statement.get(element)
                for arn in [value] if isinstance(value, str) else _items(value):
                    problem = arn_problem(arn) if isinstance(arn, str) else None
                    if problem:
                        yield f"{_label(resource)} statement {sid} {element} {_shown(arn, 120)} {problem}."
    if resource.type == METRIC_ALARM:
        for key in ALARM_ACTIONS:
            for arn in _items(resource.props.get(key)):
                problem = arn_problem(arn) if isinstance(arn, str) else None
                if problem:
                    yield f"{_label(resource)} {key} {_shown(arn, 120)} {problem}."


# ---------------------------------------------------------------- strict:vcpu-quota

def _pool_name(pool: PlannedResource, ctx: Context) -> str:
    stack = ctx.required_tags.get(STACK_TAG_KEY)
    return pool.name[len(stack) + 1:] if stack and pool.name.startswith(f"{stack}-") else pool.name


def _region(ctx: Context) -> str | None:
    regions = {p.props.get("region") for p in ctx.of_type(AWS_PROVIDER)} - {None}
    return regions.pop() if len(regions) == 1 else None


def _check_vcpu_quota(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """EC2 counts running On-Demand and requested Spot capacity in vCPUs against one quota per family group, per
    region, and a new account's GPU quotas are often 0: the first `up` fails at the nodes. Said per pool, with the
    quota's code to read it."""
    if resource.type != POOL_COMPONENT:
        return
    children = [r for r in ctx.resources if r.parent_urn == resource.urn]
    templates = [r for r in children if r.type == LAUNCH_TEMPLATE]
    count = sum(r.type == INSTANCE for r in children)
    if not templates or not count:
        return
    instance_type = templates[0].props.get("instanceType")
    options = _mapping(templates[0].props.get("instanceMarketOptions"))
    market = "spot" if options.get("marketType") == "spot" else "on-demand"
    it = catalog.instance_types("aws").get(instance_type) if isinstance(instance_type, str) else None
    yield from limits.vcpu_quota_lines([VcpuAsk(_pool_name(resource, ctx), it.name if it else str(instance_type),
                                                count, it.vcpus if it else 0, market)], _region(ctx))


# ---------------------------------------------------------------- strict:spot-restart

def _check_spot_restart(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """A launch template whose spot nodes EC2 stops (persistent request, stop or hibernate) may not place them in a
    placement group: RunInstances refuses it (spot.py), so the first `up` fails at the nodes. And each instance of
    such a template must cancel its request before it is deleted, or EC2 launches it again, untracked."""
    if resource.type != LAUNCH_TEMPLATE:
        return
    options = _mapping(_mapping(resource.props.get("instanceMarketOptions")).get("spotOptions"))
    behaviour = options.get("instanceInterruptionBehavior")
    if behaviour not in ("stop", "hibernate"):
        return
    group = _mapping(resource.props.get("placement")).get("groupName")
    if group:
        yield (f"{_label(resource)} places spot nodes with interruption behaviour {behaviour} in placement group "
               f"{_shown(group, 60)}: EC2 refuses that combination; use a one-time request (terminate) in a "
               "placement group, or no placement group")
    if options.get("spotInstanceType") != spot.PERSISTENT:
        return
    for node in ctx.of_type(INSTANCE):
        if node.parent_urn == resource.parent_urn and not node.delete_hooks:
            yield (f"{_label(node)} launches from persistent spot requests but cancels none before it is deleted: "
                   "EC2 would launch it again after destroy; give it a before_delete hook (spot.cancel_request_hook)")


# ---------------------------------------------------------------- the rule set

RULES: tuple[Rule, ...] = (
    Rule("strict:budget-notifications", f"A budget has at most {limits.BUDGET_NOTIFICATIONS.value} notifications, "
         f"each threshold and type once, each with at most {limits.EMAILS_PER_NOTIFICATION.value} emails and "
         f"{limits.SNS_TOPICS_PER_NOTIFICATION.value} SNS topic.", Severity.ERROR, _check_budget_notifications),
    Rule("strict:budget-action-instances", f"A budget action stops at most "
         f"{limits.BUDGET_ACTION_INSTANCE_IDS.value} instances.", Severity.ERROR, _check_budget_action_instances),
    Rule("strict:tag-limits", f"With the provider's defaultTags, a resource carries at most "
         f"{limits.TAGS_PER_RESOURCE.value} user tags, keys of at most {limits.TAG_KEY_LENGTH.value} and values of "
         f"at most {limits.TAG_VALUE_LENGTH.value} characters.", Severity.ERROR, _check_tag_limits),
    Rule("strict:name-length", "Physical names, explicit or auto-named (resource name plus Pulumi's "
         f"{limits.AUTONAME_SUFFIX}-character suffix), fit AWS's limit for their type.", Severity.ERROR,
         _check_name_length),
    Rule("strict:s3-bucket-name", "Explicit bucket names are valid for S3, and a bucket retained on destroy has "
         "one (an auto-named retained bucket is orphaned by the next up).", Severity.ERROR, _check_bucket_name),
    Rule("strict:launch-template-version", "Instances launch from a numbered launch template version, not "
         "$Default or $Latest (the provider replaces the node when those move).", Severity.ERROR,
         _check_launch_template_version),
    Rule("strict:fsx-final-backup", "A Lustre file system linked to S3 sets skipFinalBackup: AWS cannot back it "
         "up, so its delete would fail.", Severity.ERROR, _check_fsx_final_backup),
    Rule("strict:iam-arn", "ARNs in IAM policy documents (Resource, NotResource) and alarm actions are well "
         "formed: six fields, a known partition, an account where the service has one and none where it has "
         "not.", Severity.ERROR, _check_arns),
    Rule("strict:vcpu-quota", "Each pool's nodes need that many vCPUs of their family's EC2 On-Demand or Spot "
         "quota in the region (often 0 for GPU families on a new account): said per pool with the quota code, "
         "to check before up.", Severity.WARNING, _check_vcpu_quota),
    Rule("strict:spot-restart", "Spot nodes that EC2 stops on interruption sit in no placement group (EC2 refuses "
         "it) and cancel their persistent request before they are deleted (else EC2 launches them again).",
         Severity.ERROR, _check_spot_restart),
    user_data_rule(limits.USER_DATA),
)


def findings(resources: Sequence[PlannedResource], required_tags: Mapping[str, str]) -> list[Finding]:
    """Every deploy-readiness finding, in rule order then resource order. ``required_tags`` are the stack's tags:
    their goldenenv:stack value tells name-length which part of a long name is the stack name."""
    ctx = Context(tuple(resources), dict(required_tags))
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]
