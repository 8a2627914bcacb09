"""The README's failover section says which clouds refuse a zone list, and why; the clouds do refuse it.

`goldenenv:zones` was described as if every cloud took it, while Google Cloud and Azure stacks refuse it (their
RoCE network, placement and Managed Lustre are zonal). Every registered cloud without zone failover is named in the
section with the key, and a stack of it listing two of its zones is refused naming goldenenv:zones.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import goldenenv.clouds  # noqa: F401  (registers the clouds)
from goldenenv import catalog, stackconfig
from goldenenv.cli import app
from goldenenv.clouds import base
from goldenenv.clouds.base import Capability

REPO = Path(__file__).resolve().parents[2]
README_NAMES = {"aws": "AWS", "alicloud": "Alibaba", "gcp": "Google Cloud", "azure": "Azure", "tencent": "Tencent", "huawei": "Huawei"}
"""How the README names each cloud (a new cloud adds its name here)."""
runner = CliRunner()


def failover_section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Capacity that fails over")
    return " ".join(text[start:text.index("\n## ", start + 1)].split())


NO_ZONE_LISTS = [n for n in base.names() if base.get(n).uses_pulumi
                 and Capability.ZONE_FAILOVER not in base.get(n).capabilities]


def test_some_clouds_refuse_zone_lists():
    assert {"gcp", "azure"} <= set(NO_ZONE_LISTS)


@pytest.mark.parametrize("cloud", NO_ZONE_LISTS)
def test_the_readme_says_the_cloud_refuses_a_zone_list_and_the_cloud_does(cloud, tmp_path):
    section = failover_section()
    paragraph = next((p for p in section.split("**") if "refuse `goldenenv:zones`" in p), "")
    assert README_NAMES[cloud] in paragraph and "zonal" in paragraph, paragraph
    path = next(p for p in sorted((REPO / "stacks").glob("Pulumi.*.yaml"))
                if stackconfig.read_stack_file(p)["goldenenv:cloud"] == cloud)
    config = copy.deepcopy(stackconfig.read_stack_file(path))
    config.pop("goldenenv:zone", None)
    config["goldenenv:zones"] = list(catalog.zones(cloud, config["goldenenv:region"]).zones[:2])
    (tmp_path / "Pulumi.listed.yaml").write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "-s", "listed", "--stacks-dir", str(tmp_path)], env={"COLUMNS": "250"})
    assert result.exit_code == 2 and "goldenenv:zones" in result.output, result.output
