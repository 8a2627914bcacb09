"""What AWS's Cloud class and its cluster parts (parts.py) both use: the stores that outlive a stack
(RetainedStores), a pool's EFA interfaces and spot request type, the zone a stack's pools share, the FSx for Lustre
mount adapter and a pool's pinned AMI. It sits below both, so the parts need not import the package.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from goldenenv import catalog, compat
from goldenenv.clouds import stores
from goldenenv.clouds.aws import retained
from goldenenv.clouds.aws import spot as spot_requests
from goldenenv.clouds.aws.nodes import in_placement_group
from goldenenv.clouds.aws.registry import repository_name
from goldenenv.nodeboot import SharedFs
from goldenenv.spec import ClusterSpec, ConfigError, Problem

FSX_UNIT = "goldenenv-fsx.service"


@dataclass(frozen=True)
class RetainedStores:
    """The names of what outlives the stack, and which of them already exist to be adopted."""

    bucket: str
    adopt_bucket: str | None
    repository: str
    adopt_repository: str | None

    @classmethod
    def find(cls, spec: ClusterSpec, lookup: retained.AwsLookup) -> RetainedStores:
        project = spec.tags.project
        bucket = spec.storage.bucket.bucket_name or retained.data_bucket_name(
            project, spec.stack, lookup.account_id(), spec.region)
        repository = repository_name(project, spec.stack, spec.image.lock)
        return cls(
            bucket, stores.adoptable(lookup.bucket(bucket), project, spec.stack, retained.BUCKET_KEY, "bucket"),
            repository, stores.adoptable(lookup.repository(repository), project, spec.stack, "goldenenv:tags.project",
                                           "image repository"),
        )


def efa_interfaces(pool) -> int:
    """The EFA interfaces each node of the pool gets: all its type has, unless the pool turns EFA off."""
    it = catalog.instance_type("aws", pool.instance_type)
    return it.rdma_interfaces if (pool.rdma is not False and it.rdma == "efa") else 0


def spot_request(pool) -> str | None:
    """The pool's spot request type (spot.request_type): persistent outside a placement group, one-time in one."""
    return spot_requests.request_type(pool.capacity.value,
                                      in_placement_group(efa_interfaces(pool), pool.capacity.value))


def pool_types(spec: ClusterSpec) -> list[str]:
    """Every pool's instance type, once each, in name order."""
    return sorted({catalog.instance_type("aws", pool.instance_type).name for pool in spec.nodes})


def default_zone(spec: ClusterSpec, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The stack's zone when it names none: the first of the region's zones, in name order, that sells every
    pool's type. Not every zone sells a GPU type (p4d in us-west-2, g5.xlarge in us-east-1), and the pools share
    one subnet, so the first zone the region lists may have none of them."""
    types = pool_types(spec)
    opts = pulumi.InvokeOutputOptions(parent=parent)
    zones = aws.get_availability_zones_output(
        state="available", filters=[{"name": "zone-type", "values": ["availability-zone"]}], opts=opts)
    offerings = aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone", filters=[{"name": "instance-type", "values": types}], opts=opts)
    return pulumi.Output.all(zones.names, offerings.instance_types, offerings.locations).apply(
        lambda found: zone_selling(spec.region, types, found[0], list(zip(found[1], found[2], strict=True))))


def zone_selling(region: str, types: list[str], zones: list[str], offerings: list[tuple[str, str]]) -> str:
    """The first zone (name order) among `zones` where every type in `types` is offered; `offerings` are
    (instance type, zone) pairs as DescribeInstanceTypeOfferings lists them. ConfigError at goldenenv:zone when
    no zone sells them all."""
    sold: dict[str, set[str]] = {}
    for instance_type, zone in offerings:
        sold.setdefault(zone, set()).add(instance_type)
    for zone in sorted(zones):
        if set(types) <= sold.get(zone, set()):
            return zone
    asked = "EC2 DescribeInstanceTypeOfferings, for this account"
    if len(types) == 1:
        message = (f"no availability zone of {region} sells {types[0]} ({asked}): choose a region that offers it, "
                   "or another instance type")
    else:
        where = "; ".join(f"{t} in {', '.join(sorted(z for z in zones if t in sold.get(z, ()))) or 'no zone'}"
                          for t in types)
        message = (f"no availability zone of {region} sells all of {', '.join(types)} ({asked}), and the pools "
                   f"share one zone: {where}. Give the pools types one zone sells, or choose another region")
    raise ConfigError([Problem("goldenenv:zone", message)])


def lustre_mount(dns_name: str, mount_name: str) -> SharedFs:
    """The FSx for Lustre mount adapter: the file system's DNS name and mount name as Lustre's source path."""
    return SharedFs(FSX_UNIT, "fsx-mount.sh", {"source_path": f"{dns_name}@tcp:/{mount_name}"})


def host_image_id(spec: ClusterSpec, pool, parent: pulumi.Resource, baked_for=None) -> pulumi.Input[str]:
    """The pool's pinned AMI: the one `goldenenv host-image build` baked for its host layer (baked_for: a pool's or
    the head's layer), else the stack's own id, the catalog's id for the region, or the dated release by name."""
    if baked_for is not None and baked_for.baked:
        return baked_for.baked
    host = compat.node_host("aws", spec.region, pool.host_image)
    if host.override_id:
        return host.override_id
    image = host.image
    if image.image_id:
        return image.image_id
    # a pinned release stays pinned after AWS deprecates it (two years after creation): look it up all the same
    return aws.ec2.get_ami_output(
        owners=[image.owner], filters=[{"name": "name", "values": [image.ami_name]}], most_recent=True,
        include_deprecated=True, opts=pulumi.InvokeOutputOptions(parent=parent),
    ).id
