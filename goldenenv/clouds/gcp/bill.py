"""Google Cloud's bill is not read from the laptop: the stack's stop function reads no bill either, it is sent the
budget's month-to-date cost (Cloud Billing's budget notifications to Pub/Sub, stopfn/main.py), and the Cloud
Billing API has no call for a cost by label (that needs the billing export to BigQuery, which goldenenv does not set
up: https://cloud.google.com/billing/docs/how-to/export-data-bigquery)."""

from __future__ import annotations

from goldenenv.cloudbill import Bill, not_read
from goldenenv.jobcost import Window
from goldenenv.spec import ClusterSpec


def read(spec: ClusterSpec, window: Window, env, api=None) -> Bill:
    return not_read("gcp", "Cloud Billing sends the budget's month-to-date cost to the stop function (Pub/Sub) and "
                    "has no API for a cost by label without a BigQuery billing export; the budget's page in the "
                    "console shows it")
