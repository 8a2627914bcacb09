"""Hardening on Huawei Cloud: no host logs in with a password; no bucket emptied by its lifecycle; what the other
hardening rules find nothing to judge on.

ECS's boot integrity features are not documented for the GPU flavors in what was read, so host-not-hardened judges
password login only: an instance takes a key pair (key_pair), never an `admin_pass`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.clouds.huawei.limits import DEVSERVER, INSTANCE
from goldenenv.hardening import deletes_within_a_day

NOT_JUDGED = {
    "host-not-hardened (Secure Boot, vTPM)": "not documented for Huawei's GPU flavors in what was read; password "
                                             "login is judged",
    "storage-not-hardened": "OBS's HTTPS-only rule is a bucket policy goldenenv does not write yet, and the stack "
                            "makes no API key",
}
BUCKET = "huaweicloud:Obs/bucket:Bucket"


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def host(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type in (INSTANCE, DEVSERVER) and resource.props.get("adminPass"):
        yield (f"{_label(resource)} sets a login password (admin_pass): a password can be guessed and travels with "
               "every copy of the plan; log in with the pool's key pair (nodes.sshPublicKey).")


def lifecycle(resource: Any, ctx: Any) -> Iterator[str]:
    """obs.Bucket lifecycle_rules: a rule with no prefix whose expiration deletes every object within a day."""
    if resource.type != BUCKET:
        return
    for rule in resource.props.get("lifecycleRules") or ():
        if rule.get("prefix") or rule.get("enabled") is False:
            continue
        for expiration in rule.get("expirations") or ():
            if isinstance(expiration, dict) and deletes_within_a_day(expiration.get("days")):
                yield (f"{_label(resource)} expires every object after {expiration.get('days')} day(s): it would "
                       "empty the stack's data; scope it to a prefix or remove it.")
