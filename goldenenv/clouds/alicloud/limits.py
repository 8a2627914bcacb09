"""Alibaba Cloud limits as data: what Alibaba refuses only at `up`, each with where Alibaba documents it."""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv.clouds.base import UserDataLimit


@dataclass(frozen=True)
class Limit:
    value: int
    source: str


DEPLOYMENT_SETS = "https://help.aliyun.com/zh/ecs/user-guide/overview-43"

LOW_LATENCY_SET_INSTANCES = Limit(20, f"Alibaba Cloud ECS docs, deployment sets ({DEPLOYMENT_SETS}): a LowLatency "
                                      "set holds at most 20 instances, all in one zone")

USER_DATA = UserDataLimit(
    32 * 1024, {"alicloud:ecs/instance:Instance": "userData"}, base64=True,
    source="https://www.alibabacloud.com/help/en/ecs/user-guide/manage-the-user-data-of-linux-instances: \"Before "
           "user data is encoded in Base64, the user data can only be up to 32 KB in size\"")
"""Every node and the head are ECS instances carrying cloud-init's user data, base64-encoded (older pages of the
same guide said 16 KB)."""

DATAFLOW_BELOW_FILE_SYSTEM = ("pulumi-alicloud 4.0.0 nas.DataFlow throughput: \"The transmission bandwidth of data "
                              "flow must be less than the IO bandwidth of the file system\"")

AUTO_RELEASE_MIN_MINUTES = Limit(30, "pulumi-alicloud 4.0.0 ecs.Instance auto_release_time: \"at least half an hour "
                                     "later than the current time\"")
AUTO_RELEASE_MAX_DAYS = Limit(3 * 365, "pulumi-alicloud 4.0.0 ecs.Instance auto_release_time: \"less than 3 years "
                                       "since the current time\"")
TTL_MIN_HOURS = 1.0
"""The shortest lifecycle.ttlHours goldenenv sends: the release time is computed when the program runs, and the
nodes are created minutes later (after the network and storage), so half an hour of margin is kept above
AUTO_RELEASE_MIN_MINUTES."""
