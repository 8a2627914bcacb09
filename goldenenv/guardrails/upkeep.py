"""The rules on what must outlast a run and let it finish: data stores retained through `pulumi destroy`, hosts
granted pull on the image repository they boot from, managed services granted on the stack's bucket, and nothing
planned that blocks a teardown.
"""

from __future__ import annotations

from collections.abc import Iterator

from goldenenv.guardrails.context import Context
from goldenenv.guardrails.model import HOLDS_NO_DATA, HOLDS_TAG, PlannedResource
from goldenenv.guardrails.plain import _is_true, _label, _mapping
from goldenenv.guardrails.spend import holds_flag


def _is_data_store(resource: PlannedResource, ctx: Context) -> bool:
    return any(resource.type in facts.data_stores and not facts.holds_no_data(resource, ctx)
               for facts in ctx.providers)


def _final_backup_gap(resource: PlannedResource, ctx: Context) -> str | None:
    """What to do about a file system deleted without a final backup (from its provider's facts), or None."""
    return next((gap for facts in ctx.providers if (gap := facts.final_backup_gap(resource, ctx))), None)


def _unknown_holds(resource: PlannedResource) -> str:
    """For a store whose HOLDS_TAG names no known kind of content, why that flag exempts nothing ("" otherwise)."""
    for key in ("labels", "tags"):
        value = _mapping(resource.props.get(key)).get(HOLDS_TAG)
        if value is not None and holds_flag(resource.props.get(key)) is None:
            return (f" (its {HOLDS_TAG} {value!r} exempts nothing: only {', '.join(HOLDS_NO_DATA)} say what a store "
                    f"holds instead of data)")
    return ""


def _check_data_retained(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Judges only what is known: an unknown retainOnDelete (a policy pack) is data-store-retention-unverified's."""
    props, label = resource.props, _label(resource)
    if _is_data_store(resource, ctx):
        flag = _unknown_holds(resource)
        if resource.retain_on_delete is False and resource.protect is not True:
            yield (f"{label} would be deleted, with its data, on `pulumi destroy`{flag}; "
                   f"create it with ResourceOptions(retain_on_delete=True).")
        if _is_true(props.get("forceDestroy")):
            yield (f"{label} sets forceDestroy, so `pulumi destroy` empties it and its data is lost{flag}; "
                   f"remove forceDestroy (and keep retainOnDelete).")
    elif resource.retain_on_delete is False and resource.protect is not True:
        remedy = _final_backup_gap(resource, ctx)
        if remedy:
            yield (f"{label} would be deleted without a final backup on `pulumi destroy`, and its data lost; "
                   f"{remedy}, or create it with ResourceOptions(retain_on_delete=True).")


def _check_retention_unverified(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """The Pulumi policy engine does not pass retainOnDelete to policies (its resource options carry protect, not
    retainOnDelete), so a policy pack cannot tell a retained bucket from one `pulumi destroy` deletes: say so
    instead of passing silently. `goldenenv plan` always knows the option and never reaches this."""
    if resource.retain_on_delete is not None or resource.protect is True:
        return
    if _is_data_store(resource, ctx):
        why = "its data would be deleted with it"
    elif _final_backup_gap(resource, ctx):
        why = "it takes no final backup, so its data would be lost"
    else:
        return
    yield (f"cannot verify that {_label(resource)} survives `pulumi destroy` ({why} unless retainOnDelete is "
           f"set): the policy engine does not report retainOnDelete. Check it with `goldenenv plan`, or also set "
           f"ResourceOptions(protect=True), which policies can see.")


# ---------------------------------------------------------------- rules: pull, bucket services, teardown

def _check_pull_granted(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """A host whose boot pulls from a planned repository (its user data names the repository's address) holds a
    pull grant on it, as its provider reads grants: otherwise its golden container never starts."""
    for facts in ctx.providers:
        text = facts.boot_script(resource)
        if not text:
            continue
        for owner in ctx.providers:
            for repository in ctx.of_type(*owner.repositories):
                if not any(a and a in text for a in owner.repository_addresses(repository)):
                    continue
                gap = facts.pull_gap(resource, repository, ctx)
                if gap:
                    yield (f"{_label(resource)} {gap}, so its boot cannot pull the golden image from "
                           f"{_label(repository)}; grant its identity pull on that repository.")


def _check_bucket_services(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Every managed service that reads or writes the stack's bucket has its service identity granted there:
    otherwise imports fail and destroy's export, which saves the file system to the bucket, stops the destroy."""
    for facts in ctx.providers:
        if resource.type in facts.bucket_services:
            gap = facts.bucket_service_gap(resource, ctx)
            if gap:
                yield f"{_label(resource)} {gap}."


def _check_teardown(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    for facts in ctx.providers:
        blocker = facts.teardown_blocker(resource)
        if blocker:
            yield f"{_label(resource)} {blocker}."
