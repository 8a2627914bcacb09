"""A capacity error the provider prints without its code still moves the cluster on.

Google's provider prints a stockout as Compute Engine's message only ("Error waiting for instance to create: The
zone '...' does not have enough resources available to fulfill the request"), so the failover found no code and
stopped as if the error were fatal. Rows of capacity_errors.csv now carry the words a provider prints (the
`message` column, with their source), and the failover reads them where no known code is printed.
"""

from __future__ import annotations

import pytest

from goldenenv import catalog, failover
from goldenenv.catalog.capacity import capacity_error

PROVIDER_STOCKOUT = (  # pulumi-gcp / terraform-provider-google, as forseti-security/terraform-google-forseti #631
    "  gcp:compute:Instance (gcp-a3mega-2node-gpu-0):\n"
    "    error: 1 error occurred:\n"
    "    \t* Error waiting for instance to create: The zone 'projects/team/zones/us-central1-a' does not have "
    "enough resources available to fulfill the request.  Try a different zone, or try again later.\n")
STOCKOUT_DETAIL = (  # Compute Engine's detail, as kubernetes/k8s.io #9834 shows it
    "  gcp:compute:Instance (gcp-g2-dev-gpu-0):\n"
    "    error: The zone 'projects/p/zones/us-central1-b' is out of capacity: 'NULL:0/NULL:0/NULL:0 "
    "(state:STOCKOUT, sub-state:...)'\n")


def a_zone(zone: str) -> failover.Placement:
    return failover.Placement(zone, (("gpu", "on-demand"),))


@pytest.mark.parametrize("text", [PROVIDER_STOCKOUT, STOCKOUT_DETAIL])
def test_a_google_stockout_without_a_code_is_capacity_in_that_zone(text):
    error = failover.classify("gcp", text)
    assert (error.klass, error.scope) == ("capacity", "placement")
    assert error.resource and error.resource.endswith("gpu-0")
    assert "does not have enough resources" in error.message or "STOCKOUT" in error.message


def test_the_failover_moves_a_google_stockout_to_the_next_zone():
    ups = []

    def deploy(placement):
        ups.append(placement.zone)
        if placement.zone == "us-central1-a":
            raise RuntimeError(PROVIDER_STOCKOUT)

    outcome = failover.run(deploy, [a_zone("us-central1-a"), a_zone("us-central1-b")], "gcp", log=lambda m: None,
                           sleep=lambda s: None)
    assert ups == ["us-central1-a", "us-central1-b"] and outcome.placement.zone == "us-central1-b"


def test_message_rows_are_sourced_and_a_known_code_still_decides_first():
    worded = [r for r in catalog.rows("capacity_errors") if r["message"]]
    assert worded and all(r["source"].strip() and "matched by message" in r["source"] for r in worded)
    assert capacity_error("gcp", "ZONE_RESOURCE_POOL_EXHAUSTED").message
    quota = '{"code": "QUOTA_EXCEEDED", "message": "Quota GPUS_ALL_REGIONS exceeded"} ' + PROVIDER_STOCKOUT
    assert failover.classify("gcp", quota).klass == "quota"


def test_text_without_a_known_code_or_words_stays_fatal():
    assert failover.classify("gcp", "error: something else went wrong").klass == "fatal"
