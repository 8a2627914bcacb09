"""Alibaba Cloud limits as data: what Alibaba refuses only at `up`, each with where Alibaba documents it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    value: int
    source: str


DEPLOYMENT_SETS = "https://help.aliyun.com/zh/ecs/user-guide/overview-43"

LOW_LATENCY_SET_INSTANCES = Limit(20, f"Alibaba Cloud ECS docs, deployment sets ({DEPLOYMENT_SETS}): a LowLatency "
                                      "set holds at most 20 instances, all in one zone")
