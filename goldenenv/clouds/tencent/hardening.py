"""Hardening on Tencent Cloud: no host logs in with a password; no bucket emptied by its lifecycle; what the other
hardening rules find nothing to judge on.

CVM's trusted-computing features (Secure Boot, vTPM) are not documented for the HCC or GN families in what was read,
so host-not-hardened judges password login only: an instance takes key pairs (key_ids), never a `password`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.clouds.tencent.limits import INSTANCE
from goldenenv.hardening import deletes_within_a_day

NOT_JUDGED = {
    "host-not-hardened (Secure Boot, vTPM)": "not documented for Tencent's GPU families in what was read; password "
                                             "login is judged",
    "storage-not-hardened": "COS has no HTTPS-only or TLS-minimum setting on the bucket resource; the stack makes "
                            "no API key",
}
BUCKET = "tencentcloud:Cos/bucket:Bucket"


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def host(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type == INSTANCE and resource.props.get("password"):
        yield (f"{_label(resource)} sets a login password: a password can be guessed and travels with every copy of "
               "the plan; log in with the pool's key pair (nodes.sshPublicKey).")


def lifecycle(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type != BUCKET:
        return
    for rule in resource.props.get("lifecycleRules") or ():
        if rule.get("filterPrefix"):
            continue
        expiration = rule.get("expiration")
        if isinstance(expiration, dict) and deletes_within_a_day(expiration.get("days")):
            yield (f"{_label(resource)} expires every object after {expiration.get('days')} day(s): it would "
                   "empty the stack's data; scope it to a prefix or remove it.")
