"""Google Cloud's guardrail facts: the pulumi-gcp type tokens the generic rules of goldenenv.guardrails read, and how
to read them. Resources are in engine form (camelCase inputs).

- Tags are labels: a resource's key/value tags are its `labels` (lowercase, goldenenv:stack -> goldenenv_stack, see
  labels.py); its `tags`, where it has them, are network tags (a list of strings that firewall rules target).
- Firewalls decide who reaches a node. A VPC denies all ingress by default, so only the allow rules of INGRESS
  firewalls that are not disabled open anything; each `allows` entry is a protocol with ports ("22", "1000-2000")
  or none (every port). Deny rules are not subtracted: an allow open to the world is judged as written.
- A node is public through an access config on a network interface (an external IPv4, ephemeral or a static
  Address), an IPv6 access config (an external IPv6), or its serial console opened to SSH (metadata
  serial-port-enable, on the instance or the project) through Google's ssh-serialport gateway, which takes
  connections from any address.
- Nothing to say for imdsv1-allowed: Compute Engine's metadata server answers only requests carrying the
  `Metadata-Flavor: Google` header and has no tokenless mode to switch off
  (https://cloud.google.com/compute/docs/metadata/querying-metadata). enable-oslogin FALSE falls back to metadata
  ssh-keys, an access-management choice no rule judges.
- Nothing to say for unencrypted-storage or unencrypted-topic: Google Cloud encrypts all data at rest - persistent
  disks, Cloud Storage, Managed Lustre, Filestore, Pub/Sub - with Google-managed keys by default, and offers no
  unencrypted form (https://cloud.google.com/docs/security/encryption/default-encryption). A customer-managed key
  is a choice, not a gap.
- Cloud Storage buckets hold datasets and checkpoints: data stores, retained. Managed Lustre is not one: like FSx
  for Lustre on AWS it is the fast working copy, exported to the retained bucket before destroy (storage.py), and
  retaining it would keep a file system billing after the cluster is gone; a bucket holds no data only when its
  labels say so (goldenenv-holds: function-code, on the stop function's source bucket), never for being named.
  A bucket is public unless public access prevention is "enforced" ("inherited", the default, follows an organisation policy the plan cannot see), or through an IAM
  member, binding or policy, or an ACL, granting allUsers or allAuthenticatedUsers.
- The budget is a Cloud Billing budget; its hard stop is a function triggered by the Pub/Sub topic the budget
  publishes to (Google's "cap costs" pattern: https://cloud.google.com/billing/docs/how-to/notify).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp import hardening, privilege
from goldenenv.guardrails import (
    BudgetWatch,
    Context,
    boot_text,
    Ingress,
    PlannedResource,
    ProviderFacts,
    _is_true,
    _items,
    _label,
    _mapping,
    _port,
    _protocol,
    _sources,
    _tag_problem,
    holds_flag,
)
from goldenenv.clouds.gcp import stop_chain

FIREWALL = "gcp:compute/firewall:Firewall"
INSTANCE = "gcp:compute/instance:Instance"
INSTANCE_FROM_TEMPLATE = "gcp:compute/instanceFromTemplate:InstanceFromTemplate"
INSTANCE_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
INSTANCES = (INSTANCE, INSTANCE_FROM_TEMPLATE)
ADDRESS = "gcp:compute/address:Address"
PROJECT_METADATA = "gcp:compute/projectMetadata:ProjectMetadata"
PROJECT_METADATA_ITEM = "gcp:compute/projectMetadataItem:ProjectMetadataItem"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
BUCKET_IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
BUCKET_IAM_POLICY = "gcp:storage/bucketIAMPolicy:BucketIAMPolicy"
BUCKET_ACL = "gcp:storage/bucketACL:BucketACL"
BUCKET_ACCESS_CONTROL = "gcp:storage/bucketAccessControl:BucketAccessControl"
DEFAULT_OBJECT_ACCESS_CONTROL = "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl"
LUSTRE = "gcp:lustre/instance:Instance"
BUDGET = "gcp:billing/budget:Budget"
TOPIC = "gcp:pubsub/topic:Topic"
FUNCTION_V2 = "gcp:cloudfunctionsv2/function:Function"
FUNCTION_V1 = "gcp:cloudfunctions/function:Function"
EVENTARC_TRIGGER = "gcp:eventarc/trigger:Trigger"
REPOSITORY = "gcp:artifactregistry/repository:Repository"
REPOSITORY_IAM = ("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
                  "gcp:artifactregistry/repositoryIamBinding:RepositoryIamBinding")
PROJECT_IAM = ("gcp:projects/iAMMember:IAMMember", "gcp:projects/iAMBinding:IAMBinding")
PULL_ROLES = frozenset({"roles/artifactregistry.reader", "roles/artifactregistry.writer",
                        "roles/artifactregistry.repoAdmin", "roles/artifactregistry.admin"})
"""Artifact Registry's predefined roles that include pulling (artifactregistry.repositories.downloadArtifacts)."""
LUSTRE_AGENT = re.compile(r"^serviceAccount:service-\d+@gcp-sa-lustre\.iam\.gserviceaccount\.com$")
"""Managed Lustre's service agent: it reads and writes the bucket in importData and exportData."""
BUCKET_WRITE_ROLES = frozenset({"roles/storage.objectuser", "roles/storage.objectadmin", "roles/storage.admin"})
"""Cloud Storage roles that read and write objects (Managed Lustre's transfer guide asks for objectUser)."""
SERVICE_CONNECTION = "gcp:servicenetworking/connection:Connection"
PEERING_REMOVED = "REMOVE_PEERING"
RESOURCE_POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"

USER_LABELLED: Mapping[str, str] = {f"gcp:monitoring/{module}:{cls}": "userLabels" for module, cls in (
    ("notificationChannel", "NotificationChannel"), ("alertPolicy", "AlertPolicy"),
    ("customService", "CustomService"), ("genericService", "GenericService"), ("slo", "Slo"),
    ("uptimeCheckConfig", "UptimeCheckConfig"))}
"""Cloud Monitoring resources keep their labels in userLabels (pulumi-gcp 10.2.0); a NotificationChannel's
`labels` configure the channel (its email_address)."""
PUBLIC_MEMBERS = frozenset({"allusers", "allauthenticatedusers"})
"""IAM principals and ACL entities (lower case) that are anyone on the internet, or anyone with a Google account."""
PUBLIC_PREDEFINED_ACLS = frozenset({"publicread", "publicreadwrite", "authenticatedread"})
"""Predefined (canned) bucket ACLs (lower case) that open a bucket to everyone or to any Google account."""
SERIAL_PORT_KEY = "serial-port-enable"
SERIAL_PORT_DOCS = "https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-using-serial-console"


# ---------------------------------------------------------------- ssh-open-to-world, ingress-open-to-world

def _port_range(text: Any) -> tuple[int | None, int | None]:
    low, _, high = str(text).strip().partition("-")
    return _port(low), _port(high or low)


NO_SOURCE = ("0.0.0.0/0",)
"""What an ingress firewall with no sourceRanges, sourceTags or sourceServiceAccounts admits: Google applies
0.0.0.0/0 ("If you don't specify a source ... Google Cloud uses the IPv4 range 0.0.0.0/0", VPC firewall rules,
sources for ingress rules: https://cloud.google.com/firewall/docs/firewalls#sources_for_ingress_rules)."""


def ingress(resource: PlannedResource) -> list[Ingress]:
    """An INGRESS firewall's allow rules from its source ranges (none at all: NO_SOURCE, Google's default); a rule
    with no ports opens every port of its protocol, protocol "all" every protocol."""
    props = resource.props
    if resource.type != FIREWALL or _is_true(props.get("disabled")):
        return []
    if str(props.get("direction") or "INGRESS").upper() != "INGRESS":
        return []
    sources = _sources(props.get("sourceRanges"))
    if not sources and not _items(props.get("sourceTags")) and not _items(props.get("sourceServiceAccounts")):
        sources = list(NO_SOURCE)
    permissions = []
    for allow in (_mapping(a) for a in _items(props.get("allows"))):
        protocol = _protocol(allow.get("protocol"))
        ports = [p for p in _items(allow.get("ports")) if str(p).strip()]
        if protocol == "all":
            ranges = [(None, None)]
        elif not ports:
            ranges = [(0, 65535)]
        else:
            ranges = [_port_range(p) for p in ports]
        permissions += [Ingress(protocol, low, high, source) for low, high in ranges for source in sources]
    return permissions


# ---------------------------------------------------------------- untagged-resource: boot disks

def launch_tags(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """An instance's boot disk (bootDisk.initializeParams.labels) and a template's disks (disks[].labels) carry the
    required labels: a disk is billed on its own line, and the budget filters on the stack's label, so an unlabelled
    disk's cost escapes the budget."""
    required = gcp_labels.labels(dict(ctx.required_tags))
    if resource.type in INSTANCES:
        boot = _mapping(resource.props.get("bootDisk"))
        if not boot or boot.get("source"):
            return  # an existing disk carries its own labels; a template's disks are judged on the template
        disks = [("its boot disk", _mapping(boot.get("initializeParams")).get("labels"))]
    elif resource.type == INSTANCE_TEMPLATE:
        disks = [(f"its disk #{i}", _mapping(d).get("labels")) for i, d in enumerate(_items(resource.props.get("disks")))]
    else:
        return
    for which, labels in disks:
        problem = _tag_problem(_mapping(labels), required, "labels")
        if problem:
            yield (f"{_label(resource)}: {which} {problem}, so its cost escapes the budget's label filter; set them "
                   f"in {'bootDisk.initializeParams.labels' if resource.type in INSTANCES else 'disks[].labels'}.")


# ---------------------------------------------------------------- public-ip-on-gpu-node, public-ip-on-head

def _interfaces(resource: PlannedResource) -> list[Mapping[str, Any]]:
    return [_mapping(i) for i in _items(resource.props.get("networkInterfaces"))]


def _metadata_opens_serial_port(metadata: Any) -> bool:
    value = _mapping(metadata).get(SERIAL_PORT_KEY)
    return _is_true(value) or str(value).strip() == "1"


def _static_address(config: Mapping[str, Any], ctx: Context) -> str:
    """Names the planned static Address an access config's natIp takes, if it takes one ("" otherwise)."""
    nat_ip = config.get("natIp")
    for address in ctx.of_type(ADDRESS):
        values = (address.id, address.props.get("address"), address.outputs.get("address"))
        if nat_ip is not None and isinstance(nat_ip, str) and nat_ip in {v for v in values if isinstance(v, str)}:
            return f", the static external {_label(address)}"
    return ""


def public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    label = _label(resource)
    if resource.type in (*INSTANCES, INSTANCE_TEMPLATE):
        for index, interface in enumerate(_interfaces(resource)):
            name = interface.get("name") or f"#{index}"
            configs = [_mapping(c) for c in _items(interface.get("accessConfigs"))]
            if configs:
                yield (f"{label} network interface {name} has an access config, so it gets an external IP"
                       f"{_static_address(configs[0], ctx)}, reachable from the internet; drop accessConfigs, "
                       f"egress through Cloud NAT and reach the node through IAP or a VPN.")
            if _items(interface.get("ipv6AccessConfigs")):
                yield (f"{label} network interface {name} has an IPv6 access config, so it gets an external IPv6 "
                       f"address, reachable from the internet; drop ipv6AccessConfigs.")
        if _metadata_opens_serial_port(resource.props.get("metadata")):
            yield (f"{label} sets metadata {SERIAL_PORT_KEY} true: its serial console takes SSH connections from "
                   f"any address through Google's ssh-serialport gateway ({SERIAL_PORT_DOCS}); remove it and reach "
                   f"the node through IAP.")
    elif ((resource.type == PROJECT_METADATA and _metadata_opens_serial_port(resource.props.get("metadata")))
          or (resource.type == PROJECT_METADATA_ITEM and resource.props.get("key") == SERIAL_PORT_KEY
              and _metadata_opens_serial_port({SERIAL_PORT_KEY: resource.props.get("value")}))):
        yield (f"{label} sets {SERIAL_PORT_KEY} true for the whole project: every node's serial console takes SSH "
               f"connections from any address through Google's ssh-serialport gateway ({SERIAL_PORT_DOCS}); "
               f"remove it.")


def says_private(resource: PlannedResource) -> bool:
    """An instance with no access config on any interface takes no external address: on Google Cloud absence is
    explicit (no subnet default gives one)."""
    interfaces = _interfaces(resource)
    return bool(interfaces) and not any(
        _items(i.get("accessConfigs")) or _items(i.get("ipv6AccessConfigs")) for i in interfaces)


# ---------------------------------------------------------------- s3-public-access: Cloud Storage

def _members(resource: PlannedResource) -> list[str]:
    """The principals an IAM resource on a bucket grants its role to."""
    props = resource.props
    if resource.type == BUCKET_IAM_MEMBER:
        return [props["member"]] if isinstance(props.get("member"), str) else []
    if resource.type == BUCKET_IAM_BINDING:
        return [m for m in _items(props.get("members")) if isinstance(m, str)]
    if resource.type == BUCKET_IAM_POLICY:
        document = props.get("policyData")
        if isinstance(document, str):
            try:
                document = json.loads(document)
            except ValueError:
                return []
        return [m for b in _items(_mapping(document).get("bindings"))
                for m in _items(_mapping(b).get("members")) if isinstance(m, str)]
    return []


def _acl_entities(resource: PlannedResource) -> list[str]:
    """The entities an ACL resource grants to ("allUsers"; "READER:allUsers" in a BucketACL's roleEntities)."""
    props = resource.props
    if resource.type in (BUCKET_ACCESS_CONTROL, DEFAULT_OBJECT_ACCESS_CONTROL):
        return [props["entity"]] if isinstance(props.get("entity"), str) else []
    if resource.type == BUCKET_ACL:
        return [str(e).split(":", 1)[-1] for e in _items(props.get("roleEntities")) if isinstance(e, str)]
    return []


def _is_public(principal: str) -> bool:
    return principal.strip().lower() in PUBLIC_MEMBERS


def public_data(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == BUCKET:
        prevention = props.get("publicAccessPrevention")
        if str(prevention or "").strip().lower() != "enforced":
            yield (f"{label} leaves publicAccessPrevention {prevention or 'unset'!s} (inherited: public unless an "
                   f"organisation policy the plan cannot see enforces it), so an IAM grant or ACL can make the data "
                   f"public; set publicAccessPrevention \"enforced\" (and uniformBucketLevelAccess true).")
        return
    public = [m for m in _members(resource) if _is_public(m)]
    if public:
        yield (f"{label} grants {props.get('role') or 'its roles'} to {', '.join(public)}: anyone on the internet "
               f"(allUsers) or with any Google account (allAuthenticatedUsers) can reach the data; grant the role to "
               f"named service accounts or groups instead.")
    entities = [e for e in _acl_entities(resource) if _is_public(e)]
    if entities:
        yield (f"{label} grants an ACL to {', '.join(entities)}, opening the bucket beyond the project; enforce "
               f"public access prevention and uniform bucket-level access, and grant access by IAM to named "
               f"principals.")
    predefined = str(props.get("predefinedAcl") or "") if resource.type == BUCKET_ACL else ""
    if predefined.strip().lower() in PUBLIC_PREDEFINED_ACLS:
        yield (f"{label} applies the predefined ACL {predefined!r}, opening the bucket beyond the project; use "
               f"\"private\" (or \"projectPrivate\") and enforce public access prevention.")


# ---------------------------------------------------------------- data-store-not-retained

def _bucket_names(bucket: PlannedResource) -> set[str]:
    values = (bucket.id, bucket.props.get("name"), bucket.outputs.get("name"), bucket.outputs.get("url"))
    return {v.removeprefix("gs://") for v in values if isinstance(v, str) and v}


def holds_no_data(resource: PlannedResource, ctx: Context) -> bool:
    """A bucket holds no datasets or checkpoints only when its labels say so (HOLDS_TAG: function-code on the stop
    function's source bucket, written by budget.py): being named as a function's source exempts nothing, since a
    function can be pointed at the data bucket."""
    return resource.type == BUCKET and holds_flag(resource.props.get("labels")) is not None


# ---------------------------------------------------------------- budget-not-planned

def _topic_values(topic: PlannedResource) -> set[str]:
    """What a reference to a planned topic reads as: its id ("projects/P/topics/T"), its name."""
    values = (topic.id, topic.outputs.get("id"), topic.props.get("name"), topic.outputs.get("name"))
    return {v for v in values if isinstance(v, str) and v}


def _same_topic(a: Any, b: Any, ctx: Context) -> bool:
    """Whether two topic references name one topic: equal text, or both a planned topic's id or name."""
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    if a == b or a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]:
        return True
    return any(a in values and b in values for values in map(_topic_values, ctx.of_type(TOPIC)))


def _triggered_by(ctx: Context) -> list[Any]:
    """The topics that run a function (gen 2 event trigger, gen 1 event trigger, or an Eventarc trigger); None
    where the topic is unknown (a policy-pack preview)."""
    topics: list[Any] = []
    for function in ctx.of_type(FUNCTION_V2):
        trigger = _mapping(function.props.get("eventTrigger"))
        if trigger:
            topics.append(trigger.get("pubsubTopic"))
    for function in ctx.of_type(FUNCTION_V1):
        trigger = _mapping(function.props.get("eventTrigger"))
        if "pubsub" in str(trigger.get("eventType") or "").lower():
            topics.append(trigger.get("resource"))
    for trigger in ctx.of_type(EVENTARC_TRIGGER):
        pubsub = _mapping(_mapping(trigger.props.get("transport")).get("pubsub"))
        if pubsub:
            topics.append(pubsub.get("topic"))
    return topics


def budgets(ctx: Context) -> list[BudgetWatch]:
    """Each Cloud Billing budget; it stops the nodes when it publishes to a Pub/Sub topic (allUpdatesRule
    .pubsubTopic), whose stop is a function that topic triggers (both planned)."""
    watches = []
    triggers = _triggered_by(ctx)
    for budget in ctx.of_type(BUDGET):
        topic = _mapping(budget.props.get("allUpdatesRule")).get("pubsubTopic")
        gap = None
        if isinstance(topic, str) and topic and not any(t is None or _same_topic(topic, t, ctx) for t in triggers):
            gap = (f"publishes to {topic}, but no function of the plan is triggered by that topic, so nothing stops "
                   f"the nodes; plan the hard stop's function with that topic as its event trigger")
        watches.append(BudgetWatch(budget, stops=bool(topic), gap=gap))
    return watches


# ---------------------------------------------------------------- pull-not-granted

def boot_script(resource: PlannedResource) -> str | None:
    """cloud-init's user data, in the instance's (or template's) metadata `user-data`."""
    if resource.type not in (*INSTANCES, INSTANCE_TEMPLATE):
        return None
    return boot_text(_mapping(resource.props.get("metadata")).get("user-data"))


def repository_addresses(repository: PlannedResource) -> list[str]:
    """`<location>-docker.pkg.dev/<project>/<repository id>`, the address a Docker repository is pulled by."""
    props = repository.props
    location, project, repo = props.get("location"), props.get("project"), props.get("repositoryId")
    if not all(isinstance(v, str) and v for v in (location, project, repo)):
        return []
    return [f"{location}-docker.pkg.dev/{project}/{repo}"]


def _same_repository(value: Any, repository: PlannedResource) -> bool:
    """A repository reference (its id, its full name projects/P/locations/L/repositories/R) names ``repository``."""
    if not isinstance(value, str) or not value:
        return False
    names = {v for v in (repository.id, repository.props.get("repositoryId"), repository.outputs.get("name"))
             if isinstance(v, str) and v}
    return value in names or value.rsplit("/", 1)[-1] == repository.props.get("repositoryId")


def _grantees(resource: PlannedResource) -> list[str]:
    props = resource.props
    members = [props["member"]] if isinstance(props.get("member"), str) else []
    return members + [m for m in _items(props.get("members")) if isinstance(m, str)]


def pull_gap(host: PlannedResource, repository: PlannedResource, ctx: Context) -> str | None:
    """The host's service account (serviceAccount.email) holds a pulling role on the repository, or on the
    repository's project."""
    email = _mapping(host.props.get("serviceAccount")).get("email")
    if not isinstance(email, str) or not email:
        return "runs with no service account, so its metadata server gives it no token"
    member = f"serviceAccount:{email}"
    for grant in ctx.of_type(*REPOSITORY_IAM):
        if (grant.props.get("role") in PULL_ROLES and member in _grantees(grant)
                and _same_repository(grant.props.get("repository"), repository)):
            return None
    for grant in ctx.of_type(*PROJECT_IAM):
        if (grant.props.get("role") in PULL_ROLES and member in _grantees(grant)
                and grant.props.get("project") == repository.props.get("project")):
            return None
    return f"runs as {email}, which holds no Artifact Registry reader role on the repository"


# ---------------------------------------------------------------- bucket-service-not-granted

def _data_buckets(ctx: Context) -> list[PlannedResource]:
    return [b for b in ctx.of_type(BUCKET) if not holds_no_data(b, ctx)]


def bucket_service_gap(service: PlannedResource, ctx: Context) -> str | None:
    """Managed Lustre imports from and exports to the stack's bucket as its service agent
    (service-<project number>@gcp-sa-lustre.iam.gserviceaccount.com), which needs roles/storage.objectUser on it."""
    if service.type != LUSTRE:
        return None
    buckets = _data_buckets(ctx)
    if not buckets:
        return ("imports from and exports to the stack's bucket, which the plan does not hold, so nothing grants "
                "Managed Lustre's service agent roles/storage.objectUser on it")
    for bucket in buckets:
        names = _bucket_names(bucket)
        granted = any(
            str(g.props.get("role") or "").lower() in BUCKET_WRITE_ROLES
            and str(g.props.get("bucket") or "").removeprefix("gs://") in names
            and any(LUSTRE_AGENT.match(m) for m in _members(g))
            for g in ctx.of_type(BUCKET_IAM_MEMBER, BUCKET_IAM_BINDING, BUCKET_IAM_POLICY))
        if not granted:
            return (f"imports from and exports to {_label(bucket)} as Managed Lustre's service agent (service-<project "
                    f"number>@gcp-sa-lustre.iam.gserviceaccount.com), which holds no roles/storage.objectUser on it: "
                    f"the import finds nothing and destroy's export fails; grant it (Managed Lustre, \"Transfer data "
                    f"to and from Cloud Storage\")")
    return None


# ---------------------------------------------------------------- teardown-blocked

def teardown_blocker(resource: PlannedResource) -> str | None:
    props = resource.props
    if resource.type == SERVICE_CONNECTION and str(props.get("deletionPolicy") or "") != PEERING_REMOVED:
        return (f"deletes with deletionPolicy {props.get('deletionPolicy') or 'unset (DELETE)'}: Google keeps the "
                f"connection while Managed Lustre still holds resources behind it, and its peering then stops the "
                f"VPC (and its NAT) from being deleted (pulumi-gcp #3354, terraform-provider-google #19908); set "
                f"deletionPolicy {PEERING_REMOVED}, which removes the peering from the network")
    placement = _mapping(props.get("groupPlacementPolicy"))
    if resource.type == RESOURCE_POLICY and placement.get("vmCount") is not None:
        return (f"fixes vmCount {placement.get('vmCount')}: with it Compute Engine takes exactly that many "
                f"instances created together, while each node is its own insert, so an added or rolled node is "
                f"refused; leave vmCount unset")
    return None


FACTS = ProviderFacts(
    privilege=privilege.judge, host_hardening=hardening.host, data_lifecycle=hardening.lifecycle,
    not_judged=hardening.NOT_JUDGED,
    name="gcp",
    security_groups=(FIREWALL,),
    ingress=ingress,
    public_ip=public_ip,
    data_stores=(BUCKET,),
    holds_no_data=holds_no_data,
    public_data=public_data,
    instances=INSTANCES,
    says_private=says_private,
    budgets=budgets,
    budget_hint="set goldenenv:budget so the stack plans its Cloud Billing budget (and budget.hardStop the function "
                "its Pub/Sub topic triggers)",
    stop_chain=stop_chain.stop_chain,
    launch_tags=launch_tags,
    tag_input="labels",
    tag_input_by_type=USER_LABELLED,
    tag_outputs=("pulumiLabels",),
    tag_form=lambda tags: gcp_labels.labels(dict(tags)),
    boot_script=boot_script,
    repositories=(REPOSITORY,),
    repository_addresses=repository_addresses,
    pull_gap=pull_gap,
    bucket_services=(LUSTRE,),
    bucket_service_gap=bucket_service_gap,
    teardown_blocker=teardown_blocker,
)
