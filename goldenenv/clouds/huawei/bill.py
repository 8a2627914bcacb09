"""The stack's Huawei Cloud bill for a month, read from the laptop by the stop function's own reader (stop.spend:
BSS ListCustomerselfResourceRecords, every page, the records carrying the stack's and its project's tags; billing
months in Beijing time) with the caller's access key in the environment."""

from __future__ import annotations

from goldenenv.cloudbill import Bill, MonthlyBill, not_read
from goldenenv.clouds import stopcore
from goldenenv.clouds.huawei import stop
from goldenenv.jobcost import Window
from goldenenv.spec import STACK_TAG_KEY, ClusterSpec

MONTHLY = MonthlyBill("huawei", "ListCustomerselfResourceRecords", ("HUAWEICLOUD_SDK_AK", "HUAWEICLOUD_SDK_SK"),
                      "an access key allowed bss:bill:view")
SECONDS = 120
"""How long the laptop reads the bill's pages before it says the bill could not be read."""


def read(spec: ClusterSpec, window: Window, env, api=None) -> Bill:
    asked = MONTHLY.asked(window, env, api)
    if isinstance(asked, Bill):
        return asked
    month, period = asked
    if api is None:
        credentials = {"access": env["HUAWEICLOUD_SDK_AK"], "secret": env["HUAWEICLOUD_SDK_SK"],
                       "token": env.get("HUAWEICLOUD_SDK_SECURITY_TOKEN", "")}

        def api(method, host, path, body):
            return stop.call(method, host, path, body, credentials)
    tags = {key: value for key, value in spec.stack_tags.items() if key in (STACK_TAG_KEY, "project") and value}
    try:
        cost, currency = stop.spend(month, tags, api, stopcore.Clock(SECONDS))
    except (stop.ApiError, OSError, stopcore.ListingIncomplete, stopcore.OutOfTime, stopcore.Unreadable) as e:
        return not_read("huawei", f"ListCustomerselfResourceRecords failed: {e}", period)
    return Bill(cost, currency or "CNY", period, "Huawei Cloud BSS ListCustomerselfResourceRecords, the records "
                "tagged " + " and ".join(f"{k}={v}" for k, v in tags.items()))
