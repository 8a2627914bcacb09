"""The stack's budget on Tencent Cloud: a billing budget that alerts (billing.Budget has no stop action), the stack
tag made a cost-allocation tag (bills are summarised by tag only for those), and with the hard stop the stop
function (stop.py on SCF, hourly) under a CAM role that may stop only the stack's tagged instances.

SCF's timer takes a 7-field cron (second minute hour day month weekday year; https://cloud.tencent.com/document/
product/583/9708); which time zone it runs in is not stated (unverified): hourly runs do not care.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from goldenenv.clouds.base import STOP_CORE, FunctionSource
from goldenenv.clouds.tencent import privilege, stop
from goldenenv.clouds.tencent.nodes import HostRoleArgs, host_role

RUNTIME = "Python3.9"
HANDLER = "stop.handler"
SCHEDULE = "0 0 */1 * * * *"
MEMORY_MIB = 128
SOURCE = FunctionSource(Path(__file__).parent, ("stop.py",), STOP_CORE)


def package(source: FunctionSource = SOURCE) -> str:
    """The function's zip, written once per code digest to the temporary folder (the provider's zip_file is a path
    it reads)."""
    path = Path(tempfile.gettempdir()) / f"goldenenv-tencent-stop-{source.digest()}.zip"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.part")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, file in sorted(source.contents().items()):
                info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                archive.writestr(info, Path(file).read_bytes())
        partial.replace(path)
    return str(path)


@dataclass(frozen=True, kw_only=True)
class BudgetGuardArgs:
    name: str
    monthly_limit: float
    currency: str
    thresholds: list[int]
    hard_stop: bool
    region: str
    tag_key: str
    tag_value: str
    project_key: str
    project_value: str
    role_name: str
    tags: dict[str, str]


class BudgetGuard(pulumi.ComponentResource):
    function_name: pulumi.Output[str] | None

    def __init__(self, name: str, args: BudgetGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:tencent:BudgetGuard", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        allocation = tencentcloud.billing.AllocationTag(f"{name}-cost-tag", tag_key=args.tag_key, opts=child)
        tencentcloud.billing.Budget(
            f"{name}-budget", budget_name=args.name, bill_type="BILL", budget_quota=f"{args.monthly_limit:.2f}",
            cycle_type="MONTH", fee_type="COST", plan_type="CYCLE", period_begin="2026-01", period_end="2099-12",
            budget_note="goldenenv: the stack's monthly limit",
            dimensions_range=tencentcloud.billing.BudgetDimensionsRangeArgs(tags=[
                tencentcloud.billing.BudgetDimensionsRangeTagArgs(tag_key=args.tag_key, tag_values=[args.tag_value])]),
            warn_jsons=[tencentcloud.billing.BudgetWarnJsonArgs(cal_type="PERCENTAGE", threshold_value=str(t),
                                                                warn_type="ACTUAL") for t in args.thresholds],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[allocation]))
        self.function_name = None
        if args.hard_stop:
            role_name = host_role(f"{name}-identity", HostRoleArgs(
                role_name=args.role_name, kind="stop", document=privilege.stop_document(args.tag_key, args.tag_value),
                tags=args.tags), child)
            function = tencentcloud.scf.Function(
                f"{name}-stop", name=args.name, runtime=RUNTIME, handler=HANDLER, zip_file=package(),
                mem_size=MEMORY_MIB, timeout=stop.TIMEOUT_SECONDS, role=role_name, enable_public_net=True,
                description="goldenenv: stops the stack's nodes when its month's spend reaches the limit",
                environment={stop.LIMIT_ENV: f"{args.monthly_limit:g}", stop.CURRENCY_ENV: args.currency,
                             stop.HARD_STOP_ENV: "true", stop.DRY_RUN_ENV: "false", stop.TAG_KEY_ENV: args.tag_key,
                             stop.TAG_VALUE_ENV: args.tag_value, stop.REGION_ENV: args.region,
                             stop.PROJECT_KEY_ENV: args.project_key, stop.PROJECT_VALUE_ENV: args.project_value},
                triggers=[tencentcloud.scf.FunctionTriggerArgs(name="hourly", type="timer", trigger_desc=SCHEDULE)],
                tags=args.tags, opts=child)
            self.function_name = function.name
        self.register_outputs({"function_name": self.function_name})
