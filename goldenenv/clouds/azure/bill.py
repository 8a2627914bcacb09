"""Azure's bill is not read from the laptop: the stack's stop function reads no bill, the budget's action group
calls it at 100 % of actual spend (stopfn/function_app.py); the Cost Management query API would need the caller's
Cost Management Reader role on the subscription and the azure-mgmt-costmanagement package, which goldenenv does
not install (https://learn.microsoft.com/rest/api/cost-management/query/usage)."""

from __future__ import annotations

from goldenenv.cloudbill import Bill, not_read
from goldenenv.jobcost import Window
from goldenenv.spec import ClusterSpec


def read(spec: ClusterSpec, window: Window, env, api=None) -> Bill:
    return not_read("azure", "the budget calls the stop function at 100 % of spend and no bill reader runs here "
                    "(Cost Management's query API is not wired in); the budget's page in the portal shows it")
