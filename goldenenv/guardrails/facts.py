"""What each provider tells the rules (``ProviderFacts``), and how the rules find every provider's.

The rules are cloud-neutral. What they need to know of a provider - its security group types and how to read
an ingress permission, how its disks, buckets and topics say they are encrypted, how a node gets a public IP,
which resources hold data - is that provider's ``ProviderFacts``, written in its own folder
(goldenenv/clouds/<cloud>/guardrail_facts.py) and found there on first use (``provider_facts``): a new cloud
edits no rule. ``boot_text`` reads user data as the host would, for the hooks that judge a boot.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from goldenenv.extras import is_provider
from goldenenv.guardrails.model import Plan, PlannedResource
from goldenenv.guardrails.plain import _items, _mapping


@dataclass(frozen=True)
class Ingress:
    """One allowed inbound permission from a CIDR source; ports None = every port."""

    protocol: str
    from_port: int | None
    to_port: int | None
    source: str

    def opens(self, port: int) -> bool:
        if self.protocol == "all":
            return True
        if self.protocol != "tcp" or self.from_port is None or self.to_port is None:
            return False
        return self.from_port <= port <= self.to_port

    def describe(self) -> str:
        if self.protocol == "all":
            return f"all traffic from {self.source}"
        if self.from_port is None or self.to_port is None:
            return f"{self.protocol} from {self.source}"
        return f"{self.protocol} {self.from_port}-{self.to_port} from {self.source}"


Messages = Callable[[PlannedResource, Plan], Iterable[str]]
"""A provider's check of one resource for one rule: a message per problem, nothing for types not its own."""


def _no_messages(resource: PlannedResource, ctx: Plan) -> Iterable[str]:
    return ()


def _no_ingress(resource: PlannedResource) -> Iterable[Ingress]:
    return ()


def _no_gap(resource: PlannedResource, ctx: Plan) -> str | None:
    return None


def _never_private(resource: PlannedResource) -> bool:
    return False


def _always_holds_data(resource: PlannedResource, ctx: Plan) -> bool:
    return False


def _no_targets(resource: PlannedResource) -> Iterable[tuple[str, Any]]:
    return ()


def _no_document(resource: PlannedResource) -> Any:
    return None


def _no_acl(resource: PlannedResource) -> Iterable[str]:
    return ()


def _not_a_block(resource: PlannedResource) -> Sequence[str] | None:
    return None


def _covers_nothing(block: PlannedResource, bucket: PlannedResource, ctx: Plan) -> bool:
    return False


def _no_boot(resource: PlannedResource) -> str | None:
    return None


def _no_addresses(resource: PlannedResource) -> Iterable[str]:
    return ()


def _pull_unknown(host: PlannedResource, repository: PlannedResource, ctx: Plan) -> str | None:
    return ("is booted to pull from it, but its provider's facts say nothing of how a host is granted pull "
            "(ProviderFacts.pull_gap)")


def _service_unknown(service: PlannedResource, ctx: Plan) -> str | None:
    return ("reads or writes the stack's bucket, but its provider's facts say nothing of the grant that admits it "
            "(ProviderFacts.bucket_service_gap)")


def _pins_nothing(resource: PlannedResource) -> str | None:
    return None


def _unpack(raw: bytes) -> bytes:
    """base64 (when the whole text is), then gzip (when it starts with gzip's magic), as cloud-init reads them."""
    import base64
    import binascii
    import gzip

    text = raw.strip()
    if text and not text.startswith((b"#", b"Content-Type", b"MIME-Version", b"\x1f\x8b")):
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except OSError:
            return b""
    return raw


def _inner_files(text: str) -> list[str]:
    """The contents of a cloud-config's write_files that are encoded (b64, gzip, gz+b64), decoded."""
    import yaml

    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    files = _mapping(config).get("write_files")
    found = []
    for entry in (_mapping(f) for f in _items(files)):
        if str(entry.get("encoding") or "").lower() not in ("", "text/plain") and isinstance(entry.get("content"), str):
            found.append(_unpack(entry["content"].encode()).decode(errors="replace"))
    return found


def boot_text(value: Any) -> str | None:
    """User data as the host reads it: plain text, or base64 of it, either gzip-compressed; a MIME multi-part
    archive's parts and a cloud-config's encoded write_files decoded after it (cloud-init takes each form); None for
    anything that is no text."""
    import email

    if not isinstance(value, str) or not value.strip():
        return None
    text = _unpack(value.encode()).decode(errors="replace")
    if text.lstrip().startswith(("Content-Type", "MIME-Version")):
        parts = [_unpack(part.get_payload(decode=True) or b"").decode(errors="replace")
                 for part in email.message_from_string(text).walk() if not part.is_multipart()]
        text = "\n".join([text, *parts])
    if "#cloud-config" in text:
        text = "\n".join([text, *_inner_files(text[text.index("#cloud-config"):])])
    return text


@dataclass(frozen=True)
class BudgetWatch:
    """A budget the plan holds, as budget-not-planned reads it."""

    resource: PlannedResource
    stops: bool
    """Whether it says it stops the nodes when spent (its alert routes to a stop, or its guard is told to stop)."""
    gap: str | None = None
    """What of it is missing from the plan for it to act (its stop function, the timer that runs it); None if
    nothing is."""


def _no_budgets(ctx: Plan) -> Sequence[BudgetWatch]:
    return ()


def _no_chain(ctx: Plan) -> Iterable[tuple[PlannedResource, str]]:
    return ()


@dataclass(frozen=True)
class ProviderFacts:
    """What the cloud-neutral rules need to know of one provider's resources.

    Each cloud writes one, as ``FACTS`` in goldenenv/clouds/<cloud>/guardrail_facts.py. Every hook is asked about
    every planned resource and answers nothing for types that are not its provider's; what is left unset, the
    provider does not have (or no rule reads yet).
    """

    name: str
    security_groups: tuple[str, ...] = ()
    """ssh-open-to-world / ingress-open-to-world: types of the groups whose rules decide who reaches a node."""
    standalone_ingress_rules: tuple[str, ...] = ()
    """Rule types that attach to a group (``group_property`` holds the group's id); a group's inline rules and
    its standalone rules are judged together."""
    group_property: str = "securityGroupId"
    ingress: Callable[[PlannedResource], Iterable[Ingress]] = _no_ingress
    """Every inbound permission a group or rule grants from a CIDR source (not from other groups)."""
    launch_tags: Messages = _no_messages
    """untagged-resource, beyond the resource's own tags: what a launcher (a launch template) fails to tag on
    what it launches. Asked only about taggable custom resources."""
    storage_encryption: Messages = _no_messages
    """unencrypted-storage: disks, file systems and buckets not encrypted at rest."""
    topic_encryption: Messages = _no_messages
    """unencrypted-topic: notification topics not encrypted at rest."""
    metadata: Messages = _no_messages
    """imdsv1-allowed: nodes whose instance metadata service answers without a session token."""
    public_ip: Messages = _no_messages
    """public-ip-on-gpu-node: nodes, or the subnets they launch in, that give them a public address."""
    data_stores: tuple[str, ...] = ()
    """data-store-not-retained: types holding datasets and checkpoints, to be retained (and not forceDestroy)."""
    holds_no_data: Callable[[PlannedResource, Plan], bool] = _always_holds_data
    """data-store-not-retained: whether a resource of a data-store type holds none of the user's data, by what the
    plan puts in it (a bucket holding only a planned function's source code)."""
    final_backup_gap: Callable[[PlannedResource, Plan], str | None] = _no_gap
    """data-store-not-retained: for a file system `pulumi destroy` deletes without a final backup, what to do
    instead ("link it to ..., set ..."); None for every other resource."""
    public_data: Messages = _no_messages
    """s3-public-access: bucket policies and public access settings that make stored data public."""
    instances: tuple[str, ...] = ()
    """public-ip-on-head: the provider's instance types (a head is one, inside a SlurmHead component)."""
    says_private: Callable[[PlannedResource], bool] = _never_private
    """public-ip-on-head: whether an instance says outright that it takes no public IP (AWS associatePublicIpAddress
    false, Alibaba internetMaxBandwidthOut 0); unset is not enough, it would follow the subnet's default."""
    address_targets: Callable[[PlannedResource], Iterable[tuple[str, Any]]] = _no_targets
    """public-ip-on-gpu-node: for a resource that gives something a public address (an elastic IP, its
    association), each (property, value) naming what gets it; a planned instance named there is public."""
    buckets: tuple[str, ...] = ()
    """s3-public-access: bucket types; each needs a public access block covering it (absent counts as open)."""
    bucket_policy: Callable[[PlannedResource], Any] = _no_document
    """s3-public-access: the policy document (JSON text or mapping) a resource attaches to a bucket, else None."""
    bucket_acl: Callable[[PlannedResource], Iterable[str]] = _no_acl
    """s3-public-access: what a bucket or ACL resource grants, as canned ACL names ("public-read") or grantee
    groups ("AllUsers", "AuthenticatedUsers"); judged against PUBLIC_ACLS."""
    access_block: Callable[[PlannedResource], Sequence[str] | None] = _not_a_block
    """s3-public-access: for a public access block, the settings it leaves off ([] when it blocks everything);
    None for every other resource."""
    block_covers: Callable[[PlannedResource, PlannedResource, Plan], bool] = _covers_nothing
    """s3-public-access: whether a public access block (account-wide or by reference) covers a bucket."""
    account_condition_keys: frozenset[str] = frozenset()
    """s3-public-access: policy condition keys (lower case) that, compared for equality to a concrete value, keep
    an Allow to everyone inside the account, its organisation or its network; any other condition counts as
    open."""
    budgets: Callable[[Plan], Sequence[BudgetWatch]] = _no_budgets
    """budget-not-planned: the provider's budgets in the plan; its instances need one unless the stack says
    `budget: none`."""
    budget_hint: str = "plan the stack's budget"
    """budget-not-planned: what restores a missing budget, in the provider's words."""
    stop_chain: Callable[[Plan], Iterable[tuple[PlannedResource, str]]] = _no_chain
    """budget-stop-chain: each broken link from the stack's budget to its nodes, as (the resource where it breaks,
    what is wrong in words after its label): the budget's filter, amount, currency and thresholds, its route to
    the stop function, the function switched on, its identity's permission to stop this stack's nodes, and the
    schedule that runs the time to live or idle stop (Plan carries what the stack asks)."""
    boot_script: Callable[[PlannedResource], str | None] = _no_boot
    """pull-not-granted: the user data a host (an instance, launch template or scale set) boots with, as text
    (``boot_text`` decodes base64 and gzip); None for every other resource."""
    repositories: tuple[str, ...] = ()
    """pull-not-granted: the types of the provider's image repositories."""
    repository_addresses: Callable[[PlannedResource], Iterable[str]] = _no_addresses
    """pull-not-granted: the addresses hosts pull a repository's images by (host/path, as a boot names them)."""
    pull_gap: Callable[[PlannedResource, PlannedResource, Plan], str | None] = _pull_unknown
    """pull-not-granted: for a host whose boot pulls from a planned repository, what keeps it from pulling (its
    identity holds no pull grant on that repository), in words after its label; None when it may pull."""
    bucket_services: tuple[str, ...] = ()
    """bucket-service-not-granted: types of the managed services that read or write the stack's bucket in the
    cloud's own name (a file system's import and export, a data flow)."""
    bucket_service_gap: Callable[[PlannedResource, Plan], str | None] = _service_unknown
    """bucket-service-not-granted: what of the grant admitting such a service to the bucket the plan lacks (its
    service identity's role on the bucket), in words after its label; None when it is granted."""
    teardown_blocker: Callable[[PlannedResource], str | None] = _pins_nothing
    """teardown-blocked: why a resource would stop `destroy`, or a pool's resize or roll, from completing (a
    peering the network cannot be deleted under, a placement fixed to a number of instances), in words after its
    label; None when it does not."""
    tag_input: str = "tags"
    """untagged-resource: the input holding the key/value tags of the provider's resources; a type is taggable
    when its SDK class takes it (pulumi-gcp: "labels", its `tags` being network tags, a list of strings)."""
    tag_input_by_type: Mapping[str, str] = field(default_factory=dict)
    """untagged-resource: types whose tags live in another input than ``tag_input`` (pulumi-gcp's monitoring
    resources keep theirs in userLabels; a NotificationChannel's `labels` configure the channel)."""
    tag_outputs: tuple[str, ...] = ("tagsAll",)
    """untagged-resource: properties the engine fills with every tag a resource ends up with, the provider's
    default tags included (pulumi-aws tagsAll, pulumi-gcp pulumiLabels); the resource's own win over them."""
    tag_form: Callable[[Mapping[str, str]], Mapping[str, str]] = dict
    """untagged-resource: the stack's required tags as the provider writes them on its resources (pulumi-gcp:
    lowercased labels, goldenenv:stack -> goldenenv_stack)."""
    privilege: Messages = _no_messages
    """grant-broader-than-needed: grants wider than the provider's least-privilege table (clouds/<cloud>/privilege.py
    NEEDS): a wildcard, an action or role it does not list, a wider scope, a broader principal."""
    host_hardening: Messages = _no_messages
    """host-not-hardened: hosts without the boot integrity (Secure Boot, vTPM, Trusted Launch) their type supports,
    or with password login, unless a named reason says why."""
    storage_hardening: Messages = _no_messages
    """storage-not-hardened: storage reachable over plain HTTP or TLS below 1.2, or by shared key without a named
    reason."""
    data_lifecycle: Messages = _no_messages
    """lifecycle-deletes-data: lifecycle rules that delete every object of a data store within a day."""
    not_judged: Mapping[str, str] = field(default_factory=dict)
    """Rule id -> why the rule has nothing to judge on this provider (said as data, never a skipped test)."""


FACTS_PACKAGE = "goldenenv.clouds"
FACTS_MODULE = "guardrail_facts"
"""Each cloud package under FACTS_PACKAGE may hold a FACTS_MODULE defining ``FACTS``, a ProviderFacts."""

PROVIDERS: dict[str, ProviderFacts] = {}
"""Provider name -> its facts: the clouds' own, found on first use, and any given to ``register_facts``."""
CLOUD_FACTS: dict[str, ProviderFacts] = {}
"""Cloud (its folder under goldenenv/clouds/) -> its facts, found with PROVIDERS. Two clouds may build on one
provider (its resource types) and still differ in their facts (their component types, their least-privilege
tables): a plan is judged with the facts of the clouds whose components it holds."""
_registered: set[str] = set()
_found = False


def register_facts(facts: ProviderFacts) -> None:
    """Apply a provider's facts in every rule (a provider living outside goldenenv/clouds/, or a test's)."""
    PROVIDERS[facts.name] = facts
    _registered.add(facts.name)


def clouds_of(resources: Iterable[PlannedResource]) -> set[str]:
    """The clouds whose components (goldenenv:<cloud>:GpuCluster ...) the resources are created under, read from
    their URNs (urn:pulumi:STACK::PROJECT::goldenenv:aws:GpuCluster$aws:ec2/vpc:Vpc::NAME)."""
    found = set()
    for resource in resources:
        parts = resource.urn.split("::")
        for token in (parts[2].split("$") if len(parts) > 2 else []):
            owner, _, rest = token.partition(":")
            if owner == "goldenenv" and ":" in rest:
                found.add(rest.split(":", 1)[0])
    return found


def provider_facts(resources: Iterable[PlannedResource] = ()) -> tuple[ProviderFacts, ...]:
    """Every provider's facts; for a provider that several clouds build on, those of the cloud the resources were
    planned by (clouds_of), else of the first cloud found. The first call imports each cloud's FACTS_MODULE (and so
    its package, with its provider SDK), which this module never does at import time; registered facts of the
    same name win."""
    _find()
    chosen = dict(PROVIDERS)
    for cloud in sorted(clouds_of(resources) & CLOUD_FACTS.keys()):
        facts = CLOUD_FACTS[cloud]
        if facts.name not in _registered:
            chosen[facts.name] = facts
    return tuple(chosen.values())


def _find() -> None:
    global _found
    if not _found:
        clouds = importlib.import_module(FACTS_PACKAGE)
        for found in pkgutil.iter_modules(clouds.__path__):
            folder = os.path.join(getattr(found.module_finder, "path", ""), found.name)
            if not found.ispkg or FACTS_MODULE not in {m.name for m in pkgutil.iter_modules([folder])}:
                continue
            try:
                facts_module = importlib.import_module(f"{FACTS_PACKAGE}.{found.name}.{FACTS_MODULE}")
            except ModuleNotFoundError as e:
                if is_provider(e, found.name):
                    continue  # its provider is not installed (an extra): nothing of that cloud can be planned
                raise
            facts = getattr(facts_module, "FACTS", None)
            if not isinstance(facts, ProviderFacts):
                raise TypeError(f"{FACTS_PACKAGE}.{found.name}.{FACTS_MODULE} must define FACTS, a ProviderFacts")
            PROVIDERS.setdefault(facts.name, facts)
            CLOUD_FACTS[found.name] = facts
        _found = True
