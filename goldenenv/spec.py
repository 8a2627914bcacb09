"""Cloud-neutral description of a training cluster, validated once.

Field names are snake_case in Python and camelCase in stack files (the alias), so an error
can name the key exactly as the user wrote it. Rules that need the catalog or a cloud's
capabilities live in stackconfig.py and clouds/; this module knows only shapes and ranges.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

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


class ConfigError(Exception):
    """Bad stack configuration; each problem names its key and what would be valid."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Capacity(str, Enum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    CAPACITY_RESERVATION = "capacity-reservation"


Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")]


DriverVersion = Annotated[str, Field(pattern=r"^\d{3}\.\d{1,3}(\.\d{1,3})?$")]


class HostImageOverride(Model):
    """A host image of the user's own: its id and the NVIDIA driver it carries (the lock is checked against it)."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")
    driver: DriverVersion


class NodePool(Model):
    """Identical nodes in one zone, placed together so their fabric is fast."""

    name: Name = "gpu"
    instance_type: str = Field(min_length=1)
    count: int = Field(ge=1, le=2048)
    capacity: Capacity = Capacity.ON_DEMAND
    capacity_reservation_id: str | None = Field(
        default=None, pattern=r"^cr-[0-9a-f]{8,17}$", validate_default=True
    )
    efa: bool | None = None
    """RDMA interfaces on every node: None = use them when the instance type has them."""
    root_volume_gib: int = Field(default=200, ge=50, le=16384)
    host_image: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,63}$")] | HostImageOverride | None = None
    """A host image from the catalog by name, or {id, driver}; None = the catalog's newest for the cloud."""

    @field_validator("capacity_reservation_id")
    @classmethod
    def _matches_capacity(cls, v: str | None, info: ValidationInfo) -> str | None:
        capacity = info.data.get("capacity")
        if capacity is Capacity.CAPACITY_RESERVATION and not v:
            raise ValueError("capacity 'capacity-reservation' needs a reservation id here (cr-...)")
        if v and capacity is not None and capacity is not Capacity.CAPACITY_RESERVATION:
            raise ValueError(
                f"a reservation id goes with capacity 'capacity-reservation', not '{capacity.value}': "
                "change capacity or drop the id"
            )
        return v


class Network(Model):
    cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.42.0.0/16")
    admin_cidrs: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    """Extra networks (VPN, office) allowed to reach the nodes on SSH; access is otherwise SSM only."""
    egress: Literal["nat", "endpoints"] = "nat"
    """nat: NAT gateway for outbound traffic; endpoints: no internet path, VPC endpoints only."""

    @field_validator("cidr")
    @classmethod
    def _cidr_size(cls, v: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not 16 <= v.prefixlen <= 24:
            raise ValueError(f"{v} is /{v.prefixlen}; use a /16 to /24 private range, e.g. 10.42.0.0/16")
        if not v.is_private:
            raise ValueError(f"{v} is not a private range; use e.g. 10.42.0.0/16")
        return v

    @field_validator("admin_cidrs")
    @classmethod
    def _no_world(cls, v: list) -> list:
        for net in v:
            if net.prefixlen == 0:
                raise ValueError(
                    f"{net} opens SSH to the whole internet; name your VPN or office range "
                    "(e.g. 203.0.113.0/24) or leave adminCidrs empty and connect through SSM"
                )
        return v


class ObjectStore(Model):
    bucket_name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    """None = derived from project and stack; the bucket survives destroy either way."""
    noncurrent_version_days: int = Field(default=30, ge=1, le=3650)
    """Old versions of overwritten checkpoints are expired after this many days."""


_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*"
Prefix = Annotated[str, Field(pattern=rf"^{_SEGMENT}(/{_SEGMENT})*/?$", max_length=255)]
"""A folder in the bucket and on the shared file system: plain path segments, nothing a shell could read."""


class ParallelFs(Model):
    enabled: bool = True
    size_gib: int = Field(default=1200, ge=1200, le=2_400_000)
    throughput_per_tib: int = 250
    dataset_prefix: Prefix = "datasets/"
    checkpoint_prefix: Prefix = "checkpoints/"
    mount_point: str = Field(default="/fsx", pattern=r"^/[A-Za-z0-9_./-]+$")

    @field_validator("size_gib")
    @classmethod
    def _size_steps(cls, v: int) -> int:
        if v != 1200 and v % 2400:
            raise ValueError(f"{v} GiB is not a valid Lustre size; use 1200 or a multiple of 2400 (2400, 4800, ...)")
        return v

    @field_validator("throughput_per_tib")
    @classmethod
    def _throughput(cls, v: int) -> int:
        allowed = (125, 250, 500, 1000)
        if v not in allowed:
            raise ValueError(f"{v} is not offered; use one of {', '.join(map(str, allowed))} MB/s per TiB")
        return v


class LocalNvme(Model):
    raid0: bool = True
    mount_point: str = Field(default="/scratch", pattern=r"^/[A-Za-z0-9_./-]+$")


class Storage(Model):
    bucket: ObjectStore = ObjectStore()
    parallel_fs: ParallelFs = ParallelFs()
    local_nvme: LocalNvme = LocalNvme()


Email = Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]


class Budget(Model):
    monthly_limit: float = Field(gt=0, allow_inf_nan=False)
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    alert_thresholds: list[Annotated[int, Field(ge=1, le=1000)]] = [50, 80, 100]
    """Percent of the monthly limit; each alerts on actual and on forecast spend."""
    emails: list[Email] = Field(min_length=1, max_length=10)
    """Who hears the alerts (AWS Budgets sends to at most 10 addresses)."""
    hard_stop: bool = False
    """Stop the stack's instances when actual spend reaches 100 %."""
    activate_cost_allocation_tag: bool = False
    """Activate the stack tag for cost allocation (account-wide; the budget filter needs it active)."""


TagText = Annotated[str, Field(min_length=1, max_length=256)]


class Tags(Model):
    project: TagText
    owner: TagText
    cost_center: TagText
    extra: dict[Annotated[str, Field(min_length=1, max_length=128)], TagText] = {}

    @field_validator("extra")
    @classmethod
    def _reserved(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if key.lower().startswith("aws:") or key == STACK_TAG_KEY:
                raise ValueError(f"tag key '{key}' is reserved; pick another name")
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


class ImageRef(Model):
    lock: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Name of images/<lock>/lock.yaml."""
    ref: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.:_/-]*@sha256:[0-9a-f]{64}$")
    """The published image nodes pull, by digest (repo@sha256:...); None = the digest `image push` recorded."""


class ClusterSpec(Model):
    stack: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    cloud: str
    region: str = Field(min_length=1)
    zone: str | None = None
    nodes: list[NodePool] = Field(min_length=1)
    network: Network = Network()
    storage: Storage = Storage()
    budget: Budget | None = None
    tags: Tags
    lifecycle: Lifecycle = Lifecycle()
    image: ImageRef

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
        return v

    @field_validator("zone")
    @classmethod
    def _zone_in_region(cls, v: str | None, info: ValidationInfo) -> str | None:
        region = info.data.get("region")
        if v and region and not re.fullmatch(re.escape(region) + r"[a-z0-9-]*", v):
            raise ValueError(f"zone '{v}' is not in region '{region}' (e.g. {region}a)")
        return v

    @property
    def stack_tags(self) -> dict[str, str]:
        return self.tags.resolved(self.stack)
