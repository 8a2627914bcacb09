"""Huawei Cloud limits as data: what Huawei refuses only at `up`, each with where Huawei documents it
(docs/research/huawei.md)."""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv.clouds.base import UserDataLimit


@dataclass(frozen=True)
class Limit:
    value: int
    source: str


INSTANCE = "huaweicloud:Ecs/instance:Instance"
"""The type token of an ECS instance in pulumi-huaweicloud 0.0.12 (nodes and head)."""
DEVSERVER = "pulumi-python:dynamic/huawei:DevServer"
"""The type token of a ModelArts Lite Server (clouds/huawei/devserver.py: a dynamic resource of its own type)."""

USER_DATA = UserDataLimit(
    32 * 1024, {INSTANCE: "userData", DEVSERVER: "userData"}, base64=False,
    source="https://support.huaweicloud.com/intl/en-us/api-ecs/ecs_02_0101.html (ECS CreateServers; its text read in "
           "huaweicloudsdkecs 3.1.219 PrePaidServer.user_data): at most 32 KB before base64 encoding; text, scripts "
           "and gzip are taken")
"""Every node and the head are ECS instances carrying cloud-init's user data; pulumi-huaweicloud's user_data takes
plain text or base64 and encodes it itself, so the program passes the cloud-config as it is. A Lite Server's
(CreateDevServer user_data, base64 by the resource) is held to the same 32 KB: ModelArts states no limit of its own
in the SDK's text (unverified)."""

SFS_TURBO_HPC_MIN_GIB = {"20M": Limit(3686, "terraform-provider-huaweicloud docs/resources/sfs_turbo.md@a0345b8: "
                                            "HPC with hpc_bandwidth 20M is 3,686 to 1,048,576 GB"),
                         "40M": Limit(1228, "the same page: HPC with 40M, 125M, 250M, 500M or 1000M is 1,228 to "
                                            "1,048,576 GB")}
SFS_TURBO_HPC_STEP_GIB = Limit(1228, "the same page: an HPC file system's size is a multiple of 1.2 TiB, rounded "
                                     "down to GiB (3.6 TiB = 3686, 4.8 TiB = 4915)")
SFS_TURBO_MAX_GIB = 1048576
SECRET_BYTES = Limit(32 * 1024, "pulumi-huaweicloud 0.0.12 dew.Secret secret_binary: at most 32 KB")
FGS_TIMEOUT_S = Limit(259200, "pulumi-huaweicloud 0.0.12 functiongraph.Function timeout: 3 to 259,200 s")
STOP_BATCH = Limit(1000, "huaweicloudsdkecs 3.1.219 BatchStopServers: up to 1,000 servers per call")
BSS_PAGE = Limit(1000, "huaweicloudsdkbss 3.1.219 ListCustomerselfResourceRecords limit (unverified maximum; the "
                       "function pages until offset reaches total_count whatever the page)")


def turbo_sizes(up_to_gib: int = SFS_TURBO_MAX_GIB) -> list[int]:
    """The sizes an HPC file system takes: k x 1.2 TiB rounded down to GiB (k x 1228.8)."""
    return [int(k * 1228.8) for k in range(1, int(up_to_gib / 1228.8) + 1)]


def turbo_size_problem(size_gib: int, bandwidth: str) -> str | None:
    """Why SFS Turbo HPC refuses a size with this bandwidth, or None."""
    minimum = SFS_TURBO_HPC_MIN_GIB["20M" if bandwidth == "20M" else "40M"]
    if size_gib < minimum.value:
        return f"is {size_gib:,} GiB, below SFS Turbo HPC's {minimum.value:,} GiB at {bandwidth} ({minimum.source})"
    if size_gib > SFS_TURBO_MAX_GIB:
        return f"is {size_gib:,} GiB, above SFS Turbo's {SFS_TURBO_MAX_GIB:,} GiB"
    if size_gib != int(round(size_gib / 1228.8) * 1228.8):
        near = int(round(size_gib / 1228.8) * 1228.8)
        return (f"is {size_gib:,} GiB, not a multiple of 1.2 TiB rounded down to GiB ({SFS_TURBO_HPC_STEP_GIB.source})"
                f": the nearest is {near:,}")
    return None
