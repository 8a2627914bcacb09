"""Alibaba Cloud storage and network prices in the catalog, as `goldenenv plan` shows them for the alicloud stacks."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from goldenenv import catalog
from goldenenv.cli import app
from goldenenv.plan import plan

runner = CliRunner()

TRAINING, DEV = "alicloud-ebmgn8v-2node", "alicloud-gn7i-dev"
PRICED = ("object storage", "parallel file system", "internet egress")
"""The storage / network lines the catalog prices on Alibaba Cloud (block volumes and the NAT gateway are not yet)."""


@pytest.fixture(scope="module")
def training():
    return plan(TRAINING)


@pytest.fixture(scope="module")
def dev():
    return plan(DEV)


# ---------------------------------------------------------------- literal anchors from the public tables

@pytest.mark.parametrize(("table", "region", "item", "tier", "unit", "price"), [
    # OSS docs 'Storage fees' (help.aliyun.com/en/oss/storage-fees): Standard LRS 0.12 CNY/GB-month
    ("storage_prices", "cn-wulanchabu", "object-store", "standard", "GB-month", 0.12),
    ("storage_prices", "cn-hangzhou", "object-store", "standard", "GB-month", 0.12),
    # CPFS docs 'Billing examples', case 1: 200 MB/s/TiB baseline in China (Hangzhou), 1.4 CNY/GiB/month
    ("storage_prices", "cn-hangzhou", "parallel-fs", "200", "GB-month", 1.4),
])
def test_alibaba_prices_match_the_public_tables(table, region, item, tier, unit, price):
    row = catalog.service_price(table, "alicloud", item, region, tier)
    assert row is not None and (row.region, row.unit, row.currency) == (region, unit, "CNY")
    assert row.price == price and row.as_of


def test_every_alibaba_service_price_is_in_the_currency_of_its_compute_prices():
    """A USD row would be added to a CNY total as if it were yuan: the cost model sums amounts, not currencies."""
    compute = {r["currency"] for r in catalog.rows("prices") if r["cloud"] == "alicloud"}
    assert compute == {"CNY"}
    for table in ("storage_prices", "network_prices"):
        rows = [r for r in catalog.rows(table) if r["cloud"] == "alicloud"]
        assert rows, table
        for r in rows:
            assert r["currency"] == "CNY" and r["source"], r


# ---------------------------------------------------------------- what `plan` shows

def test_training_stack_prices_cpfs_and_the_bucket(training):
    lines = {line.name: line for line in training.lines}
    assert all(line.currency == "CNY" for line in training.lines)
    fs = lines["parallel file system"]
    assert fs.amount == pytest.approx(4800 * 1.4 / 730)  # 4800 GiB of advance_200 CPFS
    assert "priced from cn-hangzhou" in fs.basis and not fs.verified
    bucket = lines["object storage"]
    assert bucket.amount == 0 and "priced from" not in bucket.basis  # Ulanqab's own row
    assert lines["internet egress"].amount == 0 and "0.8 CNY/GB" in lines["internet egress"].basis
    assert training.usd_per_hour == pytest.approx(sum(line.amount or 0 for line in training.lines))


@pytest.mark.parametrize("stack", [TRAINING, DEV])
def test_plan_no_longer_says_not_counted_for_the_priced_lines(stack):
    p = plan(stack)
    lines = {line.name: line for line in p.lines}
    for name in PRICED:
        if name in lines:
            assert lines[name].amount is not None, lines[name].basis
    note = next((f.message for f in p.findings if "not counted (no catalog price)" in f.message), "")
    assert not any(name in note for name in PRICED), note

    shown = runner.invoke(app, ["plan", "-s", stack], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    for row in shown.output.splitlines():
        if row.lstrip("│ ").startswith(PRICED):
            assert "not counted" not in row, row


def test_dev_stack_without_a_file_system_has_no_file_system_line(dev):
    names = [line.name for line in dev.lines]
    assert "parallel file system" not in names and "object storage" in names and "internet egress" in names
