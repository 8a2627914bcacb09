"""The stack's Alibaba Cloud bill for a month, read from the laptop by the budget guard's own reader
(guard.month_spend: BSS DescribeSplitItemBill filtered by the stack's tag, every page, PretaxAmount summed; billing
cycles in Beijing time, split bills about 48 hours behind) with the caller's AccessKey in the environment."""

from __future__ import annotations

from goldenenv.cloudbill import Bill, MonthlyBill, not_read
from goldenenv.clouds import stopcore
from goldenenv.clouds.alicloud import guard
from goldenenv.clouds.alicloud.budget import bss_endpoint
from goldenenv.jobcost import Window
from goldenenv.spec import STACK_TAG_KEY, ClusterSpec

MONTHLY = MonthlyBill("alicloud", "DescribeSplitItemBill", ("ALIBABA_CLOUD_ACCESS_KEY_ID",
                                                            "ALIBABA_CLOUD_ACCESS_KEY_SECRET"),
                      "an AccessKey allowed bss:DescribeSplitItemBill", unit="whole billing cycles")
SECONDS = 120.0
"""How long the laptop reads the bill's pages before it says the bill could not be read."""


def read(spec: ClusterSpec, window: Window, env, api=None) -> Bill:
    asked = MONTHLY.asked(window, env, api)
    if isinstance(asked, Bill):
        return asked
    month, period = asked
    currency = spec.budget.currency if spec.budget else "CNY"
    if api is None:
        api = guard.rpc_client(bss_endpoint(currency), guard.BSS_VERSION, guard.Credentials(
            env["ALIBABA_CLOUD_ACCESS_KEY_ID"], env["ALIBABA_CLOUD_ACCESS_KEY_SECRET"],
            env.get("ALIBABA_CLOUD_SECURITY_TOKEN")))
    try:
        cost, currencies = guard.month_spend(api, spec.stack, month, guard.new_clock(SECONDS))
    except (guard.ApiError, guard.UnreadableBill, stopcore.ListingIncomplete, stopcore.OutOfTime) as e:
        return not_read("alicloud", f"DescribeSplitItemBill failed: {e}", period)
    named = {c for c in currencies if c}
    return Bill(cost, named.pop() if len(named) == 1 else currency, period, "Alibaba Cloud BSS "
                f"DescribeSplitItemBill, PretaxAmount of {STACK_TAG_KEY}={spec.stack} (split bills lag about 48 h)")
