"""Hardening on AWS: no data bucket emptied by its lifecycle; what the other hardening rules find nothing to judge on.

EC2 UEFI Secure Boot and NitroTPM are attributes of the AMI (its boot mode, uefiData and tpmSupport), not settings of
the instance or launch template the plan creates (docs.aws.amazon.com/AWSEC2/latest/UserGuide/uefi-secure-boot.html,
nitrotpm.html); instances have no password login (key pairs or SSM). S3 has no account-level switch for HTTPS-only
or a TLS minimum a resource can set; every AWS API endpoint, S3's included, requires TLS 1.2 or later
(aws.amazon.com/blogs/security/tls-1-2-required-for-aws-endpoints/), and the stack makes no access keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.hardening import deletes_within_a_day

NOT_JUDGED = {
    "host-not-hardened": "Secure Boot and NitroTPM are AMI attributes on EC2, not instance settings; no password login",
    "storage-not-hardened": "every AWS endpoint, S3's included, requires TLS 1.2 or later; the stack makes no keys",
}
LIFECYCLES = ("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
              "aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2")


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def _narrowed(rule: dict) -> bool:
    filter_ = rule.get("filter") or {}
    and_ = filter_.get("and") or {}
    return bool(rule.get("prefix") or filter_.get("prefix") or filter_.get("tag") or and_.get("prefix")
                or and_.get("tags") or filter_.get("objectSizeGreaterThan") or filter_.get("objectSizeLessThan"))


def lifecycle(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type not in LIFECYCLES:
        return
    for rule in resource.props.get("rules") or ():
        if str(rule.get("status", "Enabled")) != "Enabled" or _narrowed(rule):
            continue
        days = (rule.get("expiration") or {}).get("days")
        if deletes_within_a_day(days):
            yield (f"{_label(resource)} rule {rule.get('id')!r} expires every object after {days} day(s): it would "
                   f"empty the stack's data; scope it to a prefix or remove it.")
