"""Cloud-neutral description of a training cluster, validated once.

Field names are snake_case in Python and camelCase in stack files (the alias), so an error
can name the key exactly as the user wrote it. Rules that need the catalog or a cloud's
capabilities live in stackconfig.py and clouds/; this module knows only shapes and ranges.

Every text field that can reach a shell script, cloud-init, an env file, a Dockerfile or an IAM
policy has a pattern. `Field(pattern=...)` runs pydantic-core's Rust regex, whose `$` is the very
end of the text (unlike Python's `re`, where `$` also matches before a trailing newline), so
"us-east-1\n" fails `^...$` there; checks written with Python's `re` use `fullmatch`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import Enum
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AliasChoices, BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, PrivateAttr, ValidationInfo,
    field_validator, model_validator,
)
from pydantic.alias_generators import to_camel

from goldenenv import catalog, sshkeys
from goldenenv.netmath import describe_wide
from goldenenv.shown import as_written

STACK_TAG_KEY = "goldenenv:stack"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a stack's configuration, at the key the user wrote."""

    key: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", one_line(self.key))
        object.__setattr__(self, "message", one_line(self.message))

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


def one_line(text: str) -> str:
    """User text echoed into a message must not break it across lines: escape controls and line breaks."""
    return "".join(repr(c)[1:-1] if ord(c) < 32 or c in _BREAKS else c for c in text)


_BREAKS = "\x7f\x85\u2028\u2029"


def pool_key(index: int, pools: int) -> str:
    """The config key of one node pool: no index when the stack has a single pool."""
    return "goldenenv:nodes" if pools == 1 else f"goldenenv:nodes[{index}]"


FLAG_KEYS, STATE_KEYS = "flags", "state"
"""What a ConfigError's problems are about besides the stack file: a command's flags (keys `--name`), or the stack's
state (keys `stack NAME`)."""


class ConfigError(Exception):
    """Bad stack configuration; each problem names its key and what would be valid."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

    @property
    def heading(self) -> str:
        """How a command heads the problems, by what they are about: a flag the command was given (a key such as
        `--nodes`), the cluster's state (`stack dev`: not up yet), else the stack file (`invalid stack configuration
        in stacks/Pulumi.dev.yaml`)."""
        return {FLAG_KEYS: "invalid option", STATE_KEYS: "the stack is not ready for this"}.get(
            self.about, "invalid stack configuration")

    @property
    def about(self) -> str:
        """FLAG_KEYS when every problem is about a flag, STATE_KEYS when every one is about the cluster's state, else
        the stack file ("file")."""
        kinds = {FLAG_KEYS if p.key.startswith("--") else STATE_KEYS if p.key.startswith("stack ") else "file"
                 for p in self.problems}
        return kinds.pop() if len(kinds) == 1 else "file"

    source: object = None
    """The file the problems are in, when it is not the one the command read (a stack's lock)."""


class LockError(ConfigError):
    """A bad image lock (images/<name>/lock.yaml): headed `invalid lock`, with its file, wherever it is found."""

    heading = "invalid lock"

    def __init__(self, problems: list[Problem], source: object = None):
        super().__init__(problems)
        self.source = source


def number_kinds(annotation: Any) -> set[type]:
    """The number types (int, float) a field holds and never a yes/no: int or float, optional or constrained; an
    empty set for text, a model, or a field that also takes bool."""
    kinds = _plain(annotation)
    return set() if bool in kinds else {int, float} & set(kinds)


def _yes_no_where_a_number(value: Any, annotation: Any) -> set[type]:
    """The number kinds a field expects where `value` has a bool (in a list's items too); empty when none."""
    if isinstance(value, bool):
        return number_kinds(annotation)
    if isinstance(value, (list, tuple)):
        items = {a for t in _plain(annotation) if typing.get_origin(t) in (list, tuple) for a in typing.get_args(t)[:1]}
        return {k for v in value for a in items for k in _yes_no_where_a_number(v, a)}
    return set()


def _plain(annotation: Any) -> list[Any]:
    """The types a field's annotation may be, Annotated and unions taken apart."""
    if typing.get_origin(annotation) is Annotated:
        return _plain(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _plain(arg)]
    return [annotation]


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    @field_validator("*", mode="before")
    @classmethod
    def _a_yes_no_is_not_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML's true/false are not numbers: pydantic would read `ttlHours: true` as 1 hour, `count: true` as one
        node, `alertThresholds: [true]` as 100 %."""
        field = cls.model_fields.get(info.field_name or "")
        kinds = _yes_no_where_a_number(value, field.annotation) if field is not None else set()
        if kinds:
            from goldenenv import inwords

            what = inwords.number_range(inwords.bounds(field.metadata), float not in kinds) if \
                isinstance(value, bool) else "numbers"
            raise ValueError(f"true and false are a yes/no, not a number; write {what} in digits")
        return value


class Capacity(str, Enum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    CAPACITY_RESERVATION = "capacity-reservation"
    CAPACITY_BLOCK = "capacity-block"
    """An EC2 Capacity Block for ML the user bought (a reservation with an end time): bought outside `up`, since a
    purchase cannot be cancelled."""

    @property
    def reserved(self) -> bool:
        """Capacity held by a reservation the pool names (capacityReservationId)."""
        return self in (Capacity.CAPACITY_RESERVATION, Capacity.CAPACITY_BLOCK)


Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")]

Location = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,39}$")]
"""A region or zone name as clouds write them (us-east-1, us-east-1a, cn-hangzhou-i, local)."""

InstanceType = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
"""p5.48xlarge, ecs.gn7i-c8g1.2xlarge, container: whether the catalog knows it is stackconfig's check."""

MountPoint = Annotated[str, Field(
    pattern=r"^(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)+$", max_length=255,
    description="an absolute path such as /fsx: a / before each part, parts of letters, digits and _ . - not "
                "starting with a dot, no / at the end")]
"""An absolute path of plain segments: nothing a shell could read, no `.` or `..` segment, no trailing slash."""


DriverVersion = Annotated[str, Field(pattern=r"^\d{3}\.\d{1,3}(\.\d{1,3})?$",
                                     description="an NVIDIA driver version such as 570.133.20 or 570.86")]


class HostImageOverride(Model):
    """A host image of the user's own: its id and the NVIDIA driver it carries (the lock is checked against it)."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")
    driver: DriverVersion
    kernel_modules: list[Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")]] = Field(default=[], max_length=32)
    """The kernel modules the image carries that the pool's fabric needs (as lsmod names them: import_helper), the
    stack's statement in place of the catalog's host_images kernel_modules."""
    os: str | None = Field(default=None, pattern=r"^(ubuntu|debian)-\d+(\.\d+)?$",
                           description="an OS family and release such as ubuntu-22.04 or debian-12")
    """The image's OS family as the host lock names them (ubuntu-22.04): the install step then provides on it what
    the host lock pins and the image is not stated to carry. None: the image is the stack's statement that it has
    the engine, the toolkit and the file-system client."""


class NodePool(Model):
    """Identical nodes in one zone, placed together so their fabric is fast."""

    name: Name = "gpu"
    instance_type: InstanceType
    count: int = Field(ge=1, le=2048)
    capacity: Capacity = Capacity.ON_DEMAND
    """The capacity type the pool's nodes run on; with capacityFallback, the one `up` got (it records it here)."""
    capacity_fallback: list[Capacity] | None = Field(default=None, min_length=1, max_length=4)
    """The capacity types `up` may use, in order, when the cloud has none of one (a capacity error): e.g.
    [spot, on-demand]. `capacity` is one of them. None: `capacity` only."""
    capacity_reservation_id: str | None = Field(
        default=None, pattern=r"^(cr-[0-9a-f]{8,17}|[a-z]([-a-z0-9]{0,61}[a-z0-9])?)$", validate_default=True,
        description="an EC2 reservation id such as cr-0123456789abcdef0, or a Google Cloud reservation's name "
                    "(lower-case letters, digits and -, starting with a letter, at most 63 characters)")
    """The reservation the pool consumes: an EC2 id (cr-...), or a Google Cloud reservation's name; which form a
    cloud takes is its check."""
    rdma: bool | None = Field(default=None, validation_alias=AliasChoices("rdma", "efa"))
    """RDMA interfaces on every node (EFA on AWS, eRDMA on Alibaba Cloud): None = use them when the instance type
    has them. Stack files may still write its first name, `efa`."""
    root_volume_gib: int = Field(default=200, ge=50, le=16384)
    price_per_hour: float | None = Field(default=None, gt=0, le=100_000, allow_inf_nan=False)
    """Your price per node-hour, in the cloud's catalog currency: for a type the catalog does not price (the cost
    gate refuses a budgeted stack it cannot price) or a rate you negotiated. None: the catalog's price."""
    host_image: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,63}$")] | HostImageOverride | None = None
    """A host image from the catalog by name, or {id, driver}; None = the catalog's newest for the cloud."""
    ssh_public_key: str | None = None
    """The OpenSSH public key (one .pub line: ssh-ed25519 AAAA... comment) the pool's nodes take for ssh logins, as
    the cloud's key pair; None = no key, the nodes are reached through the cloud's session service only (SSM,
    Cloud Assistant). Which types a cloud imports is its check; messages never quote the value (goldenenv.sshkeys)."""

    _rdma_key: str = PrivateAttr(default="rdma")

    @model_validator(mode="wrap")
    @classmethod
    def _remember_rdma_key(cls, data: object, handler: ModelWrapValidatorHandler[NodePool]) -> NodePool:
        if isinstance(data, dict) and "efa" in data and "rdma" in data:
            raise ValueError("rdma and efa (its old name) are both set; keep rdma")
        pool = handler(data)
        if isinstance(data, dict) and "efa" in data:
            pool._rdma_key = "efa"
        return pool

    @property
    def rdma_key(self) -> str:
        """The pool's RDMA key as its stack file writes it (`rdma`, or the older `efa`): messages name it."""
        return self._rdma_key

    @field_validator("ssh_public_key")
    @classmethod
    def _openssh_public_key(cls, v: str | None) -> str | None:
        return None if v is None else sshkeys.parse(v).line

    @property
    def ssh_key(self) -> sshkeys.PublicKey | None:
        """The pool's public key, read (its type and fingerprint name it in messages), or None."""
        return sshkeys.parse(self.ssh_public_key) if self.ssh_public_key else None

    @field_validator("capacity_fallback")
    @classmethod
    def _fallback_holds_capacity(cls, v: list[Capacity] | None, info: ValidationInfo) -> list[Capacity] | None:
        if v is None:
            return v
        if len(set(v)) != len(v):
            raise ValueError("a capacity type is listed twice; list each once, in the order to try")
        capacity = info.data.get("capacity")
        if capacity is not None and capacity not in v:
            raise ValueError(f"capacity '{capacity.value}' is not in the list; capacity is the type in use and "
                             f"must be one of {', '.join(c.value for c in v)}")
        return v

    @field_validator("capacity_reservation_id")
    @classmethod
    def _matches_capacity(cls, v: str | None, info: ValidationInfo) -> str | None:
        capacities = info.data.get("capacity_fallback") or [info.data.get("capacity")]
        reserved = [c for c in capacities if c is not None and c.reserved]
        if reserved and not v:
            raise ValueError(f"capacity '{reserved[0].value}' needs a reservation id here (cr-... on AWS, the "
                             "reservation's name on Google Cloud)")
        if v and not reserved and None not in capacities:
            raise ValueError(
                f"a reservation id goes with capacity 'capacity-reservation' or 'capacity-block', not "
                f"'{capacities[0].value}': change capacity or drop the id"
            )
        return v

    @property
    def capacities(self) -> tuple[Capacity, ...]:
        """The capacity types `up` may use, in the order to try: capacityFallback, or `capacity` alone."""
        return tuple(self.capacity_fallback or (self.capacity,))


MAX_ADMIN_CIDRS = 50
"""Network.admin_cidrs' limit: one inbound rule each in a security group of 60."""


class Network(Model):
    cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.42.0.0/16")
    admin_cidrs: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = Field(default=[], max_length=MAX_ADMIN_CIDRS)
    """Extra networks (VPN, office) allowed to reach the nodes on SSH; access is otherwise SSM only.

    Their union may hold no public block wider than an IPv4 /8 or an IPv6 /32 (netmath.WIDEST_PUBLIC_PREFIX:
    a /8 is the largest block ever given to one organisation, a /32 a whole ISP's allocation; an office is a
    /24 or a /48). Private and documentation ranges do not count. The union is judged, not each entry:
    0.0.0.0/1 and 128.0.0.0/1 together are the whole internet. At most 50: each is one inbound rule of the node
    security group, which holds 60 and needs a few of its own."""
    egress: Literal["nat", "endpoints"] = "nat"
    """nat: NAT gateway for outbound traffic; endpoints: no internet path, VPC endpoints only."""

    @field_validator("cidr", mode="before")
    @classmethod
    def _cidr_is_text(cls, v: object) -> object:
        """ipaddress reads a number (and a boolean) as an address: false would be 0.0.0.0/32."""
        if not isinstance(v, (str, ipaddress.IPv4Network)):
            raise ValueError(f"write a private network as text, e.g. 10.42.0.0/16; got {as_written(v)}")
        return v

    @field_validator("cidr")
    @classmethod
    def _cidr_size(cls, v: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not 16 <= v.prefixlen <= 24:
            raise ValueError(f"{v} is /{v.prefixlen}; use a /16 to /24 private range, e.g. 10.42.0.0/16")
        if not v.is_private:
            raise ValueError(f"{v} is not a private range; use e.g. 10.42.0.0/16")
        return v

    @field_validator("admin_cidrs", mode="before")
    @classmethod
    def _networks(cls, v: object) -> object:
        """One clear message for text that is no network, rather than one per IP version; too many are refused before
        any is parsed."""
        if isinstance(v, list) and len(v) > MAX_ADMIN_CIDRS:
            raise ValueError(f"{len(v):,} networks; at most {MAX_ADMIN_CIDRS} (each is one inbound rule of the node "
                             "security group, which holds 60 and needs a few of its own)")
        for item in v if isinstance(v, list) else ():
            if not isinstance(item, str):
                raise ValueError(f"{as_written(item)}: write a network as text, such as 203.0.113.0/24")
            try:
                ipaddress.ip_network(item)
            except (TypeError, ValueError) as e:
                reason = f"{item} has host bits set" if "host bits" in str(e) else "not an IPv4 or IPv6 network"
                raise ValueError(f"{item!r}: {reason}; write a network such as 203.0.113.0/24") from None
        return v

    @field_validator("admin_cidrs")
    @classmethod
    def _not_public_space(cls, v: list) -> list:
        why = describe_wide(v)
        if why:
            raise ValueError(
                f"these networks {why}, so SSH would be open to a large part of the internet; name your VPN or "
                "office range (e.g. 203.0.113.0/24) or leave adminCidrs empty and connect through SSM"
            )
        return v


class ObjectStore(Model):
    bucket_name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    """None = derived from project and stack; the bucket survives destroy either way."""
    noncurrent_version_days: int = Field(default=30, ge=1, le=3650)
    """Old versions of overwritten checkpoints are expired after this many days."""


_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*"
Prefix = Annotated[str, Field(
    pattern=rf"^{_SEGMENT}(/{_SEGMENT})*/?$", max_length=255,
    description="a folder such as datasets/ or team/run-1/: parts of letters, digits, _ and - (a dot only inside a "
                "part) joined by /")]
"""A folder in the bucket and on the shared file system: plain path segments, nothing a shell could read."""


class ParallelFs(Model):
    """The shared file system linked to the bucket. Sizes and throughput tiers are the cloud's (its check says
    what is offered: FSx for Lustre on AWS, CPFS / NAS on Alibaba)."""

    enabled: bool = True
    size_gib: int = Field(default=1200, ge=1, le=2_400_000)
    throughput_per_tib: int = Field(default=250, ge=1, le=100_000)
    dataset_prefix: Prefix = "datasets/"
    checkpoint_prefix: Prefix = "checkpoints/"
    mount_point: MountPoint = "/fsx"


class LocalNvme(Model):
    raid0: bool = True
    mount_point: MountPoint = "/scratch"


class Storage(Model):
    bucket: ObjectStore = ObjectStore()
    parallel_fs: ParallelFs = ParallelFs()
    local_nvme: LocalNvme = LocalNvme()


_DNS_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
Email = Annotated[str, Field(
    pattern=rf"^[A-Za-z0-9][A-Za-z0-9._%+-]{{0,63}}@({_DNS_LABEL}\.)+[A-Za-z]{{2,63}}$", max_length=254,
    description="a plain e-mail address such as ml-team@example.com",
)]
"""A plain mailbox (no quotes, comments or shell characters): it reaches AWS Budgets and SNS subscriptions."""


MAX_MONTHLY_LIMIT = 1_000_000_000
"""The largest monthly budget a stack may set, in its currency. AWS Budgets takes the limit as decimal text
(Spend.Amount, pattern ([0-9]*\\.)?[0-9]+) and documents no numeric maximum, nor does Alibaba's guard, which compares
spend with it. A billion a month is above the largest stack goldenenv plans (MAX_NODES of the catalog's dearest type,
p6-b200.48xlarge at 114 USD/h: about 170 million USD a month; ecs.ebmgn7ex.32xlarge at 278 CNY/h: about 416 million
CNY), and keeps the amount a plain decimal of at most 13 characters, never a float's 1e+300."""


class Budget(Model):
    monthly_limit: float = Field(gt=0, le=MAX_MONTHLY_LIMIT, allow_inf_nan=False)
    """The monthly spend the alerts and the hard stop measure against: more than 0, at most MAX_MONTHLY_LIMIT
    (1,000,000,000)."""
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    alert_thresholds: list[Annotated[int, Field(ge=1, le=1000)]] = [50, 80, 100]
    """Percent of the monthly limit at which actual spend alerts: one notification each."""
    forecast_thresholds: list[Annotated[int, Field(ge=1, le=1000)]] = [100]
    """Percent of the monthly limit at which forecast spend alerts: one notification each; [100] warns when the
    month is on course to pass the limit, [] never. Alerts, forecasts and the hard stop's 100 % actual alert count
    together against the cloud's notifications per budget (AWS: clouds/aws/limits.py)."""
    emails: list[Email] = Field(min_length=1, max_length=10)
    """Who hears the alerts (AWS Budgets sends to at most 10 addresses)."""
    hard_stop: bool = False
    """Stop the stack's instances when actual spend reaches 100 %: the 100 % actual alert (added when
    alertThresholds lacks 100) also starts the stack's hard stop."""
    activate_cost_allocation_tag: bool = False
    """Activate the stack tag for cost allocation (account-wide; the budget filter needs it active)."""


_TAG_CHARS = r"[\p{L}\p{N} _.:/=+\-@%]"
TagKey = Annotated[str, Field(pattern=rf"^{_TAG_CHARS}+$", max_length=512)]
TagText = Annotated[str, Field(pattern=rf"^{_TAG_CHARS}+$", max_length=256)]
"""What goldenenv takes in a tag on any cloud: letters, digits, spaces and _ . : / = + - @ %; keys up to 512
characters (Azure's most), values up to 256 (AWS's and Azure's most). Each cloud's own rule (its folder's tags.py,
checked by clouds.tagrules) is narrower where that cloud is: AWS takes no `%` and keys of 128, Azure no `%` in a
name, Google writes a label. Tags go to cloud APIs as data and never into a shell, so `=`, `%` and spaces in them
are inert; quotes, `$`, `;`, `&`, backticks and line breaks are refused on every cloud, so no tag can ever carry a
command or split a line."""

MAX_EXTRA_TAGS = 40
"""AWS allows 50 user tags per resource. Every resource carries project, owner, cost-center and goldenenv:stack
(4); components add Name and goldenenv:ttl-hours, and the reaper and future components may add a few more: 40 extra
leaves that headroom, so a resource is never refused by AWS halfway through `up`."""

_BUILT_IN_TAGS = {"project": "tags.project", "owner": "tags.owner", "cost-center": "tags.costCenter",
                  "Name": "the component (its resource name)"}


class Tags(Model):
    project: TagText
    owner: TagText
    cost_center: TagText
    extra: dict[TagKey, TagText] = {}

    @field_validator("project", "owner", "cost_center")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("is blank; write a value (cost reports group by it)")
        return v

    @field_validator("extra")
    @classmethod
    def _reserved(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > MAX_EXTRA_TAGS:
            raise ValueError(f"{len(v)} extra tags; at most {MAX_EXTRA_TAGS} (AWS allows 50 per resource and "
                             "goldenenv adds up to 10 of its own: project, owner, cost-center, stack, Name, ...)")
        for key, value in v.items():
            if key.lower().startswith("goldenenv:"):
                raise ValueError(f"tag key '{key}' is reserved (goldenenv: is goldenenv's own); pick another name")
            if key in _BUILT_IN_TAGS:
                raise ValueError(f"tag key '{key}' is set by {_BUILT_IN_TAGS[key]}; drop it from extra")
            if not key.strip() or not value.strip():
                raise ValueError(f"tag '{key}' has a blank key or value; give it a value or drop it")
        return v

    def resolved(self, stack: str) -> dict[str, str]:
        """The tags every taggable resource carries, stack tag included."""
        return {
            "project": self.project,
            "owner": self.owner,
            "cost-center": self.cost_center,
            **self.extra,
            STACK_TAG_KEY: stack,
        }


class Lifecycle(Model):
    ttl_hours: float | None = Field(default=None, gt=0, le=24 * 90)
    idle_minutes: int | None = Field(default=None, ge=10, le=24 * 60)


class Head(Model):
    """The Slurm head node (`goldenenv:head`): slurmctld from the stack's golden image, on a small on-demand CPU
    instance in the private subnet, never spot."""

    instance_type: InstanceType | None = None
    """None: the cloud's default head type (Cloud.head_instance_type)."""


class Run(Model):
    """The training run the budget is judged against (`goldenenv:run`): plan and up price `hours` of the stack at
    full use, idle development time and the run's data, and refuse a run the monthly budget cannot pay."""

    hours: float = Field(gt=0, le=24 * 366, allow_inf_nan=False)
    """Wall-clock hours the nodes run for training."""
    idle_hours: float = Field(default=0, ge=0, le=24 * 366, allow_inf_nan=False)
    """Hours the stack is up without training (development, debugging, waiting): billed like training hours."""
    dataset_gb: float = Field(default=0, ge=0, le=100_000_000, allow_inf_nan=False)
    """Dataset size kept in the bucket (GB): billed by the GB-month."""
    checkpoint_gb: float = Field(default=0, ge=0, le=100_000_000, allow_inf_nan=False)
    """Checkpoints kept in the bucket (GB): billed by the GB-month."""
    scaling_efficiency: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    """The share of perfect scaling the run reaches: compute is billed for hours ÷ this (hours then being the run's
    time at perfect scaling, e.g. from 6·N·T), in tenths of an hour. 1: hours are the wall-clock time."""
    egress_gb: float = Field(default=0, ge=0, le=1_000_000_000, allow_inf_nan=False)
    """GB the run sends out of the cloud (results, checkpoints to elsewhere): billed at the catalog's egress price."""
    price_per_gpu_hour: float | None = Field(default=None, gt=0, le=1_000_000, allow_inf_nan=False)
    """Your price per GPU-hour (a negotiated or committed rate), in the cloud's catalog currency, over the catalog's
    on-demand or spot price for the GPU pools."""
    estimate: dict | None = None
    """`goldenenv estimate -s STACK`'s input (the same keys as its --spec file): the model, tokens, ZeRO stage."""


class ImageRef(Model):
    lock: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Name of images/<lock>/lock.yaml."""
    ref: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.:_/-]*@sha256:[0-9a-f]{64}$",
                            description="an image by digest: its repository in lower case, @sha256: and 64 "
                                        "characters 0-9 a-f (registry.example.com/team/image@sha256:...)")
    """The published image nodes pull, by digest (repo@sha256:...); None = the digest `image push` recorded."""


MAX_NODES = 2048
"""The most nodes in one stack, summed over its pools: NodePool.count's own limit, which is the largest cluster
goldenenv plans (each node is its own resources in the plan: a pool of 2,048 plans in about a minute). Pools add
up, so a stack holds no more than one pool may: two pools of 2,048 did not plan in three minutes."""


def _in_region(zone: str | None, region: str | None, cloud: str | None) -> None:
    if zone and region and not re.fullmatch(re.escape(region) + r"[a-z0-9-]*", zone):
        example = catalog.zone_example(cloud, region) if cloud else None
        raise ValueError(f"zone '{zone}' is not in region '{region}'" + (f" (e.g. {example})" if example else ""))


class KeyedError(ValueError):
    """A model's finding about one key inside the value it judges (a list's item, a member's field): `at` is the path
    from the value to that key, e.g. (1, "uid") under `team`, so the message can name `goldenenv:team[1].uid`."""

    def __init__(self, message: str, at: tuple[str | int, ...]):
        super().__init__(message)
        self.at = at


MIN_MEMBER_UID, MAX_MEMBER_UID = 2000, 59999
"""A member's uid, the same on the head and in every golden container: above Debian's 1000-1999 for local users made
by adduser and the image's own user (1000), below 60000, where Debian's dynamically allocated system ids begin
(Debian Policy 9.2.2, https://www.debian.org/doc/debian-policy/ch-opersys.html#uid-and-gid-classes)."""
MAX_SHARE = 10_000
"""A member's fair-share shares (Slurm's `fairshare=` on their association): a member's part of the cluster is their
shares over the team's sum, so ten thousand already allows a 1:10,000 split."""
MAX_GPU_HOURS = 100_000_000
"""A member's monthly GPU-hour limit: more than any stack can give in a month (MAX_NODES of 16 GPUs for 744 hours
is about 24 million), so a larger number is a typo; its minutes stay an exact integer for Slurm."""
UNIX_NAME = r"^[a-z_][a-z0-9_-]{0,31}$"
"""A member's name as both useradd (Debian's default NAME_REGEX, at most 32 characters) and Slurm take it."""
RESERVED_NAMES = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "_apt", "nobody",
    "adm", "tty", "disk", "kmem", "dialout", "fax", "voice", "cdrom", "floppy", "tape", "sudo", "audio", "dip",
    "operator", "src", "shadow", "utmp", "video", "sasl", "plugdev", "staff", "users", "nogroup",
    "munge", "slurm", "mysql",
})
"""Names a golden container already has: Debian's fixed users and groups (base-passwd 3.6.1, passwd.master and
group.master; a group counts, since useradd makes each member a group of their own name) and the users of the
image's munge, Slurm and MariaDB packages. The image's own user (the lock's `user:`) is refused too, by the stack's
reader, which knows the lock (stackconfig.team_problems)."""


class Member(Model):
    """One person of the team (`goldenenv:team`): a Unix user with the same uid on the head and in every golden
    container, logging in with their key, and a Slurm user with a share and, optionally, a monthly GPU-hour limit."""

    name: str = Field(pattern=UNIX_NAME, description="a user name Unix and Slurm take: lower-case letters, digits, "
                      "_ and -, starting with a letter or _, at most 32 characters (e.g. ana or j_doe)")
    uid: int = Field(ge=MIN_MEMBER_UID, le=MAX_MEMBER_UID)
    ssh_public_key: str
    """The member's OpenSSH public key (one .pub line), their way in to the head; never quoted in messages."""
    gpu_hours: float | None = Field(default=None, gt=0, le=MAX_GPU_HOURS, allow_inf_nan=False)
    """GPU-hours a calendar month Slurm lets the member's jobs use (then holds their next job PENDING); None, or
    `none` in the stack file: no limit of their own (the cluster's, from the budget, still holds)."""
    share: int = Field(default=1, ge=1, le=MAX_SHARE)
    """Fair-share shares: with the queue full, members get GPU time in proportion to these."""

    @field_validator("name")
    @classmethod
    def _not_taken(cls, v: str) -> str:
        if v in RESERVED_NAMES:
            raise ValueError(f"'{v}' is a user or group the golden image already has; pick another name")
        return v

    @field_validator("ssh_public_key")
    @classmethod
    def _openssh_public_key(cls, v: str) -> str:
        return sshkeys.parse(v).line

    @field_validator("gpu_hours", mode="before")
    @classmethod
    def _number_or_none(cls, v: object) -> object:
        if isinstance(v, str):
            if v.strip().lower() == NO_LIMIT:
                return None
            try:
                float(v)
            except ValueError:
                raise ValueError(f"{as_written(v)} is not a number; write GPU-hours a month such as 500, or "
                                 f"{NO_LIMIT} for no limit of their own") from None
        return v

    @property
    def ssh_key(self) -> sshkeys.PublicKey:
        """The member's key, read: its type, comment and fingerprint name it in `goldenenv team list`."""
        return sshkeys.parse(self.ssh_public_key)

    @property
    def gpu_minutes(self) -> int | None:
        """The limit as Slurm takes it (GrpTRESMins): minutes to the nearest, at least one (Slurm reads 0 as no GPU
        time at all); None: no limit of their own."""
        return None if self.gpu_hours is None else max(1, round(self.gpu_hours * 60))


NO_LIMIT = "none"
"""`gpuHours: none`: a member with no GPU-hour limit of their own."""


def team_clashes(members: list[Member]) -> KeyedError | None:
    """The first member whose name or uid an earlier member has (one Unix user per name and per uid)."""
    names: dict[str, int] = {}
    uids: dict[int, int] = {}
    for i, member in enumerate(members):
        if member.name in names:
            return KeyedError(f"'{member.name}' is already team[{names[member.name]}]'s name; give each member "
                              "their own", (i, "name"))
        if member.uid in uids:
            return KeyedError(f"{member.uid} is already team[{uids[member.uid]}]'s uid; give each member their own "
                              f"({MIN_MEMBER_UID} to {MAX_MEMBER_UID})", (i, "uid"))
        names[member.name], uids[member.uid] = i, i
    return None


class ClusterSpec(Model):
    stack: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    cloud: Name
    """Whether goldenenv supports it is clouds.validate's check; the pattern keeps it plain text."""
    region: Location
    zone: Location | None = None
    """The zone the cluster is in; with `zones`, the one `up` found capacity in (it records it here)."""
    zones: list[Location] | None = Field(default=None, min_length=1, max_length=12)
    """The zones `up` may place the cluster in, in order, when the cloud has no capacity in one: the whole cluster
    moves (its pools share one subnet, placement and parallel file system), never out of the region."""
    nodes: list[NodePool] = Field(min_length=1)
    network: Network = Network()
    storage: Storage = Storage()
    budget: Budget | None = None
    budget_opt_out: bool = False
    """True when the stack file says `budget: none`: a deliberate stack with no spending alerts (plan warns)."""
    tags: Tags
    lifecycle: Lifecycle = Lifecycle()
    image: ImageRef
    run: Run | None = None
    """The training run the budget is judged against; None = judge one hour and the runway at full use."""
    scheduler: Literal["slurm", "none"] = "slurm"
    """slurm: a head node runs slurmctld and every node slurmd in its golden container (submit, jobs, requeue);
    none: no queue, `goldenenv run` over ssh only."""
    head: Head = Head()
    team: list[Member] = Field(default=[], max_length=MAX_MEMBER_UID - MIN_MEMBER_UID + 1)
    """The people who share the cluster (`goldenenv:team`), each a Unix and Slurm user; [] = the image's user only."""

    @field_validator("team")
    @classmethod
    def _one_of_each(cls, v: list[Member], info: ValidationInfo) -> list[Member]:
        clash = team_clashes(v)
        if clash is not None:
            raise clash
        if v and info.data.get("scheduler") == "none":
            raise ValueError("a team's shares and GPU-hour limits are Slurm's: set goldenenv:scheduler: slurm (the "
                             "default) or drop goldenenv:team")
        return v

    @field_validator("nodes", mode="before")
    @classmethod
    def _one_pool_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, dict) else v

    @field_validator("nodes")
    @classmethod
    def _unique_pool_names(cls, v: list[NodePool]) -> list[NodePool]:
        names = [p.name for p in v]
        if len(set(names)) != len(names):
            raise ValueError("pool names repeat; give each pool its own name")
        total = sum(p.count for p in v)
        if total > MAX_NODES:
            counts = ", ".join(f"{p.name}: {p.count:,}" for p in v[:8]) + (", ..." if len(v) > 8 else "")
            raise ValueError(f"{total:,} nodes over the pools ({counts}); a stack holds at most {MAX_NODES:,}, as "
                             "one pool may: make the pools smaller or split them into stacks")
        return v

    @field_validator("zone")
    @classmethod
    def _zone_in_region(cls, v: str | None, info: ValidationInfo) -> str | None:
        _in_region(v, info.data.get("region"), info.data.get("cloud"))
        return v

    @field_validator("zones")
    @classmethod
    def _zones_in_region(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if v is None:
            return v
        for zone in v:
            _in_region(zone, info.data.get("region"), info.data.get("cloud"))
        if len(set(v)) != len(v):
            raise ValueError("a zone is listed twice; list each once, in the order to try")
        zone = info.data.get("zone")
        if zone and zone not in v:
            raise ValueError(f"zone '{zone}' (the zone in use) is not in the list; add it, or drop goldenenv:zone")
        return v

    @field_validator("budget_opt_out")
    @classmethod
    def _budget_or_opt_out(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("budget") is not None:
            raise ValueError("a stack either has a budget or says `budget: none`, not both; drop one")
        return v

    @property
    def stack_tags(self) -> dict[str, str]:
        return self.tags.resolved(self.stack)

    @property
    def placed_zone(self) -> str | None:
        """The zone to build in: the one in use, else the first allowed; None lets the cloud choose."""
        return self.zone or (self.zones[0] if self.zones else None)
