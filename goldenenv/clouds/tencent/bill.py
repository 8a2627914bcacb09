"""The stack's Tencent Cloud bill for a month, read from the laptop by the stop function's own reader
(stop.spend: billing DescribeBillSummaryByTag for the stack's cost-allocation tag, whole months in Beijing time,
nothing until Tencent marks the month's bill Ready) with the caller's API key in the environment."""

from __future__ import annotations

from goldenenv.cloudbill import Bill, missing, not_read, whole_month
from goldenenv.clouds.tencent import stop
from goldenenv.jobcost import Window
from goldenenv.spec import STACK_TAG_KEY, ClusterSpec

CREDENTIALS = ("TENCENTCLOUD_SECRETID", "TENCENTCLOUD_SECRETKEY")


def read(spec: ClusterSpec, window: Window, env, api=None) -> Bill:
    month = whole_month(window)
    if month is None:
        return not_read("tencent", "its bill is read by whole months (DescribeBillSummaryByTag): give --month "
                        "YYYY-MM")
    period = f"{month}, Beijing time (UTC+8)"
    if api is None:
        lacking = missing(env, CREDENTIALS)
        if lacking:
            return not_read("tencent", f"set {' and '.join(lacking)} (an API key allowed billing:"
                            "DescribeBillSummaryByTag) to read it", period)

        def api(service, version, action, params):
            return stop.call(service, version, action, params, spec.region, env)
    try:
        cost = stop.spend(month, STACK_TAG_KEY, spec.stack, api)
    except (stop.ApiError, OSError, ValueError) as e:
        return not_read("tencent", f"DescribeBillSummaryByTag failed: {e}", period)
    if cost is None:
        return not_read("tencent", f"the bill of {month} is not ready, or has no cost tagged "
                        f"{STACK_TAG_KEY}={spec.stack} (the tag must be a cost allocation tag)", period)
    currency = spec.budget.currency if spec.budget else "CNY"
    return Bill(float(cost), currency, period, f"Tencent Cloud billing DescribeBillSummaryByTag, RealTotalCost of "
                f"{STACK_TAG_KEY}={spec.stack} (in the account's currency, taken as {currency}: unverified)")
