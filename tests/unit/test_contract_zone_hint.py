"""A zone outside the stack's region is refused with an example zone written the way that stack's cloud writes it.

Every cloud was shown AWS's form ("e.g. us-central1a" on Google, "eastusa" on Azure), which no cloud but AWS
takes. The example now comes from the cloud's catalog folder (its zones of the region, zones.csv, else its zone form,
zone_forms.csv), so a user copying it writes a zone the cloud knows.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import goldenenv.clouds  # noqa: F401  (registers the clouds)
from goldenenv import catalog, stackconfig
from goldenenv.cli import app
from goldenenv.clouds import base

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
SHIPPED = {}
for _path in sorted((REPO / "stacks").glob("Pulumi.*.yaml")):
    SHIPPED.setdefault(stackconfig.read_stack_file(_path)["goldenenv:cloud"], _path)
CLOUDS = [name for name in base.names() if base.get(name).uses_pulumi]


@pytest.mark.parametrize("cloud", CLOUDS)
@pytest.mark.parametrize("key", ["goldenenv:zone", "goldenenv:zones"])
def test_a_zone_outside_the_region_is_refused_with_the_clouds_own_example(cloud, key, tmp_path):
    config = copy.deepcopy(stackconfig.read_stack_file(SHIPPED[cloud]))
    config.pop("goldenenv:zones", None)
    config.pop("goldenenv:zone", None)
    config[key] = ["elsewhere-9z"] if key.endswith("zones") else "elsewhere-9z"
    (tmp_path / "Pulumi.moved.yaml").write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "-s", "moved", "--stacks-dir", str(tmp_path)], env={"COLUMNS": "250"})
    assert result.exit_code == 2, result.output
    region = config["goldenenv:region"]
    found = re.search(rf"is not in region '{re.escape(region)}' \(e\.g\. ([a-z0-9-]+)\)", result.output)
    assert found, result.output
    example = found.group(1)
    known = catalog.zones(cloud, region)
    if known:
        assert example in known.zones, f"{example} is not a zone of {region} in the catalog: {known.zones}"
    assert example.startswith(region) and example != region


@pytest.mark.parametrize(("cloud", "region", "zone"), [
    ("gcp", "us-central1", "us-central1-a"),      # Compute Engine "Regions and zones": us-central1-a
    ("gcp", "asia-east1", "asia-east1-a"),        # not in the catalog: Google's form
    ("azure", "eastus", "eastus-1"),              # the catalog's form of Azure's zone 1 in East US
    ("aws", "us-east-1", "us-east-1a"),           # EC2's zone names: us-east-1a
])
def test_each_clouds_example_is_written_its_way(cloud, region, zone):
    assert catalog.zone_example(cloud, region) == zone


@pytest.mark.parametrize("cloud", CLOUDS)
def test_every_cloud_says_how_it_writes_a_zone(cloud):
    assert catalog.zone_form(cloud).count("{region}") == 1
