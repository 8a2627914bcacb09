"""`goldenenv cost` and the cost columns of `goldenenv jobs`, as a user reads them, against a stand-in head that
answers Slurm's commands with recorded text (sacct and sreport in Slurm 22.05's formats), and each cloud's bill
reader against recorded answers in its API's documented shape (AWS through botocore's Stubber, which checks every
call against Cost Explorer's own model and refuses a filter other than the one expected; moto 5's Cost Explorer
would not: its get_cost_and_usage says "There is no validation yet on any of the input parameters").

Prices are literal: the local catalog's notional 2.00 USD per stand-in GPU-hour, aws-p5-2node's p5.48xlarge at
55.04 USD per node-hour (the catalog's on-demand row) over its 8 GPUs = 6.88."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone

import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from goldenenv import catalog, clouds, jobcost, jobs
from goldenenv.cli import app
from goldenenv.cloudbill import Bill
from goldenenv.lifecycle import load_spec
from goldenenv.slurm import view

THIS_MONTH = f"{datetime.now(timezone.utc):%Y-%m}"


def sacct_lines(month: str) -> str:
    """Three members' jobs of `month` (a requeued job's two starts, a cancelled one), tab-separated."""
    rows = [
        f"1|alice|REQUEUED|{month}-02T05:00:00|{month}-02T05:30:00|1800|billing=2,cpu=2,gres/gpu=1,node=1|"
        "node-0||train",
        f"1|alice|COMPLETED|{month}-02T06:00:00|{month}-02T07:00:00|3600|billing=2,cpu=2,gres/gpu=1,node=1|"
        "node-1||train",
        f"2|bob|CANCELLED by 2001|{month}-03T00:00:00|{month}-03T00:20:00|1200|billing=4,cpu=4,gres/gpu=2,node=2|"
        f"node-[0-1]||sft",
        f"3|carol|COMPLETED|{month}-04T00:00:00|{month}-04T00:06:00|360|billing=2,cpu=2,gres/gpu=1,node=1|node-0||x",
    ]
    return "".join(r.replace("|", "\t") + "\n" for r in rows)


SREPORT = "local|gres/gpu|8160|0|0|5400|1800|15360\n"
"""sreport_argv's fields: 5400 GPU-seconds idle and 1800 free while jobs waited (idle too, for the bill)."""


class RecordedHead(jobs.Head):
    """Slurm's commands answer recorded text; `fail` makes sacct (and sreport) answer as a head whose slurmdbd is
    down."""

    def __init__(self, sacct: str, scontrol: str = "", fail: str = ""):
        self.sacct, self.scontrol, self.fail = sacct, scontrol, fail
        self.asked: list[list[str]] = []

    def run(self, argv):
        if argv[:2] == ["env", f"TZ={view.TIME_ZONE}"]:
            argv = argv[2:]
        self.asked.append(argv)
        if argv[0] == "sacct":
            return (1, self.fail) if self.fail else (0, self.sacct)
        if argv[0] == "sreport":
            return (1, "sreport: error: Problem talking to the database") if self.fail else (0, SREPORT)
        if argv[:3] == ["scontrol", "show", "job"]:
            return 0, self.scontrol
        if argv[:3] == ["scontrol", "show", "node"]:
            return 0, ""
        return 0, ""

    def write(self, path, data):
        raise AssertionError("cost writes nothing on the head")


@pytest.fixture
def head(monkeypatch):
    recorded = RecordedHead(sacct_lines(THIS_MONTH))
    monkeypatch.setattr(jobs, "local_head", lambda spec: (recorded, None))
    monkeypatch.setattr(jobs, "cloud_head", lambda *args: recorded)
    return recorded


def invoke(*args: str, code: int = 0):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


EXPECTED_HOURS = {"alice": 1.5, "bob": 2 * 1200 / 3600, "carol": 0.1}
"""By hand from sacct_lines: alice's two starts (30 + 60 min on one GPU), bob's 20 min on two, carol's 6 min."""


def test_cost_by_user_shows_each_member_and_a_total_that_re_adds(head):
    shown = invoke("cost", "--by", "user").stdout
    lines = {line.split()[0]: line.split() for line in shown.splitlines() if line.split()}
    for user, hours in EXPECTED_HOURS.items():
        assert lines[user][2] == f"{hours:.3f}" and lines[user][3] == f"{hours * 2.00:.2f}", shown
    assert lines["total"][1:] == ["3", "2.267", "4.53"], shown  # the shown rows re-added: 3.00 + 1.33 + 0.20
    assert "2.0000 USD per GPU-hour" in shown and "notional" in shown, shown
    assert "no bill" in shown, shown
    sacct = next(a for a in head.asked if a[0] == "sacct")
    assert "--duplicates" in sacct and f"--starttime={THIS_MONTH}-01T00:00:00" in sacct


def test_json_and_csv_carry_the_same_numbers(head):
    report = json.loads(invoke("cost", "--by", "job", "--json").stdout)
    assert report["currency"] == "USD" and report["by"] == "job"
    assert [(r["job"], r["user"], r["gpu_hours"], r["cost"]) for r in report["rows"]] == [
        ("1", "alice", 1.5, 3.0), ("2", "bob", 0.667, 1.33), ("3", "carol", 0.1, 0.2)]
    assert report["total"] == {"jobs": 3, "gpu_hours": 2.267, "cost": 4.53}
    assert report["total"]["cost"] == round(sum(r["cost"] for r in report["rows"]), 2)
    rows = list(csv.DictReader(io.StringIO(invoke("cost", "--by", "job", "--csv").stdout)))
    assert [(r["job"], float(r["gpu_hours"]), float(r["cost_USD"])) for r in rows] == [
        ("1", 1.5, 3.0), ("2", 0.667, 1.33), ("3", 0.1, 0.2), ("total", 2.267, 4.53)]
    idle = next(d for d in report["difference"] if d["line"] == "idle and down GPU time")
    assert idle["amount"] == 4.0  # sreport's 5400 idle + 1800 planned GPU-seconds × 2.00


def test_without_sreport_the_jobs_cost_stands_and_the_idle_line_says_why(head, monkeypatch):
    monkeypatch.setattr(jobs, "utilization", lambda *args: (_ for _ in ()).throw(
        jobs.HeadError("sreport ... on the head failed (exit 1): sreport: error: Unknown option: --tres")))
    report = json.loads(invoke("cost", "--json").stdout)
    assert report["total"]["cost"] == 4.53
    assert report["difference"][0]["amount"] is None and "Unknown option" in report["difference"][0]["basis"]


def test_by_month_puts_the_period_in_one_row(head):
    report = json.loads(invoke("cost", "--by", "month", "--json").stdout)
    assert [r["month"] for r in report["rows"]] == [THIS_MONTH]


def test_a_head_whose_accounting_fails_is_exit_1_with_its_words(head):
    head.fail = "sacct: error: Problem talking to the database: Connection refused"
    result = invoke("cost", code=1)
    assert "Problem talking to the database: Connection refused" in " ".join(result.output.split())


@pytest.mark.parametrize("args, flag", [
    (["--by", "team"], "--by"), (["--month", "2026-13"], "--month"), (["--month", "december"], "--month"),
    (["--since", "yesterday"], "--since"), (["--month", "2026-12", "--since", "2026-12-01"], "--month, --since"),
])
def test_bad_input_is_exit_2_naming_the_flag(head, args, flag):
    result = invoke("cost", *args, code=2)
    assert result.output.startswith(flag), result.output
    assert "Traceback" not in result.output


def test_jobs_shows_each_jobs_user_gpu_hours_and_cost_as_cost_does(head, monkeypatch, tmp_path):
    where = jobs.Places(str(tmp_path / "jobs"), str(tmp_path / "checkpoints"), str(tmp_path / "code"), True)
    monkeypatch.setattr(jobs, "places", lambda spec: where)
    head.scontrol = "".join(
        f"JobId={i} JobName=train UserId={user}(200{i}) JobState=COMPLETED Reason=None Restarts=0 "
        f"StartTime={THIS_MONTH}-02T06:00:00 EndTime={THIS_MONTH}-02T07:00:00 NodeList=node-0 RunTime=01:00:00\n"
        for i, user in ((1, "alice"), (2, "bob"), (3, "carol")))
    listed = json.loads(invoke("jobs", "--json").stdout)
    costs = {r["job"]: r for r in json.loads(invoke("cost", "--by", "job", "--json").stdout)["rows"]}
    for job in listed:
        assert job["user"] == costs[job["id"]]["user"]
        assert round(job["gpu_hours"], 3) == costs[job["id"]]["gpu_hours"]
        assert round(job["cost"], 2) == costs[job["id"]]["cost"]
        assert job["currency"] == "USD"
    table = invoke("jobs").stdout
    assert "alice" in table and "GPU-h" in table and "cost in USD" in table, table
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["1"])
    assert (lines[at].split()[-1], lines[at + 1].split()[-1]) == ("1.50", "3.00"), table
    assert max(len(line) for line in lines) <= 80, table


def test_jobs_without_accounting_still_lists_the_queue(head, monkeypatch, tmp_path):
    where = jobs.Places(str(tmp_path / "jobs"), str(tmp_path / "checkpoints"), str(tmp_path / "code"), True)
    monkeypatch.setattr(jobs, "places", lambda spec: where)
    head.scontrol = "JobId=1 JobName=train UserId=alice(2001) JobState=RUNNING Restarts=0 NodeList=node-0\n"
    head.fail = "sacct: error: Slurm accounting storage is disabled"
    result = invoke("jobs")
    assert "alice" in result.stdout and "accounting storage is disabled" in " ".join(result.output.split())


# the bill beside it

def window():
    return jobcost.month_window("2026-11")


def test_aws_reads_cost_explorer_by_the_stacks_tags(monkeypatch):
    import boto3

    spec = load_spec("aws-p5-2node")
    client = boto3.client("ce", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("get_cost_and_usage", {
        "ResultsByTime": [{"TimePeriod": {"Start": "2026-11-01", "End": "2026-12-01"}, "Estimated": False,
                           "Total": {"UnblendedCost": {"Amount": "1234.5678", "Unit": "USD"}}, "Groups": []}],
        "DimensionValueAttributes": []}, expected_params={
        "TimePeriod": {"Start": "2026-11-01", "End": "2026-12-01"}, "Granularity": "MONTHLY",
        "Metrics": ["UnblendedCost"],
        "Filter": {"And": [
            {"Tags": {"Key": "goldenenv:stack", "Values": ["aws-p5-2node"], "MatchOptions": ["EQUALS"]}},
            {"Tags": {"Key": "project", "Values": ["llm-pretrain"], "MatchOptions": ["EQUALS"]}}]}})
    with stub:
        bill = clouds.load("aws", "bill").read(spec, window(), {}, client)
    assert (bill.amount, bill.currency) == (1234.5678, "USD")
    assert "goldenenv:stack=aws-p5-2node" in bill.words


def test_aws_bill_refused_is_said_not_raised():
    import boto3

    client = boto3.client("ce", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_client_error("get_cost_and_usage", "AccessDeniedException", "not authorized to perform: "
                          "ce:GetCostAndUsage")
    with stub:
        bill = clouds.load("aws", "bill").read(load_spec("aws-p5-2node"), window(), {}, client)
    assert bill.amount is None and "ce:GetCostAndUsage" in bill.words
    assert bill.words.startswith("the bill is not read from here for aws")


def test_cost_on_aws_shows_the_bill_beside_the_jobs(head, monkeypatch):
    monkeypatch.setattr(clouds.load("aws", "bill"), "read",
                        lambda spec, window, env, api=None: Bill(99.5, "USD", "days", "AWS Cost Explorer"))
    report = json.loads(invoke("cost", "-s", "aws-p5-2node", "--json").stdout)
    assert report["bill"]["amount"] == 99.5
    assert report["rows"][0]["cost"] == round(1.5 * 6.88, 2)  # alice: the catalog's p5.48xlarge ÷ 8 GPUs
    names = [d["line"] for d in report["difference"]]
    assert names[0] == "idle and down GPU time" and "compute head" in names and "block volumes" in names
    lines = sum(d["amount"] for d in report["difference"] if d["amount"] is not None)
    assert report["unexplained"] == pytest.approx(99.5 - report["total"]["cost"] - lines, abs=0.01 * len(names))


def test_tencent_reads_its_bill_by_the_stop_functions_reader():
    asked = []

    def api(service, version, action, params):
        asked.append((action, params))
        return {"Ready": 1, "SummaryOverview": [{"TagValue": "tencent-gn7-dev", "RealTotalCost": "321.5"}]}

    bill = clouds.load("tencent", "bill").read(load_spec("tencent-gn7-dev"), window(), {}, api)
    assert (bill.amount, bill.currency) == (321.5, "CNY")
    assert asked == [("DescribeBillSummaryByTag", {"BeginTime": "2026-11", "EndTime": "2026-11",
                                                   "TagKey": "goldenenv:stack", "TagValue": "tencent-gn7-dev"})]


def test_huawei_reads_the_records_of_the_stacks_tags():
    def api(method, host, path, body):
        return {"currency": "CNY", "total_count": 2, "fee_records": [
            {"amount": 10.25, "resource_tag": "goldenenv:stack=huawei-gpu-dev;project=llm-pretrain"},
            {"amount": 99.0, "resource_tag": "goldenenv:stack=huawei-gpu-dev;project=another"}]}

    bill = clouds.load("huawei", "bill").read(load_spec("huawei-gpu-dev"), window(), {}, api)
    assert (bill.amount, bill.currency) == (10.25, "CNY")


def test_alicloud_reads_its_split_bill_by_the_guards_reader():
    def api(action, params):
        assert params["TagFilter.1.TagValues.1"] == "alicloud-gn7i-dev" and params["BillingCycle"] == "2026-11"
        return {"Data": {"Items": [{"PretaxAmount": 12.5, "Currency": "CNY"}, {"PretaxAmount": 0.5}]}}

    bill = clouds.load("alicloud", "bill").read(load_spec("alicloud-gn7i-dev"), window(), {}, api)
    assert (bill.amount, bill.currency) == (13.0, "CNY")


@pytest.mark.parametrize("cloud", [c for c in clouds.names() if c != "aws"])
def test_every_cloud_says_where_its_bill_is_or_why_it_is_not_read_here(cloud):
    """Without credentials (an empty environment): an amount never; the words say why (or that there is none)."""
    stack = next(s for s in ("local", "alicloud-gn7i-dev", "azure-nc-dev", "gcp-g2-dev", "huawei-gpu-dev",
                             "tencent-gn7-dev") if load_spec(s).cloud == cloud)
    bill = clouds.load(cloud, "bill").read(load_spec(stack), window(), {})
    assert bill.amount is None
    if cloud in catalog.container_clouds():
        assert bill.words.startswith("no bill"), bill
    else:
        why = bill.words.removeprefix(f"the bill is not read from here for {cloud}: ")
        assert why != bill.words and len(why) > 20, bill
