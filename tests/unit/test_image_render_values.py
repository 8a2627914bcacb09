"""`image render` never writes a value the lock does not have.

aws-h100's lock has no efa.installerSha256, and its Dockerfile checked the EFA tarball against the word `None`:
`image render` showed a Dockerfile `image build` would refuse. Over every lock: the Dockerfile holds no `None`, or
the command refuses, naming the key that is unset in the lock file.
"""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv.cli import app
from goldenenv.images.lock import lock_path, names

runner = CliRunner()


@pytest.mark.parametrize("name", names())
def test_image_render_writes_no_absent_value_or_refuses_naming_it(name):
    result = runner.invoke(app, ["image", "render", name], env={"COLUMNS": "250"})
    efa = (yaml.safe_load(lock_path(name).read_text()) or {}).get("efa") or {}
    if efa and not efa.get("installerSha256"):
        assert result.exit_code == 2, result.output
        assert "efa.installerSha256" in result.output and str(lock_path(name)) in result.output
        assert "FROM" not in result.output
        return
    assert result.exit_code == 0, result.output
    assert not re.search(r"\bNone\b", result.output), [l for l in result.output.splitlines() if "None" in l]

