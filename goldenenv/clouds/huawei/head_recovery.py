"""What happens to the Huawei Cloud Slurm head when it is lost (README, "What survives what";
goldenenv/clouds/headrecovery.py)."""

from goldenenv.clouds.headrecovery import HeadRecovery

HEAD_RECOVERY = HeadRecovery(
    cloud="Huawei Cloud",
    by_itself=("nothing goldenenv can point to: a pay-per-use head is never reclaimed (only spot servers are), but "
               "how ECS recovers a server from a host failure is on no Huawei page read here (unverified)"),
    otherwise="a deleted head comes back with the next `goldenenv up`",
    queue=("kept while the head keeps its system disk (a stop, a restart); a head created again keeps it only from "
           "SFS Turbo when the stack has it"),
    source="https://support.huaweicloud.com/intl/en-us/usermanual-ecs/ecs_03_0190.html",
    head_type="huaweicloud:Ecs/instance:Instance",
    planned={"chargingMode": ("postPaid",)},
)
"""The one input that keeps the claim: a spot head (charging_mode spot) is reclaimed (the page)."""
