"""Tencent Cloud's readiness warning on what only the account can answer before `up`: whether the zone sells each
rented type and whether the account's quota there holds the nodes, said once per zone, type and charge type, with the
calls that read them (CVM DescribeZoneInstanceConfigInfos and DescribeAccountQuota,
tencentcloud-sdk-python-cvm 3.1.178: PostPaidQuotaSet per zone, SpotPaidQuotaSet in vCPU cores)."""

from __future__ import annotations

import dataclasses

import shipped

from goldenenv.clouds.tencent import readiness

RULE = "strict:tencent-quota"


def quota_lines(resources) -> list[str]:
    return [f.message for f in readiness.findings(list(resources), {}) if f.rule == RULE]


def test_each_rented_type_is_said_once_with_its_count_cores_and_the_calls_that_read_it():
    plan, _ = shipped.planned("tencent-hccpnv5-2node")
    lines = quota_lines(plan.resources)
    gpu = [line for line in lines if "HCCPNV4ane.58XLARGE1929" in line]
    assert len(gpu) == 1, lines
    # 2 nodes x 232 vCPU (catalog instance_types.csv), pay-as-you-go, in the stack file's zone
    assert gpu[0].startswith("2 x HCCPNV4ane.58XLARGE1929 (464 vCPU cores) as POSTPAID_BY_HOUR in ap-guangzhou-3")
    assert "DescribeZoneInstanceConfigInfos" in gpu[0] and "Status SELL" in gpu[0]
    assert "DescribeAccountQuota" in gpu[0] and "PostPaidQuotaSet" in gpu[0]
    assert len(lines) == 2 and any(line.startswith("1 x S5.LARGE8") for line in lines), lines


def test_a_spot_pool_is_counted_against_the_spot_quota_in_cores():
    plan, _ = shipped.planned("tencent-hccpnv5-2node")
    spot = [dataclasses.replace(r, props={**r.props, "instanceChargeType": "SPOTPAID"})
            if "HCCPNV4ane" in str(r.props.get("instanceType")) else r for r in plan.resources]
    gpu = [line for line in quota_lines(spot) if "HCCPNV4ane" in line]
    assert gpu and "as SPOTPAID" in gpu[0] and "SpotPaidQuotaSet, counted in vCPU cores" in gpu[0]
