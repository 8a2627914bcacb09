"""What each job cost, read from sacct's text as Slurm 22.05 writes it (its man page's formats,
https://slurm.schedmd.com/archive/slurm-22.05.8/sacct.html): every start of a requeued job, a running job up to
now, a cancelled one, an array task, a job that never started, an Ascend job's NPUs, a two-pool stack.

Prices in the expectations are literal: the local catalog's notional 2.00 USD per stand-in GPU-hour
(goldenenv/clouds/local/catalog/local_shapes.csv) and the pricePerHour the two-pool stack here gives its pools
(g5.xlarge has one GPU)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from goldenenv import jobcost
from goldenenv.lifecycle import load_spec

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=timezone.utc)
DECEMBER = jobcost.month_window("2026-12")
LOCAL_RATE = 2.00


def sacct(*lines: str) -> str:
    """sacct --parsable2 --noheader --delimiter=TAB lines of jobcost.FIELDS, written with | for legibility."""
    return "".join(line.replace("|", "\t") + "\n" for line in lines)


TEXT = sacct(
    # requeued: the first start ended REQUEUED after 600 s on one node, the second completed after 1200 s
    "7|alice|REQUEUED|2026-12-02T05:00:00|2026-12-02T05:10:00|600|"
    "billing=2,cpu=2,gres/gpu=1,mem=1000M,node=1|node-0||train",
    "7|alice|COMPLETED|2026-12-02T05:12:00|2026-12-02T05:32:00|1200|"
    "billing=2,cpu=2,gres/gpu=1,mem=1000M,node=1|node-1||train",
    # running on two nodes since 11:00: End Unknown, ElapsedRaw as of when sacct answered
    "8|bob|RUNNING|2026-12-07T11:00:00|Unknown|3000|"
    "billing=4,cpu=4,gres/gpu=2,mem=2000M,node=2|node-[0-1]||llama|sft",
    # cancelled by uid 2001 after 900 s
    "9|bob|CANCELLED by 2001|2026-12-03T00:00:00|2026-12-03T00:15:00|900|"
    "billing=2,cpu=2,gres/gpu=1,mem=1000M,node=1|node-0||x",
    # an array task
    "12_3|alice|COMPLETED|2026-12-04T00:00:00|2026-12-04T01:00:00|3600|billing=2,cpu=2,gres/gpu=1,node=1|node-1||arr",
    # cancelled while pending: never started, nothing allocated
    "13|alice|CANCELLED by 2000|Unknown|2026-12-04T02:00:00|0||None assigned||never",
    # a job of no GPU (a CPU-only allocation)
    "14|carol|COMPLETED|2026-12-04T00:00:00|2026-12-04T01:00:00|3600|billing=1,cpu=1,node=1|node-0||cpu",
)


@pytest.fixture(scope="module")
def local():
    return load_spec("local")


def test_every_start_of_a_requeued_job_counts_and_a_running_job_counts_up_to_now(local):
    records = jobcost.parse(TEXT, "gres/gpu")
    assert [r.job_id for r in records] == ["7", "7", "8", "9", "12_3", "13", "14"]
    assert [r.state for r in records[:4]] == ["REQUEUED", "COMPLETED", "RUNNING", "CANCELLED"]
    assert records[2].end is None and records[2].name == "llama\tsft"
    by_job = {r.key: r for r in jobcost.rows(jobcost.price(records, local, DECEMBER, NOW), "job")}
    assert set(by_job) == {"7", "8", "9", "12_3"}
    assert by_job["7"].gpu_hours == pytest.approx((600 + 1200) / 3600)
    assert by_job["7"].jobs == 1
    assert by_job["8"].gpu_hours == pytest.approx(2 * 1.0)  # 11:00 to NOW on two GPUs
    assert by_job["9"].gpu_hours == pytest.approx(0.25)
    assert by_job["12_3"].gpu_hours == pytest.approx(1.0)
    assert by_job["7"].cost == pytest.approx(0.5 * LOCAL_RATE)


def test_by_user_and_the_total_re_add_to_the_jobs(local):
    priced = jobcost.price(jobcost.parse(TEXT, "gres/gpu"), local, DECEMBER, NOW)
    users = {r.key: r for r in jobcost.rows(priced, "user")}
    assert users["alice"].gpu_hours == pytest.approx(0.5 + 1.0)
    assert users["bob"].gpu_hours == pytest.approx(2.0 + 0.25)
    assert users["alice"].jobs == 2 and "carol" not in users
    shown = jobcost.rounded(list(users.values()))
    assert shown.cost == round(sum(c for _, _, c in shown.rows), 2) == pytest.approx(3.75 * LOCAL_RATE)


def test_rounded_rows_re_add_exactly_to_the_total():
    """Three rows of a third of a cent each: the total is what the shown rows add to, not the unrounded sum."""
    found = [jobcost.Row(str(i), "u", 1 / 3, 0.3333, 1) for i in range(3)]
    shown = jobcost.rounded(found)
    assert [c for _, _, c in shown.rows] == [0.33, 0.33, 0.33]
    assert shown.cost == 0.99
    assert [h for _, h, _ in shown.rows] == [0.333] * 3 and shown.gpu_hours == 0.999


def test_a_job_across_a_month_boundary_is_split_between_the_months(local):
    text = sacct("20|alice|COMPLETED|2026-11-30T23:00:00|2026-12-01T01:00:00|7200|gres/gpu=1,node=1|node-0||x")
    priced = jobcost.price(jobcost.parse(text, "gres/gpu"), local, None, NOW)
    months = {r.key: r.gpu_hours for r in jobcost.rows(priced, "month")}
    assert months == {"2026-11": pytest.approx(1.0), "2026-12": pytest.approx(1.0)}
    december = jobcost.price(jobcost.parse(text, "gres/gpu"), local, DECEMBER, NOW)
    assert sum(p.gpu_hours for p in december) == pytest.approx(1.0)


def test_an_ascend_job_counts_its_npus_not_gpus():
    spec = load_spec("huawei-snt9b-2node")
    text = sacct("30|alice|COMPLETED|2026-12-05T00:00:00|2026-12-05T00:30:00|1800|"
                 "billing=8,cpu=192,gres/npu=8,mem=1T,node=1|node-0||pretrain")
    assert jobcost.parse(text, "gres/gpu")[0].gpus == 0
    priced = jobcost.price(jobcost.parse(text, "gres/npu"), spec, DECEMBER, NOW)
    assert [p.gpu_hours for p in priced] == [pytest.approx(4.0)]
    assert priced[0].price.currency == "CNY"


def test_typed_gres_counts_once():
    assert jobcost.tres_count("cpu=2,gres/gpu=2,gres/gpu:a100=2,node=1", "gres/gpu") == 2
    assert jobcost.tres_count("cpu=2,gres/gpu:a100=2,gres/gpu:h100=1", "gres/gpu") == 3
    assert jobcost.tres_count("", "gres/gpu") == 0


def two_pools(spec):
    """aws-g5-dev (g5.xlarge: one GPU a node) with two pools: `a` priced 8.00 and `b` 16.00 per node-hour."""
    first = spec.nodes[0]
    return spec.model_copy(update={"nodes": [first.model_copy(update={"name": "a", "price_per_hour": 8.0}),
                                             first.model_copy(update={"name": "b", "price_per_hour": 16.0})]})


def test_a_two_pool_stack_prices_each_job_at_its_pool():
    spec = two_pools(load_spec("aws-g5-dev"))
    text = sacct("40|alice|COMPLETED|2026-12-05T00:00:00|2026-12-05T01:00:00|3600|gres/gpu=1,node=1|n-a0|b|x",
                 "41|alice|COMPLETED|2026-12-05T00:00:00|2026-12-05T01:00:00|3600|gres/gpu=1,node=1|n-b[3-4]||x",
                 "42|alice|COMPLETED|2026-12-05T00:00:00|2026-12-05T01:00:00|3600|gres/gpu=1,node=1|gone-9||x")
    pools = jobcost.node_pools("n-a0|a\nn-b3|b\nn-b4|b,other\n", spec)
    priced = {p.record.job_id: p for p in jobcost.price(jobcost.parse(text, "gres/gpu"), spec, DECEMBER, NOW, pools)}
    assert (priced["40"].pool, priced["40"].cost) == ("b", pytest.approx(16.0))  # its --constraint, not its node
    assert (priced["41"].pool, priced["41"].cost) == ("b", pytest.approx(16.0))  # its first node's feature
    assert (priced["42"].pool, priced["42"].cost) == ("", None)  # a node Slurm no longer lists: not priced
    assert jobcost.rows(list(priced.values()), "user")[0].cost is None


def test_sacct_asks_for_every_start_of_every_allocation_in_the_period():
    argv = jobcost.sacct_argv(DECEMBER.since, DECEMBER.until)
    assert argv[:6] == ["sacct", "--allusers", "--duplicates", "--allocations", "--parsable2", "--noheader"]
    assert "--starttime=2026-12-01T00:00:00" in argv and "--endtime=2027-01-01T00:00:00" in argv
    assert "--format=JobID,User,State,Start,End,ElapsedRaw,AllocTRES,NodeList,Constraints,JobName" in argv
    assert "--jobs=7,8" in jobcost.sacct_argv(job_ids=["7", "8"])


def test_sreport_utilization_is_read_in_the_fields_asked_for():
    assert jobcost.sreport_argv(DECEMBER.since, DECEMBER.until, "gres/gpu")[-1] == (
        "format=Cluster,TresName,Allocated,Down,PlannedDown,Idle,Planned,Reported")
    text = "local|gres/gpu|7200|360|0|3000|600|11160\n"
    used = jobcost.parse_sreport(text, "gres/gpu")
    assert (used.allocated, used.idle, used.planned, used.down) == (7200, 3000, 600, 360)
    assert jobcost.parse_sreport(text, "gres/npu") is None


@pytest.mark.parametrize("month", ["2026-13", "12-2026", "dec"])
def test_a_month_that_is_not_one_says_the_form(month):
    with pytest.raises(ValueError, match="YYYY-MM"):
        jobcost.month_window(month)
