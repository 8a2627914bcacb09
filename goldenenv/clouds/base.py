"""The Cloud protocol and its registry.

A cloud is stateless: it says what it can do (capabilities), checks a spec against that,
and builds the spec's resources as Pulumi components. "Not on this cloud" is then one
clear error, never a missing branch deep in a component.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Protocol

from goldenenv import slurm
from goldenenv.clouds.owncluster import OwnCluster
from goldenenv.spec import ClusterSpec, ConfigError, Problem, pool_key


class Capability(str, Enum):
    RDMA = "rdma"
    SPOT = "spot"
    CAPACITY_RESERVATION = "capacity-reservation"
    CAPACITY_BLOCK = "capacity-block"
    ZONE_FAILOVER = "zone-failover"
    """`goldenenv:zones`: up moves the cluster to the next zone when one has no capacity."""
    PARALLEL_FS = "parallel-fs"
    LOCAL_NVME = "local-nvme"
    BUDGET = "budget"
    HARD_STOP = "hard-stop"


class HostsBy(str, Enum):
    """How `validate` and `run` address a cloud stack's nodes, each from a stack output (HOST_OUTPUTS)."""

    PRIVATE_IP = "private-ip"
    """Their private addresses: reached from the VPC, a VPN or network.adminCidrs, or a jump host's ProxyJump."""
    INSTANCE_ID = "instance-id"
    """Their instance ids: for an ssh config whose ProxyCommand takes one (AWS: SSM's AWS-StartSSHSession)."""


class NodeReach(str, Enum):
    """How the node commands (submit, jobs, logs, cancel, health) reach a stack's nodes and Slurm head."""

    SSH = "ssh"
    """Over ssh, at the addresses the stack's outputs give (node_hosts, head_host): a cloud's hosts."""
    DOCKER = "docker"
    """Through this machine's Docker engine: the nodes and head are containers here, reached without ssh (the
    ssh options are refused for them)."""


HOST_OUTPUTS = {HostsBy.PRIVATE_IP: "nodePrivateIps", HostsBy.INSTANCE_ID: "instanceIds"}
"""The stack output each way of addressing reads, the same on every Pulumi cloud."""
HEAD_OUTPUTS = {HostsBy.PRIVATE_IP: "headPrivateIp", HostsBy.INSTANCE_ID: "headInstanceId"}
"""The Slurm head's stack outputs, one per way of addressing it (absent with goldenenv:scheduler none)."""
STANDARD_OUTPUTS = ("nodePrivateIps", "hostfile", "launchEnv", "imageRepository", "imageRef")
"""The stack outputs every Pulumi cloud's program gives, whatever the cloud, which validate, run, plan and the CLI
read: the nodes' private addresses, the DeepSpeed hostfile and torchrun's environment (nodeboot.launch_outputs), the
stack's own image repository and the image its nodes pull (None until `image push`). With goldenenv:scheduler
slurm, HEAD_OUTPUTS too."""


class DockerReach(str, Enum):
    """How a login on a cloud host reaches its Docker engine, where the golden container runs."""

    DIRECT = "direct"
    """root, or a user the host image itself puts in the docker group: `docker exec`."""
    SUDO = "sudo"
    """A user outside the docker group with passwordless sudo: `sudo -n docker exec` (-n: fail, never prompt)."""


@dataclass(frozen=True)
class NodeLogin:
    """How a user reaches a stack's hosts over ssh: the login, how it reaches Docker there, and how to set it up.

    validate, run, submit, jobs, logs and cancel build every remote command from it, so a cloud whose logins are the
    callers' own (Google's OS Login, Microsoft Entra ID) is reached as the caller, through sudo."""

    user: str | None
    """The login every user shares (the key's user: ubuntu, root, azureuser); None: each caller's own identity,
    which `caller` prints."""
    docker: DockerReach
    how: str
    """How to log in, in words (plan notes, the README's table)."""
    caller: tuple[str, ...] = ()
    """Where user is None: the command that prints the caller's login name on the hosts."""
    caller_setup: str = ""
    """What to run when `caller` gives no name (install the CLI, sign in)."""


class SpotBack(str, Enum):
    """How an evicted or reclaimed spot node comes back (the README's "what survives what")."""

    CLOUD = "cloud"
    """The cloud restarts or restores it in place by itself, by a setting the program plans (SpotReturn.setting)."""
    UP_RECREATES = "up-recreates"
    """The cloud deletes it; `up` refreshes first, sees it gone, and the program creates it again."""
    UP_STARTS = "up-starts"
    """The cloud leaves it stopped (deallocated); `up` starts it (the cloud's before_up, through stopped_nodes)."""


@dataclass(frozen=True)
class SpotReturn:
    """How a pool's spot nodes come back after an eviction, in the order they would."""

    ways: tuple[SpotBack, ...]
    """Empty: they do not come back (the rule's failure)."""
    setting: tuple[str, str, Any] | None = None
    """With SpotBack.CLOUD: (type token, dotted input path, value) a planned resource of the pool carries."""
    how: str = ""


class StoppedNodes(Protocol):
    """The stack's nodes the cloud holds stopped or deallocated, and a way to start them (a cloud API's answers)."""

    def stopped(self) -> list[str]:
        """Names of the stack's nodes that are stopped (deallocated) and not starting."""

    def start(self, names: list[str]) -> None:
        """Ask the cloud to start these nodes (without waiting for them to boot)."""


def start_stopped(nodes: StoppedNodes | None, log: Callable[[str], None]) -> list[str]:
    """Start what the cloud holds stopped of the stack (a spot node it evicted, a node the budget stopped): `up`
    brings the cluster back whole. Returns the names started. A refusal is said, not raised: the rest of `up`
    (new nodes, changes) does not wait on a node the cloud will not start now (no capacity yet)."""
    if nodes is None:
        return []
    try:
        names = nodes.stopped()
    except CloudApiError as e:
        log(f"could not list the stack's stopped nodes ({e}); start any that are stopped from the console")
        return []
    if not names:
        return []
    log(f"starting {len(names)} stopped node(s): {', '.join(names)} (evicted spot, or stopped by the budget, TTL or "
        "idle rule)")
    try:
        nodes.start(names)
    except CloudApiError as e:
        log(f"the cloud did not start them ({e}); the next goldenenv up tries again")
        return []
    return names



@dataclass(frozen=True)
class HeadShape:
    """The Slurm head a stack gets: its instance type and root volume, for the program and the cost lines alike."""

    instance_type: str
    root_volume_gib: int
    """The head pulls the same golden image as the nodes: its root volume is as large as the largest pool's."""


def head_shape(spec: ClusterSpec, cloud: Any) -> HeadShape | None:
    """The stack's head (goldenenv:head, else the cloud's default type), or None: goldenenv:scheduler none, or a
    cloud that runs no head of its own."""
    default = cloud.head_instance_type
    if spec.scheduler != "slurm" or not default:
        return None
    return HeadShape(spec.head.instance_type or default, max(pool.root_volume_gib for pool in spec.nodes))


@dataclass(frozen=True)
class HostImageForm:
    """How a cloud writes a pinned host image of the user's own (hostImage: {id, driver}): its pattern, an example
    for messages, and what the id is called there."""

    pattern: Any
    """A compiled pattern the whole id must match."""
    example: str
    """What to write ("m-...", "projects/<project>/global/images/<name>")."""
    refusal: str
    """Why another id is refused ("is not an Alibaba image ID (m-... or a public image's <name>.vhd)")."""
    sample: str = ""
    """A whole id of the form, as `goldenenv host-image build` would record an image it baked (m-0123...):
    what the contract tests pin a pool's own host image to."""


def pinned_host_image(cloud: str, spec: ClusterSpec, pool: Any, baked_for: Any = None) -> str:
    """The pool's pinned image id: the stack's own, else the catalog's for the region; never a floating alias.

    baked_for: the host layer the machine boots with (goldenenv.images.host: a pool's layer, or the head's): the
    image `goldenenv host-image build` baked for it when one is recorded, so nothing is installed at first boot.
    None: the stock image (a build instance's base)."""
    from goldenenv.nodehost import node_host

    if baked_for is not None and baked_for.baked:
        return baked_for.baked
    host = node_host(cloud, spec.region, pool.host_image)
    if host.override_id:
        return host.override_id
    if host.image is None or not host.image.image_id:
        raise ValueError(f"no host image for {cloud} in {spec.region}: set hostImage")
    return host.image.image_id


def host_image_problems(cloud: str, spec: ClusterSpec, pool: Any, at: str, form: HostImageForm) -> list[Problem]:
    """A hostImage the catalog does not know for the region, none pinned at all, or an id of the wrong form."""
    from goldenenv import catalog

    usable = [n for n, h in catalog.host_images(cloud).items() if h.region in ("*", spec.region)]
    if isinstance(pool.host_image, str) and pool.host_image not in usable:
        return [Problem(at, f"{pool.host_image!r} is not a host image in the catalog for {spec.region}; valid: "
                        f"{', '.join(usable) or 'none'}, or {{id, driver}}")]
    if pool.host_image is None and not usable:
        return [Problem(at, f"the catalog pins no host image for {spec.region}: set hostImage to {{id: "
                        f"{form.example}, driver: <its NVIDIA driver>}}")]
    if pool.host_image is not None and not isinstance(pool.host_image, str) \
            and not form.pattern.fullmatch(pool.host_image.id):
        return [Problem(f"{at}.id", f"{pool.host_image.id!r} {form.refusal}")]
    return []


class CloudApiError(RuntimeError):
    """A cloud REST API's refusal: the HTTP status, and the cloud's own message and code from its JSON error body."""

    def __init__(self, status: int, message: str, code: str = ""):
        super().__init__(f"HTTP {status}{f' {code}' if code else ''}: {message}")
        self.status, self.message, self.code = status, message, code


def json_call(method: str, url: str, token: str, body: Any = None, timeout: float = 60, *,
              error: type[CloudApiError] = CloudApiError, code_field: str = "code") -> dict[str, Any]:
    """One JSON call with a bearer token, as goldenenv's own calls outside Pulumi make them (adoption, export,
    purge): the decoded answer, or `error` with the message and `code_field` of the body's `error` object (Google:
    status; Azure: code) on an HTTP error. No cloud SDK is a dependency."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as e:
        raw = e.read().decode(errors="replace")
        try:
            found = json.loads(raw).get("error") or {}
        except (ValueError, AttributeError):
            found = {}
        raise error(e.code, str(found.get("message") or raw[:300] or e.reason),
                    str(found.get(code_field) or "")) from None
    return json.loads(text) if text.strip() else {}


def cli_token(command: list[str], install: str, login: str) -> str:
    """The caller's access token from the cloud's own CLI (the login the Pulumi provider uses by default); a
    ConfigError saying how to install or sign in when it cannot give one."""
    if shutil.which(command[0]) is None:
        raise ConfigError([Problem("goldenenv:region", f"reaching the cloud needs the {command[0]} CLI on PATH "
                                   f"({install}), signed in: {login}")])
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0 or not done.stdout.strip():
        raise ConfigError([Problem("goldenenv:region", f"{' '.join(command[:3])} failed "
                                   f"({done.stderr.strip()[:300]}): run {login}")])
    return done.stdout.strip()


@dataclass(frozen=True)
class FunctionSource:
    """A cloud function's code as goldenenv ships it (a budget's stop function): its files, zipped for the cloud,
    and their digest, which changes with the code so the cloud picks the new code up."""

    folder: Any
    """A pathlib.Path: the folder holding the files."""
    files: tuple[str, ...]
    extra: tuple[tuple[str, Any], ...] = ()
    """Files from another folder shipped beside them: (name in the package, pathlib.Path), e.g. the stop core
    (goldenenv/clouds/stopcore.py) that every stop function imports."""

    def contents(self) -> dict[str, Any]:
        """Every file of the package: its name in the package -> its path here."""
        return {**{f: self.folder / f for f in self.files},
                **{name: type(self.folder)(path) for name, path in self.extra}}

    def archive(self) -> Any:
        import pulumi

        return pulumi.AssetArchive({name: pulumi.FileAsset(str(path)) for name, path in self.contents().items()})

    def digest(self) -> str:
        found = hashlib.sha256()
        for name, path in self.contents().items():
            found.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        return found.hexdigest()[:16]


STOP_CORE = (("stopcore.py", os.path.join(os.path.dirname(__file__), "stopcore.py")),)
"""The stop core as FunctionSource.extra: every stop function ships it beside its entry module and imports it as
``stopcore`` there."""


def zone_problems(cloud: str, spec: ClusterSpec) -> list[Problem]:
    """goldenenv:zone and goldenenv:zones that are not zones of the region, where the catalog lists them all."""
    from goldenenv import catalog

    known = catalog.zones(cloud, spec.region)
    return [Problem(key, f"'{zone}' is not a zone of {spec.region}; valid: {', '.join(known.zones)} (catalog "
                    "zones.csv)")
            for key, zone in [("goldenenv:zone", spec.zone), *(("goldenenv:zones", z) for z in spec.zones or ())]
            if zone and known and known.complete and zone not in known.zones]


def sold_problems(cloud: str, spec: ClusterSpec, instance_type: str, zone: str | None) -> list[Problem]:
    """An instance type the catalog says is not sold in the stack's region, or not in its zone (type_zones.csv);
    nothing where the catalog does not say."""
    from goldenenv import catalog

    sold = catalog.type_zones(cloud, instance_type)
    if sold and spec.region not in sold:
        return [Problem("goldenenv:region", f"{instance_type} is not sold in {spec.region} (catalog type_zones.csv); "
                        f"regions that sell it: {', '.join(sorted(sold))}")]
    if zone and sold.get(spec.region) and zone not in sold[spec.region]:
        return [Problem("goldenenv:zone", f"{instance_type} is not sold in {zone}; zones of {spec.region} that "
                        f"sell it: {', '.join(sold[spec.region])} (catalog type_zones.csv)")]
    return []


def scheduler_problems(spec: ClusterSpec) -> list[Problem]:
    """With the scheduler, `head` names the head (its resources, its host name, Slurm's SlurmctldHost): no pool
    may take that name."""
    from goldenenv import slurm

    if spec.scheduler != "slurm":
        return []
    return [Problem(f"{pool_key(i, len(spec.nodes))}.name", f"'{pool.name}' is the Slurm head's name; give the pool "
                    "another name (or set goldenenv:scheduler: none)")
            for i, pool in enumerate(spec.nodes) if pool.name == slurm.HEAD_HOSTNAME]


ROLL_NODES_ENV = "GOLDENENV_ROLL_NODES"
"""Nodes to replace onto what their pool declares now (AWS: its launch template's current version; Alibaba: the
boot script the program now gives them): `all`, pool names or node names (gpu-0), comma separated.
`goldenenv up --roll-nodes` sets it; `GOLDENENV_ROLL_NODES=all pulumi up` does the same by hand."""
DESTROYING_ENV = "GOLDENENV_DESTROYING"
"""Set while `goldenenv destroy` runs the program (`pulumi destroy --run-program`): the program then declares the
stack only for its providers and delete hooks, and refuses no lock that has stopped fitting the nodes."""


@dataclass(frozen=True)
class BuildContext:
    """What a build may know beyond the spec: the cloud's account lookups and the nodes the user asked to roll.

    `pulumi up` builds with the live context (lookups call the cloud with the user's credentials); the offline
    plan gives its own lookups, so nothing is called and tests can say what already exists.
    """

    lookup: Any = None
    """The cloud's lookups (e.g. which retained stores exist); None = live, with the caller's credentials."""
    roll_nodes: frozenset[str] = frozenset()
    """`all`, pool names or node names (pool-index) to replace onto their pool's current template or boot script."""

    @classmethod
    def from_env(cls) -> BuildContext:
        text = os.environ.get(ROLL_NODES_ENV, "")
        return cls(roll_nodes=frozenset(part.strip() for part in text.split(",") if part.strip()))

    def rolls(self, pool: str, node: str) -> bool:
        """Whether this node (pool-index) is to be replaced onto its pool's current template or boot script."""
        return bool({"all", pool, node} & self.roll_nodes)


@dataclass(frozen=True)
class NodeTemplate:
    """The template a cloud's GPU nodes are launched from and pin a version of (AWS: the EC2 launch template)."""

    type: str
    """Its type token."""
    ref: str
    """The node input naming the template's id and the version the node pins (`{id, version}`)."""
    version_output: str
    """The template output holding its current version: what a new or rolled node pins."""
    symbolic_versions: tuple[str, ...] = ()
    """Versions that name no fixed version ($Default): a node on one counts as behind its template."""
    word: str = "template"
    """What the plan calls it ("launch template")."""


@dataclass(frozen=True)
class NodeScript:
    """The boot script nodes carry themselves where they pin no template (Alibaba: the instance's user data).

    The nodes ignore changes to it unless rolled (a running node keeps the script it booted; a rolled one is replaced
    and the new node runs the new script). The engine then keeps the old script in the node's state, so the program
    records the script it would give each node now in a component output: a node is behind when the two differ.
    """

    input: str
    """The node input holding the script (engine name: userData)."""
    wanted_type: str
    """Type token of the component recording the scripts the program gives its nodes now (the node pool)."""
    wanted_output: str
    """That component's output: node resource name -> script_digest of the script the program gives it now."""
    news: Callable[[Any, Any], str] | None = None
    """What changed between two scripts (deployed, planned), in words ("the golden image moved: a -> b"); None or
    "" says only that the script changed."""
    word: str = "boot script"
    """What the plan calls it."""


def script_digest(value: Any) -> str | None:
    """The digest a NodeScript's wanted output records for a script (as the node input holds it); None for no
    script or one the state holds encrypted."""
    if not isinstance(value, str) or not value:
        return None
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True)
class NodeUpdates:
    """How a cloud's GPU nodes take a change on `up`, as the shared code (goldenenv.updates) needs it to say per
    node create / keep / update / replace and why, which nodes are behind their template or boot script, and what
    rolling does.
    Provider facts: each cloud writes down where its lists come from."""

    node_types: tuple[str, ...]
    """Type tokens of the GPU node resources (one resource per node, named <stack>-<pool>-<index>)."""
    template: NodeTemplate | None = None
    """The template the nodes pin, or None: the nodes carry their boot script and image themselves."""
    script: NodeScript | None = None
    """The boot script nodes without a template carry themselves and take only when rolled, or None."""
    replacing: frozenset[str] = frozenset()
    """Node inputs (engine names) the provider cannot change on a running node: a change replaces it (ForceNew)."""
    restarting: Mapping[str, str] = field(default_factory=dict)
    """Node inputs the provider changes in place by stopping and starting the node -> what that does, in words."""
    meaning: Mapping[str, str] = field(default_factory=dict)
    """Input -> the words plan uses for it (userData -> "userData (boot script)")."""
    erased: str = "its disks"
    """What a replacement erases ("its instance store (local NVMe scratch) and root volume")."""
    note: str = ""
    """For a plan without a prior deployment: how later changes reach running nodes."""

    def words(self, inputs: Iterable[str]) -> str:
        return ", ".join(self.meaning.get(k, k) for k in inputs)


USER_DATA_HEADROOM = 0.9
"""The share of its cloud's user data limit a shipped stack's host may take: the rest is room for what a user's
stack adds (pools, a shared file system, a longer lock) before `plan --strict` refuses it."""


@dataclass(frozen=True)
class UserDataLimit:
    """The most user data (cloud-init's #cloud-config) one host may carry on a cloud, and where and how the cloud's
    program passes it: a host over the limit is refused at `up`, often halfway through (AWS: the launch)."""

    max_bytes: int
    """Measured on the bytes the host receives, before any base64 the API asks for."""
    inputs: Mapping[str, str]
    """Type token -> the dotted input path holding a host's user data (node template, instances, head)."""
    base64: bool
    """True: the program passes it base64-encoded (the API's form); False: as text (a metadata value)."""
    source: str
    """Where the cloud documents the limit."""

    def carried(self, resource: Any) -> bytes | None:
        """The user data a planned resource carries, as the host receives it; None where it carries none."""
        path = self.inputs.get(resource.type)
        value: Any = resource.props if path else None
        for step in (path or "").split("."):
            value = value.get(step) if isinstance(value, Mapping) else None
        if not isinstance(value, str) or not value:
            return None
        return base64.b64decode(value) if self.base64 else value.encode()


def user_data_rule(limit: UserDataLimit, prefix: str = "") -> Any:
    """The readiness rule (`plan --strict`) every cloud runs on its own limit: each host's user data fits. Its id
    is strict:<prefix>user-data-size (prefix: the cloud's own, as its other rules have)."""
    from goldenenv.guardrails import Rule, Severity

    def check(resource: Any, ctx: Any) -> Iterable[str]:
        data = limit.carried(resource)
        if data is not None and len(data) > limit.max_bytes:
            yield (f"{resource.type.rsplit(':', 1)[-1]} '{resource.name}' carries {len(data):,} bytes of user data"
                   f"{' (before base64)' if limit.base64 else ''}; the cloud takes at most {limit.max_bytes:,} "
                   f"({limit.source}); the host would not launch: shorten the boot templates it renders "
                   "(templates/node/)")

    return Rule(f"strict:{prefix}user-data-size", f"Each host's user data fits the cloud's {limit.max_bytes:,} bytes.",
                Severity.ERROR, check)


COMPONENT_PACKAGE = "goldenenv"
"""goldenenv's components are typed goldenenv:<cloud>:<Kind> (goldenenv:aws:GpuCluster): the cloud is in the token."""


def cloud_of(type_tokens: Iterable[str]) -> str | None:
    """The registered cloud these type tokens (a plan's or a checkpoint's) come from, or None: the one its
    components name (goldenenv:<cloud>:<Kind>), else a cloud named like a provider package among them
    (aws:ec2/instance:Instance, pulumi:providers:aws)."""
    tokens = list(type_tokens)
    for token in tokens:
        package, _, rest = token.partition(":")
        if package == COMPONENT_PACKAGE and rest.partition(":")[0] in _REGISTRY:
            return rest.partition(":")[0]
    for token in tokens:
        package, _, rest = token.partition(":")
        name = rest.rpartition(":")[2] if token.startswith("pulumi:providers:") else package
        if name in _REGISTRY and name != COMPONENT_PACKAGE:
            return name
    return None


def node_updates(cloud: str | None) -> NodeUpdates | None:
    """The named cloud's node update facts; None for no cloud, an unknown one, or one without GPU node resources."""
    if not cloud or cloud not in _REGISTRY:
        return None
    return get(cloud).node_updates


class Cloud(Protocol):
    """Everything a cloud provides; plan, lifecycle, automation and the CLI ask only this, never getattr.

    Every cloud class subclasses CloudDefaults (a Pulumi cloud through PulumiCloud), which gives each hook below
    its documented default; a cloud overrides only what it does differently. REQUIRED_HOOKS names the hooks that
    have no default: what a cloud must write itself.
    """

    name: str
    capabilities: frozenset[Capability]
    uses_pulumi: bool
    """False: goldenenv provisions it itself (planned_resources, up, destroy); True: a Pulumi program (build)."""

    def check(self, spec: ClusterSpec) -> list[Problem]:
        """Cloud-specific rules beyond capabilities (currency, region names, instance types, limits ...)."""

    def build(self, spec: ClusterSpec, context: BuildContext) -> dict[str, Any]:
        """Declare the cluster's resources; return the stack outputs (values or Outputs). Required of a cloud
        built by a Pulumi program."""

    def planned_resources(self, spec: ClusterSpec) -> list:
        """What `goldenenv up` creates, in the plan's terms (guardrails.PlannedResource), for a cloud goldenenv
        provisions itself (uses_pulumi False); required of such a cloud, never asked of a Pulumi one."""

    def own_cluster(self, spec: ClusterSpec, client: Any = None) -> OwnCluster:
        """The stack's cluster on a cloud goldenenv provisions itself, on the Docker engine `client` (None: this
        machine's): what up, destroy, run, validate, health, the drills and the queue commands drive there. Required
        of such a cloud; a Pulumi cloud's stacks are driven through Pulumi, and the default says so."""

    def offline_lookup(self, spec: ClusterSpec) -> Any:
        """What the offline plan knows of the account (nothing exists, a placeholder account)."""

    def plan_mock(self, args: Any) -> tuple[str | None, dict[str, Any]] | None:
        """Computed outputs the cloud would return for a new resource (ids, addresses, URLs) over its inputs, and
        its id (None: `<name>-id`); None for the generic mock. `args` is pulumi.runtime.MockResourceArgs. Values
        depend on the resource alone (stable_number, mock_address), never on registration order."""

    def plan_call(self, args: Any) -> dict[str, Any] | None:
        """The answer to a provider function (data source) under the offline plan, or None (empty)."""

    def plan_notes(self, spec: ClusterSpec, costs: list) -> list[str]:
        """What a user should know before renting on this cloud (account steps, billing lags, idle rules)."""

    def readiness(self, resources: list, required_tags: dict[str, str]) -> list:
        """Deploy-readiness findings (`plan --strict`): the provider's limits the mocks cannot see."""

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        """What `destroy` does before deleting anything, in words for the plan."""

    def preflight(self, spec: ClusterSpec) -> None:
        """Raise RuntimeError saying how to fix it when the caller has no credentials for this cloud."""

    def before_up(self, spec: ClusterSpec, log: Callable[[str], None]) -> Any:
        """Find and prepare what `up` adopts (retained stores)."""

    def before_destroy(self, spec: ClusterSpec, outputs: dict[str, Any], skip_export: bool,
                       log: Callable[[str], None]) -> None:
        """Save what destroy would lose (export the parallel FS); raise RuntimeError to stop the destroy."""

    def purge(self, spec: ClusterSpec, outputs: dict[str, Any], log: Callable[[str], None]) -> list[str]:
        """Delete the retained stores by name (--purge-data); return their names."""

    def node_hosts(self, spec: ClusterSpec, outputs: dict[str, Any], user: str,
                   by: HostsBy = HostsBy.PRIVATE_IP) -> list[str]:
        """testinfra hosts (ssh://user@address) of the stack's nodes, from its outputs, addressed `by`."""

    def head_host(self, spec: ClusterSpec, outputs: dict[str, Any], user: str,
                  by: HostsBy = HostsBy.PRIVATE_IP) -> str | None:
        """The Slurm head's ssh target (ssh://user@address) from the stack's outputs, addressed `by` like the
        nodes; None when the stack has no head (goldenenv:scheduler none, or not deployed)."""

    def describe(self, resource: Any) -> list[str]:
        """The words the plan tree shows for one planned resource: key properties, RDMA interfaces ..."""

    key_props: dict[str, tuple[str, ...]]
    """Type token -> the dotted input paths the plan tree shows (what the default describe reads)."""

    def quota_lines(self, asks: Sequence[VcpuAsk], region: str) -> list[str]:
        """What to ask for when a quota stops `up`: the vCPUs the pools need, by quota name where the cloud knows."""

    destroy_runs_program: bool
    """Whether `goldenenv destroy` runs the program (`pulumi destroy --run-program`): needed when resources carry
    delete hooks, which run in the program."""

    registry_types: tuple[str, ...]
    """Type-token prefixes of the stack's image repository and its parts, which `image push -s` creates first (a
    targeted up); (): the cloud has no registry of its own."""

    def registry_url(self, spec: ClusterSpec) -> str:
        """The stack's repository as `image push -s` pushes to it from the caller's machine (<host>/<path>)."""

    def registry_pulled_as(self, spec: ClusterSpec, url: str) -> str:
        """The same repository as the stack's nodes name it, which the pushed digest is recorded under: `url`
        itself, or its private endpoint (Alibaba's VPC domain)."""

    def registry_auth(self, spec: ClusterSpec, registry: str) -> dict | None:
        """Docker credentials for the registry host, from the caller's cloud login: {username, password,
        registry}; None: an anonymous push."""

    def destroy_hints(self, spec: ClusterSpec, outputs: dict[str, Any], error: str) -> list[str]:
        """What to do about a destroy that failed part way, read from the provider's error."""

    data_bearing: dict[str, str]
    """Resource kinds whose deletion loses data a user may care about -> what happens to it (plan says)."""
    placeholder_account: str | None
    """The account the offline plan writes in names, or None."""
    store_kinds: tuple[str, ...]
    """Kinds of the retained stores plan names as kept on destroy (bucket, repository, volume)."""
    ssh_user: str
    """The login of the cloud's host images, for `validate` over ssh://."""

    def node_login(self, spec: ClusterSpec, pool: Any | None) -> NodeLogin:
        """How a user logs in to the pool's nodes (pool None: the Slurm head) and reaches Docker there."""

    def spot_return(self, spec: ClusterSpec, pool: Any) -> SpotReturn:
        """How the pool's spot nodes come back after the cloud evicts or reclaims them."""

    def stopped_nodes(self, spec: ClusterSpec) -> StoppedNodes | None:
        """The stack's stopped nodes as the cloud answers with the caller's credentials (what `up` starts); None:
        the cloud leaves none stopped for `up` to start."""

    def file_system_client(self, spec: ClusterSpec) -> str | None:
        """The file-system client the stack's nodes mount its shared file system with (fsx-lustre, gcp-lustre,
        amlfs-lustre, cpfs, nfs): a host need the host layer provides (goldenenv.images.host); None without one."""

    node_updates: NodeUpdates | None
    """How its GPU nodes take a change on `up` (what plan says an up keeps, updates or replaces), or None."""
    head_instance_type: str | None
    """The Slurm head's default instance type (a small on-demand CPU type the catalog prices: head_types.csv); None:
    the cloud runs no head of its own."""
    slurmd_timeout: int
    """slurm.conf SlurmdTimeout on this cloud, seconds."""
    user_data_limit: UserDataLimit | None
    """The most user data a host takes, and where the program passes it; None: no host boots from user data."""
    reaches_nodes_by: NodeReach
    """How the node commands reach the stack's nodes and head: over ssh, or as containers on this machine."""
    shared_folder: str | None
    """A folder the nodes and head share on every stack of the cloud, where jobs keep their scripts, output,
    checkpoints and code; None: the stack's storage says (its parallel file system, else each node's scratch)."""
    host_image_form: HostImageForm | None
    """How a pool's own host image (hostImage: {id, driver}) or a baked one is written on the cloud; None: its
    hosts take no image id of the user's."""


def key_words(resource: Any, key_props: dict[str, tuple[str, ...]]) -> list[str]:
    """`prop=value` for the dotted input paths listed for the resource's type, when set."""
    parts = []
    for path in key_props.get(resource.type, ()):
        value = resource.props
        for step in path.split("."):
            value = value.get(step) if isinstance(value, dict) else None
        if value not in (None, "", []):
            parts.append(f"{path.rsplit('.', 1)[-1]}={value}")
    return parts


@dataclass(frozen=True)
class VcpuAsk:
    """What one pool asks a cloud's vCPU quota for: its nodes of a type, on a capacity type (market)."""

    pool: str
    instance_type: str
    count: int
    vcpus: int
    """Per node."""
    market: str


def vcpu_lines(asks: Sequence[VcpuAsk], region: str) -> list[str]:
    """How many vCPUs the pools ask for, where a cloud knows no more than that of its quotas."""
    total = sum(a.count * a.vcpus for a in asks)
    nodes = " + ".join(f"{a.pool}: {a.count} x {a.instance_type}" for a in asks)
    return [f"the cluster asks for {total} vCPU{f' in {region}' if region else ''}: {nodes}"] if asks else []


REQUIRED_HOOKS = {True: ("name", "build"), False: ("name", "planned_resources", "own_cluster")}
"""The hooks of the Cloud protocol a cloud must write, by uses_pulumi: a Pulumi cloud declares its resources
(build), a cloud goldenenv provisions itself lists them (planned_resources) and drives them (own_cluster, whose
default only refuses). Every other hook has its default in CloudDefaults."""
HOOKS_OF_A_CAPABILITY: dict[Capability, tuple[str, ...]] = {
    Capability.SPOT: ("spot_return",),
    Capability.PARALLEL_FS: ("file_system_client",),
}
"""What a cloud that declares a capability must say itself: how its evicted spot nodes come back (the default says
they do not), which client mounts its parallel file system (the host layer installs it)."""
HOOKS_OF_A_REPOSITORY = ("registry_url", "registry_auth")
"""What a cloud whose stacks have an image repository of their own (registry_types) must say itself: where `image
push -s` pushes and with which login. Without them the push created the repository, then crashed."""
HOOKS_OF_RETAINED_STORES = ("before_up", "purge")
"""What a cloud that keeps stores across destroy (store_kinds) must say itself: how `up` adopts them again, how
--purge-data deletes them."""


def hooks_required(cloud: Cloud) -> tuple[str, ...]:
    """The hooks a cloud must write itself, from what it declares: REQUIRED_HOOKS, and those of its capabilities,
    its image repository and its retained stores."""
    needed = [*REQUIRED_HOOKS[cloud.uses_pulumi]]
    needed += [hook for capability in cloud.capabilities for hook in HOOKS_OF_A_CAPABILITY.get(capability, ())]
    needed += [*HOOKS_OF_A_REPOSITORY] if cloud.registry_types else []
    needed += [*HOOKS_OF_RETAINED_STORES] if cloud.store_kinds and cloud.uses_pulumi else []
    return tuple(dict.fromkeys(needed))


class CloudDefaults:
    """Every hook of the Cloud protocol with its default, which a cloud overrides where it does otherwise: no
    capabilities, nothing to adopt, export or purge, no extra notes or readiness rules, no image repository, no
    head of its own, no user data. The contract tests hold each registered cloud to the protocol through it."""

    name = ""
    capabilities: frozenset[Capability] = frozenset()
    uses_pulumi = True
    key_props: dict[str, tuple[str, ...]] = {}
    """Type token -> the input paths the plan tree shows."""
    data_bearing: dict[str, str] = {}
    placeholder_account: str | None = None
    store_kinds: tuple[str, ...] = ()
    ssh_user = "ubuntu"
    """The login of the cloud's host images, for `validate` over ssh://."""
    node_updates: NodeUpdates | None = None
    """How its GPU nodes take a change on `up`; None: plan says nothing per node."""
    head_instance_type: str | None = None
    slurmd_timeout = slurm.SLURMD_TIMEOUT_S
    user_data_limit: UserDataLimit | None = None
    reaches_nodes_by = NodeReach.SSH
    shared_folder: str | None = None
    host_image_form: HostImageForm | None = None
    destroy_runs_program = False
    """Whether `goldenenv destroy` runs the program (`pulumi destroy --run-program`): needed when resources carry
    delete hooks, which run in the program."""

    def check(self, spec: ClusterSpec) -> list[Problem]:
        return []

    def offline_lookup(self, spec: ClusterSpec) -> Any:
        return None

    def plan_mock(self, args: Any) -> tuple[str | None, dict[str, Any]] | None:
        return None

    def plan_call(self, args: Any) -> dict[str, Any] | None:
        return None

    def plan_notes(self, spec: ClusterSpec, costs: list) -> list[str]:
        return []

    def readiness(self, resources: list, required_tags: dict[str, str]) -> list:
        return []

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        return []

    def preflight(self, spec: ClusterSpec) -> None:
        return None

    def before_up(self, spec: ClusterSpec, log: Callable[[str], None]) -> Any:
        return None

    def before_destroy(self, spec: ClusterSpec, outputs: dict[str, Any], skip_export: bool,
                       log: Callable[[str], None]) -> None:
        return None

    def purge(self, spec: ClusterSpec, outputs: dict[str, Any], log: Callable[[str], None]) -> list[str]:
        return []

    def node_login(self, spec: ClusterSpec, pool: Any | None) -> NodeLogin:
        """The host image's user with the stack's key, reaching Docker through sudo (cloud images give their
        default user passwordless sudo; the docker group only where the host image says so)."""
        return NodeLogin(self.ssh_user, DockerReach.SUDO, f"ssh as {self.ssh_user} with nodes.sshPublicKey")

    def spot_return(self, spec: ClusterSpec, pool: Any) -> SpotReturn:
        """No way back declared: a cloud with Capability.SPOT must say how its evicted nodes return."""
        return SpotReturn(())

    def stopped_nodes(self, spec: ClusterSpec) -> StoppedNodes | None:
        return None

    def file_system_client(self, spec: ClusterSpec) -> str | None:
        return None

    def node_hosts(self, spec: ClusterSpec, outputs: dict[str, Any], user: str,
                   by: HostsBy = HostsBy.PRIVATE_IP) -> list[str]:
        """ssh://user@<private IP> or ssh://user@<instance id>, one per node in output order (node-0 first): the
        one place a cloud stack's hosts are named for validate and run. The user is percent-encoded: an Entra ID
        login (a UPN) holds an `@`."""
        return [f"ssh://{ssh_user_part(user)}@{address}" for address in outputs.get(HOST_OUTPUTS[HostsBy(by)]) or []]

    def head_host(self, spec: ClusterSpec, outputs: dict[str, Any], user: str,
                  by: HostsBy = HostsBy.PRIVATE_IP) -> str | None:
        """ssh://user@<head private IP> or ssh://user@<head instance id>, by the same rules as node_hosts: the one
        place a cloud stack's head is named for submit, jobs, logs and cancel."""
        address = outputs.get(HEAD_OUTPUTS[HostsBy(by)])
        return f"ssh://{ssh_user_part(user)}@{address}" if address else None

    def describe(self, resource: Any) -> list[str]:
        return key_words(resource, self.key_props)

    registry_types: tuple[str, ...] = ()

    def registry_url(self, spec: ClusterSpec) -> str:
        raise RuntimeError(f"{self.name} stacks have no image repository of their own: push with --registry")

    def registry_pulled_as(self, spec: ClusterSpec, url: str) -> str:
        return url

    def registry_auth(self, spec: ClusterSpec, registry: str) -> dict | None:
        return None

    def destroy_hints(self, spec: ClusterSpec, outputs: dict[str, Any], error: str) -> list[str]:
        return []

    def quota_lines(self, asks: Sequence[VcpuAsk], region: str) -> list[str]:
        """What to ask for when a quota stops `up`: the vCPUs the pools need (a cloud that knows its quotas by name
        says which)."""
        return vcpu_lines(asks, region)

    def own_cluster(self, spec: ClusterSpec, client: Any = None) -> OwnCluster:
        """Refused: the stack is driven through Pulumi (a cloud goldenenv provisions itself writes its own)."""
        raise ConfigError([Problem("goldenenv:cloud", f"this step runs on the local cloud; {spec.stack} is on "
                                   f"{spec.cloud}: use goldenenv up/destroy, which drive Pulumi")])


class PulumiCloud(CloudDefaults):
    """A cloud built by a Pulumi program (its build declares the resources), with CloudDefaults' defaults."""

    uses_pulumi = True


def ssh_user_part(user: str) -> str:
    """A login as the user part of an ssh:// host: percent-encoded (alice%40contoso.com), as testinfra and
    remote.Host read it back."""
    import urllib.parse

    return urllib.parse.quote(user, safe="")


def stable_number(text: str) -> int:
    """A number for a mock value that depends on the resource alone, not on the order resources register in
    (which varies from run to run): the same plan twice is the same plan."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def mock_address(name: str) -> str:
    """A private address for node `<pool>-<index>`: unique within a pool, stable across plans."""
    base, _, index = name.rpartition("-")
    i = int(index) if index.isdigit() else stable_number(name) % 200
    return f"10.42.{stable_number(base) % 200 + i // 200}.{10 + i % 200}"


_REGISTRY: dict[str, Callable[[], Cloud]] = {}


def register(name: str, factory: Callable[[], Cloud]) -> None:
    _REGISTRY[name] = factory


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> Cloud:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, names(), n=1)
        hint = f" — did you mean {close[0]}?" if close else f"; available: {', '.join(names())}"
        raise ConfigError([Problem("goldenenv:cloud", f"'{name}' is not a cloud goldenenv supports{hint}")])
    return _REGISTRY[name]()


def required_capabilities(spec: ClusterSpec) -> dict[Capability, str]:
    """What the spec asks of its cloud, each with the key that asks it."""
    needs: dict[Capability, str] = {}
    for i, pool in enumerate(spec.nodes):
        at = pool_key(i, len(spec.nodes))
        if pool.rdma:
            needs[Capability.RDMA] = f"{at}.{pool.rdma_key}"
        key = f"{at}.capacityFallback" if pool.capacity_fallback else f"{at}.capacity"
        for capacity in pool.capacities:
            if capacity.value in Capability._value2member_map_:
                needs[Capability(capacity.value)] = key
    if spec.zones:
        needs[Capability.ZONE_FAILOVER] = "goldenenv:zones"
    if spec.storage.parallel_fs.enabled and "parallelFs" in spec.storage.model_fields_set:
        needs[Capability.PARALLEL_FS] = "goldenenv:storage.parallelFs"
    if spec.budget is not None:
        needs[Capability.BUDGET] = "goldenenv:budget"
        if spec.budget.hard_stop:
            needs[Capability.HARD_STOP] = "goldenenv:budget.hardStop"
    return needs


def clouds_that_can(capability: Capability) -> str:
    """The clouds that provide a capability, in words. A cloud whose provider is not installed (its extra) is named
    apart: its class, and so what it can do, comes with the provider (the registry raises ProviderMissing, a
    ConfigError, for it)."""
    can, absent = [], []
    for name in names():
        try:
            if capability in get(name).capabilities:
                can.append(name)
        except ConfigError:
            absent.append(name)
    said = "clouds that can: " + (", ".join(can) or ("none of those installed" if absent else "none yet"))
    if absent:
        said += f"; not installed, so not asked: {', '.join(absent)} (./scripts/setup.sh --cloud NAME adds one)"
    return said


def validate(spec: ClusterSpec) -> Cloud:
    """The spec's cloud, once the spec asks nothing of it that it cannot do."""
    cloud = get(spec.cloud)
    problems = [
        Problem(key, f"{cloud.name} cannot provide {cap.value}; {clouds_that_can(cap)}")
        for cap, key in required_capabilities(spec).items()
        if cap not in cloud.capabilities
    ]
    problems += scheduler_problems(spec) + cloud.check(spec)
    if problems:
        raise ConfigError(problems)
    return cloud
