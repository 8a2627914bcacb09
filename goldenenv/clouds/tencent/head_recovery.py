"""What happens to the Tencent Cloud Slurm head when it is lost (README, "What survives what";
goldenenv/clouds/headrecovery.py)."""

from goldenenv.clouds.headrecovery import HeadRecovery

HEAD_RECOVERY = HeadRecovery(
    cloud="Tencent Cloud",
    by_itself=("nothing goldenenv can point to: a pay-as-you-go head is never reclaimed (only spot instances are), "
               "but how CVM recovers an instance from a host failure is on no Tencent page read here (unverified)"),
    otherwise="a terminated head comes back with the next `goldenenv up`",
    queue=("kept while the head keeps its system disk (a stop, a restart); a head created again keeps it only from "
           "CFS Turbo when the stack has it"),
    source="https://www.tencentcloud.com/document/product/213/32487",
    head_type="tencentcloud:Instance/instance:Instance",
    planned={"instanceChargeType": ("POSTPAID_BY_HOUR",)},
)
"""The one input that keeps the claim: a spot head (SPOTPAID) is reclaimed for price or inventory (the page)."""
