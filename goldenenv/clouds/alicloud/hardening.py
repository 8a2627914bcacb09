"""Hardening on Alibaba Cloud: no data bucket emptied by its lifecycle; what the other hardening rules find nothing
to judge on.

Alibaba's ECS Secure Boot and vTPM belong to security-enhanced instance families (g7t, c7t, r7t: trusted
computing), none of them GPU types the catalog offers (help.aliyun.com/zh/ecs/user-guide/overview-of-trusted-
computing-capabilities), so host-not-hardened judges password login only: an instance takes a key pair, never a
password (password, kmsEncryptedPassword, passwordInherit). OSS has no bucket switch for
HTTPS-only or a TLS minimum a resource can set beyond a bucket policy, and the stack makes no AccessKey.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.hardening import deletes_within_a_day

NOT_JUDGED = {
    "host-not-hardened (Secure Boot, vTPM)": "ECS trusted computing exists on security-enhanced families only, no "
                                             "GPU type among them; password login is judged",
    "storage-not-hardened": "OSS has no HTTPS-only or TLS-minimum setting on the bucket resource; the stack makes no "
                            "AccessKey",
}
BUCKET = "alicloud:oss/bucket:Bucket"
INSTANCE = "alicloud:ecs/instance:Instance"
PASSWORD_INPUTS = ("password", "kmsEncryptedPassword", "passwordInherit")


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def host(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type != INSTANCE:
        return
    given = [name for name in PASSWORD_INPUTS if resource.props.get(name)]
    if given:
        yield (f"{_label(resource)} sets a login password ({', '.join(given)}): a password can be guessed and "
               f"travels with every copy of the plan; log in with the pool's key pair (nodes.sshPublicKey).")


def lifecycle(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type != BUCKET:
        return
    for rule in resource.props.get("lifecycleRules") or ():
        if rule.get("enabled") is False or rule.get("prefix") or rule.get("tags"):
            continue
        for expiration in rule.get("expirations") or ():
            if deletes_within_a_day(expiration.get("days")):
                yield (f"{_label(resource)} rule {rule.get('id')!r} expires every object after "
                       f"{expiration.get('days')} day(s): it would empty the stack's data; scope it to a prefix or "
                       f"remove it.")
