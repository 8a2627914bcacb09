"""The local stack has no bill: its stand-in GPUs are priced at the local catalog's notional rate, to show what the
same work would cost, and nothing is charged."""

from __future__ import annotations

from goldenenv.cloudbill import Bill
from goldenenv.jobcost import Window
from goldenenv.spec import ClusterSpec


def read(spec: ClusterSpec, window: Window, env, api=None) -> Bill:
    return Bill(None, "", "", "no bill: the local stack's price is a notional rate per stand-in GPU-hour")
