"""`goldenenv plan` as a user runs it, and the program as the Pulumi CLI runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import catalog, program
from goldenenv.cli import app
from goldenenv.plan import STACKS, run_program

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_plan_shows_nodes_efa_placement_fsx_budget_and_passes():
    result = runner.invoke(app, ["plan", "-s", "aws-p5-2node"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    efa = catalog.instance_type("aws", "p5.48xlarge").rdma_interfaces
    # two GPU nodes and the Slurm head
    assert result.output.count("aws:ec2/instance:Instance") == 3
    assert "aws-p5-2node-head aws:ec2/instance:Instance" in result.output
    assert f"efa={efa} ena=1" in result.output
    assert "strategy=cluster" in result.output
    assert "DataRepositoryAssociation" in result.output and "dataRepositoryPath=s3://" in result.output
    assert "TopicSubscription" in result.output and "protocol=lambda" in result.output
    assert "no guardrail failed" in result.output


def test_plan_json_prices_the_pools_from_the_catalog():
    result = runner.invoke(app, ["plan", "-s", "aws-p5-2node", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    price = catalog.price("aws", "p5.48xlarge", "us-east-1")
    [compute] = [line for line in doc["cost"]["lines"] if line["name"] == "compute gpu"]
    assert compute["amount"] == pytest.approx(2 * price.usd_per_hour, abs=0.01)
    # the stack's cost is every line: compute, the parallel file system, volumes, the NAT gateway ...
    hourly = sum(line["amount"] for line in doc["cost"]["lines"])
    assert doc["cost"]["usdPerHour"] == pytest.approx(hourly, abs=0.01) and hourly > 2 * price.usd_per_hour + 1
    assert doc["cost"]["usdPerMonth"] == pytest.approx(hourly * 730, abs=1)
    assert doc["cost"]["budgetUsdPerMonth"] == 40000
    assert doc["failed"] is False
    assert any("budget lasts" in f["message"] for f in doc["findings"])


def test_plan_exits_non_zero_when_a_guardrail_fails(monkeypatch):
    """A regression that drops the volume tag specification is caught, and the plan fails."""
    from goldenenv.clouds.aws import nodes

    monkeypatch.setattr(nodes, "TAGGED_AT_LAUNCH", ("instance", "network-interface"))
    result = runner.invoke(app, ["plan", "-s", "aws-p5-2node"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "untagged-resource" in result.output and "volume" in result.output
    assert "guardrails failed" in result.output


def test_pulumi_project_runs_the_same_program_from_the_stacks_folder():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["virtualenv"] == ".venv"
    assert (ROOT / project["main"] / "__main__.py").is_file()
    assert (ROOT / project["stackConfigDir"]).resolve() == STACKS


def test_program_main_exports_the_outputs_under_the_pulumi_runtime(monkeypatch):
    """What `pulumi up` runs: main() exports every output of build(). Its live lookups (the account, retained
    stores) answer offline here."""
    from goldenenv.clouds.aws import retained

    monkeypatch.setattr(retained, "LiveLookup", lambda region: retained.OfflineLookup(account="123456789012"))
    exported = {}
    config = yaml.safe_load((STACKS / "Pulumi.aws-g5-dev.yaml").read_text())["config"]
    original = pulumi.export
    try:
        pulumi.export = lambda key, value: exported.__setitem__(key, value)
        run_program("aws-g5-dev", config)  # sets up mocks and config
        program.main()
    finally:
        pulumi.export = original
    assert {"nodePrivateIps", "hostfile", "launchEnv", "ssmConnect", "bucket", "budgetName"} <= set(exported)
    assert "fsxMount" not in exported  # the dev stack has no parallel file system


def test_program_turns_bad_config_into_a_run_error_without_traceback():
    config = yaml.safe_load((STACKS / "Pulumi.aws-g5-dev.yaml").read_text())["config"]
    run_program("aws-g5-dev", config)
    pulumi.runtime.set_config("goldenenv:nodes", json.dumps({"instanceType": "g5.xlargee", "count": 1}))
    with pytest.raises(pulumi.RunError, match="goldenenv:nodes.instanceType.*did you mean g5.xlarge"):
        program.main()


def test_plan_of_the_local_stack_lists_what_up_creates_at_no_cost():
    from goldenenv.images.lock import load

    result = runner.invoke(app, ["plan", "-s", "local", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    containers = [r for r in doc["resources"] if r["type"] == "docker:container"]
    assert {c["props"]["image"] for c in containers} == {load("cpu-dev").tag}
    nodes = [c for c in containers if "role" not in c["props"]]
    assert len(nodes) == 2
    assert sorted(c["props"]["role"] for c in containers if "role" in c["props"]) == [
        "MariaDB: the accounting history", "slurmctld and slurmdbd", "starts a lost node, head or database again"], \
        "the Slurm head, the accounting database, and the stand-in for the cloud's recovery"
    assert doc["cost"]["usdPerHour"] == 0
    volumes = {r["name"]: r for r in doc["resources"] if r["type"] == "docker:volume"}
    assert volumes["goldenenv-local-data"]["retainOnDelete"] is True
    assert not volumes["goldenenv-local-munge"].get("retainOnDelete"), "the munge key goes with the cluster"


SHIPPED = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS.glob("Pulumi.*.yaml"))
PUBLIC_IMAGE = {"alicloud-ebmgn8v-2node", "alicloud-gn7i-dev"}
"""Shipped stacks on Alibaba's public Ubuntu image (the catalog's only Alibaba host image), which has no NVIDIA
driver, Docker or NVIDIA Container Toolkit: the host lock's install step provides them at first boot."""


@pytest.mark.parametrize("stack", SHIPPED)
def test_every_shipped_stack_passes_plan_strict(stack):
    """The deploy-readiness rules `up` runs accept every stack the project ships."""
    result = runner.invoke(app, ["plan", "-s", stack, "--strict", "--json"])
    assert result.exit_code == 0, result.output
    assert not [f for f in json.loads(result.output)["findings"] if f["severity"] == "error"]


@pytest.mark.parametrize("stack", sorted(PUBLIC_IMAGE))
def test_a_stack_on_a_host_image_without_driver_or_docker_installs_them_at_first_boot(stack):
    """plan shows the whole stack and, per pool, that its first boot installs the driver, the engine and the
    toolkit; none of them is a need up refuses."""
    assert stack in SHIPPED
    result = runner.invoke(app, ["plan", "-s", stack, "--strict", "--json"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["resources"] and doc["cost"]["lines"]  # the plan is all there
    (pool,) = doc["compat"]
    layer = pool["hostLayer"]
    assert layer["installsAtFirstBoot"] and layer["os"] == "ubuntu-22.04"
    assert {n: layer["byNeed"][n]["by"] for n in ("engine", "driver", "toolkit")} == dict.fromkeys(
        ("engine", "driver", "toolkit"), "install")
    assert pool["driver"] == layer["byNeed"]["driver"]["version"]
    refused = [f["message"] for f in doc["findings"] if f["rule"] == "compat:host-layer"]
    assert not [m for m in refused if any(f"lacks {n} " in m for n in ("engine", "driver", "toolkit"))]
    shown = runner.invoke(app, ["plan", "-s", stack], env={"COLUMNS": "250"}).output
    assert "host layer (ubuntu-gpu, ubuntu-22.04): first boot installs engine" in shown


@pytest.mark.parametrize("stack", sorted(PUBLIC_IMAGE))
def test_a_refused_stack_passes_with_its_own_image(stack, tmp_path):
    """The stack's own {id, driver} is its statement that the image has the driver and Docker."""
    doc = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    doc["config"]["goldenenv:nodes"]["hostImage"] = {"id": "m-goldenenv0test0image", "driver": "570.133.20"}
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["plan", "-s", stack, "--strict", "--json", "--stacks-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert not [f for f in json.loads(result.output)["findings"] if f["severity"] == "error"]
