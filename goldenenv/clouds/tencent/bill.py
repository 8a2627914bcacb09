"""The stack's Tencent Cloud bill for a month, read from the laptop by the stop function's own reader
(stop.spend: billing DescribeBillSummaryByTag for the stack's cost-allocation tag, whole months in Beijing time,
nothing until Tencent marks the month's bill Ready) with the caller's API key in the environment (TENCENTCLOUD_SECRET_ID and _KEY, as the provider reads it)."""

from __future__ import annotations

from goldenenv.cloudbill import Bill, MonthlyBill, not_read
from goldenenv.clouds.tencent import api as api_env, stop
from goldenenv.jobcost import Window
from goldenenv.spec import STACK_TAG_KEY, ClusterSpec

MONTHLY = MonthlyBill("tencent", "DescribeBillSummaryByTag", (api_env.SECRET_ID_ENV, api_env.SECRET_KEY_ENV),
                      "an API key allowed billing:DescribeBillSummaryByTag")
"""The laptop's key under the provider's variables, as every other goldenenv call on the laptop reads it."""


def read(spec: ClusterSpec, window: Window, env, api=None) -> Bill:
    asked = MONTHLY.asked(window, env, api)
    if isinstance(asked, Bill):
        return asked
    month, period = asked
    if api is None:
        # the stop function's reader signs with the variables SCF gives a function: the laptop's key under them
        as_scf = {"TENCENTCLOUD_SECRETID": env[api_env.SECRET_ID_ENV],
                  "TENCENTCLOUD_SECRETKEY": env[api_env.SECRET_KEY_ENV],
                  "TENCENTCLOUD_SESSIONTOKEN": env.get(api_env.TOKEN_ENV, "")}

        def api(service, version, action, params):
            return stop.call(service, version, action, params, spec.region, as_scf)
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
