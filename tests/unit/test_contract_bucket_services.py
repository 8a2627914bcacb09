"""Rule, on every cloud: every managed service that reads or writes the stack's bucket has its service identity
granted there.

A parallel file system imports the bucket and exports to it in the cloud's own name, not the caller's: FSx's data
repository association (its service-linked role), CPFS's data flow (a bucket tagged for it), Azure Managed Lustre
(the HPC Cache Resource Provider's roles on the storage account), Google's Managed Lustre (its service agent
service-<project number>@gcp-sa-lustre.iam.gserviceaccount.com, roles/storage.objectUser on the bucket). Each cloud
declares those services (ProviderFacts.bucket_services) and the grant that admits each (bucket_service_gap); every
shipped stack must hold each grant. Without it the import finds nothing and `destroy` stops at its export while
the file system and nodes bill (issue 33 item 4).
"""

from __future__ import annotations


import pytest

import shipped
from goldenenv import guardrails, plan

STACKS = shipped.STACKS
RULE = "bucket-service-not-granted"


SHIPPED = shipped.pulumi_stacks()


def planned(stack: str) -> plan.Plan:
    return shipped.plan_of(stack)


def services(resources) -> list:
    kinds = {t for f in guardrails.provider_facts() for t in f.bucket_services}
    return [r for r in resources if r.type in kinds]


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_every_service_that_reads_or_writes_the_bucket_is_granted(cloud, stack):
    found = planned(stack)
    if found.spec.storage.parallel_fs.enabled:
        assert services(found.resources), "a parallel file system linked to the bucket reads and writes it"
    assert [f.message for f in found.findings if f.rule == RULE] == []


@pytest.mark.parametrize("cloud,stack", [s for s in SHIPPED if services(planned(s[1]).resources)])
def test_a_service_without_its_grant_is_refused(cloud, stack):
    """The services alone, without the bucket and the grants that admit them: each is caught."""
    touching = services(planned(stack).resources)
    findings = guardrails.evaluate(touching, {}, budget_opt_out=True)
    assert {f.urn for f in findings if f.rule == RULE} == {s.urn for s in touching}


def test_google_managed_lustre_agent_is_object_user_on_the_bucket():
    """Literal anchor: Google's "Transfer data to and from Cloud Storage" asks roles/storage.objectUser on the bucket
    for service-<project number>@gcp-sa-lustre.iam.gserviceaccount.com."""
    found = planned("gcp-a3mega-2node")
    bucket = found.outputs["bucket"]
    grants = [(r.props["role"], r.props["member"]) for r in found.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
              if r.props["bucket"] == bucket and "gcp-sa-lustre" in r.props["member"]]
    assert grants == [("roles/storage.objectUser",
                       "serviceAccount:service-000000000000@gcp-sa-lustre.iam.gserviceaccount.com")]
