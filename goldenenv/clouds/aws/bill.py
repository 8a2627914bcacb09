"""The stack's AWS bill for a period: Cost Explorer's unblended cost of the resources tagged with the stack (and its
project), read from the laptop with the caller's AWS credentials.

GetCostAndUsage (https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_GetCostAndUsage.html):
TimePeriod Start inclusive, End exclusive (YYYY-MM-DD); a Tags filter matches a cost allocation tag, which the
payer account must have activated in the Billing console before the cost is grouped under it
(https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html). Cost Explorer answers from
us-east-1, lags the usage by up to 24 hours, and charges 0.01 USD per request
(https://aws.amazon.com/aws-cost-management/aws-cost-explorer/pricing/).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from goldenenv.cloudbill import Bill, days, not_read
from goldenenv.jobcost import Window
from goldenenv.spec import STACK_TAG_KEY, ClusterSpec

METRIC = "UnblendedCost"
REGION = "us-east-1"


def tag_filter(spec: ClusterSpec) -> dict[str, Any]:
    """The stack's tags as Cost Explorer's filter: goldenenv:stack, and project (two projects may each have a stack
    of one name)."""
    tags = spec.stack_tags
    wanted = [{"Tags": {"Key": key, "Values": [tags[key]], "MatchOptions": ["EQUALS"]}}
              for key in (STACK_TAG_KEY, "project") if tags.get(key)]
    return wanted[0] if len(wanted) == 1 else {"And": wanted}


def read(spec: ClusterSpec, window: Window, env, api: Any = None) -> Bill:
    first, after = days(window)
    after = min(after, datetime.now(timezone.utc).date() + timedelta(days=1))  # a month not over: up to today
    period = f"{first} to {after} (exclusive), UTC days"
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        if api is None:
            import boto3

            api = boto3.client("ce", region_name=REGION)
        pages, token = [], None
        while True:
            answer = api.get_cost_and_usage(
                TimePeriod={"Start": f"{first}", "End": f"{after}"}, Granularity="MONTHLY", Metrics=[METRIC],
                Filter=tag_filter(spec), **({"NextPageToken": token} if token else {}))
            pages.append(answer)
            token = answer.get("NextPageToken")
            if not token:
                break
    except (BotoCoreError, ClientError) as e:
        return not_read("aws", f"Cost Explorer refused or could not be reached ({type(e).__name__}: {e})", period)
    amounts = [r["Total"][METRIC] for page in pages for r in page.get("ResultsByTime", [])
               if METRIC in r.get("Total", {})]
    currencies = {a["Unit"] for a in amounts}
    total = sum(float(a["Amount"]) for a in amounts)
    return Bill(total, currencies.pop() if len(currencies) == 1 else "USD", period,
                f"AWS Cost Explorer, {METRIC} of resources tagged {STACK_TAG_KEY}={spec.stack}"
                + (f" and project={spec.stack_tags['project']}" if spec.stack_tags.get("project") else "")
                + " (the tags must be activated as cost allocation tags; up to 24 h behind)")
