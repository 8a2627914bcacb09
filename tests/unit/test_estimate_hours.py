"""`goldenenv estimate --hours H`: H is the run's time at perfect scaling on the user's own configuration
(--instance-type or --gpu, × --gpus-per-node × --nodes); every option's hours and cost are filled by scaling H
with the option's GPUs × peak TFLOPS against that configuration, and the closing line speaks only of what the
user asked."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from goldenenv import catalog
from goldenenv.cli import app

runner = CliRunner()

RUN = ("--params", "13e9", "--zero", "3")
"""A 13B ZeRO-3 run that fits on one node of every 8-GPU data-centre type."""
MEASURED = (*RUN, "--hours", "10", "--instance-type", "p4d.24xlarge", "--nodes", "2")
"""10 hours at perfect scaling on 2 × p4d.24xlarge: 16 A100s at 312 dense bf16 TFLOPS each."""


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def run_text(*args: str) -> str:
    result = runner.invoke(app, ["estimate", *args], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.output


def option(doc: dict, instance_type: str, capacity: str = "on-demand") -> dict:
    return next(o for o in doc["options"] if o["instance_type"] == instance_type and o["capacity"] == capacity)


@pytest.fixture(scope="module")
def measured() -> dict:
    return run_json(*MEASURED)


def test_every_option_that_fits_and_has_a_price_gets_hours_and_a_cost(measured):
    fitting = [o for o in measured["options"] if o["fits"]]
    assert fitting
    assert all(o["hours"] is not None for o in fitting)
    assert all(o["cost"] is not None for o in fitting if o["price_per_hour"] is not None)
    assert measured["cheapest"] and measured["no_recommendation"] is None


def test_hours_scale_by_each_options_speed_against_the_measured_configuration(measured):
    # worked by hand: 10 h × 16 A100 × 312 TFLOPS ÷ (1 node × 8 GPUs × the option's TFLOPS), on one node (no
    # network), billed up to the next tenth
    assert option(measured, "p4de.24xlarge")["hours"] == 20.0        # 8 A100-80GB at 312: twice the time on half
    p5 = option(measured, "p5.48xlarge")
    assert p5["nodes"] == 1 and p5["hours"] == 6.4                    # 10 × 16 × 312 / (8 × 989) = 6.31 h
    assert option(measured, "p6-b200.48xlarge")["hours"] == 2.8      # 10 × 16 × 312 / (8 × 2250) = 2.77 h


def test_an_option_on_more_nodes_divides_by_its_own_scaling_efficiency(measured):
    for o in measured["options"]:
        if o["fits"] and o["gpu"] == "A100-40GB":
            ideal = 10 * 16 / (o["nodes"] * o["gpus_per_node"])
            assert o["hours"] == math.ceil(round(ideal / o["scaling_efficiency"] * 10, 6)) / 10


def test_the_cost_re_adds_by_hand_from_the_scaled_hours(measured):
    p5 = option(measured, "p5.48xlarge")
    price = catalog.price("aws", "p5.48xlarge", p5["price_region"])
    assert p5["cost"] == pytest.approx(price.usd_per_hour * p5["nodes"] * 6.4)


def test_the_users_own_configuration_takes_the_hours_they_gave():
    doc = run_json(*RUN, "--hours", "10", "--instance-type", "p5.48xlarge")
    p5 = option(doc, "p5.48xlarge")
    assert p5["nodes"] == 1 and p5["hours"] == doc["hours"] == 10.0


def test_the_json_says_how_the_hours_were_found(measured):
    assert "--hours 10" in measured["hours_basis"] and "p4d.24xlarge" in measured["hours_basis"]
    assert run_json(*RUN, "--tokens", "1e9")["hours_basis"] is None


def test_the_table_shows_hours_and_costs_and_no_deadline_it_was_not_given():
    text = run_text(*MEASURED)
    p5_row = next(line for line in text.splitlines() if "p5.48xlarge" in line and "on-demand" in line)
    assert "6.4" in p5_row and " USD" in p5_row.split("6.4", 1)[1]
    assert "deadline" not in text and "finishes within" not in text
    assert "cheapest (USD)" in text and "your --hours 10" in text


def test_a_deadline_is_judged_on_the_scaled_hours():
    doc = run_json(*MEASURED, "--deadline", "7")
    assert option(doc, "p5.48xlarge")["meets_deadline"] is True
    best = doc["cheapest"]["USD"]
    assert best["hours"] <= 7
    missed = run_json(*MEASURED, "--deadline", "0.01")
    assert not missed["cheapest"]
    assert missed["no_recommendation"] == "no priced option fits and finishes within 0.01 h"


def test_hours_without_the_gpu_they_were_measured_on_say_what_to_add():
    doc = run_json(*RUN, "--hours", "10")
    assert all(o["hours"] is None for o in doc["options"])
    assert "--gpu or --instance-type" in doc["no_recommendation"]
    text = run_text(*RUN, "--hours", "10")
    assert "--gpu or --instance-type" in text and "deadline" not in text


def test_a_run_that_fits_nowhere_says_so_without_a_deadline():
    doc = run_json("--params", "13e9", "--tokens", "1e9")     # ZeRO-0: 16 bytes per parameter on every GPU
    assert doc["no_recommendation"] == "no option fits the run in memory on up to 64 nodes"
    assert "deadline" not in run_text("--params", "13e9", "--tokens", "1e9")


def test_help_says_what_the_hours_were_measured_on():
    text = runner.invoke(app, ["estimate", "--help"], env={"COLUMNS": "250"}).output
    line = next(line for line in text.splitlines() if "--hours " in line)
    assert "--instance-type or --gpu" in line and "perfect scaling" in line
