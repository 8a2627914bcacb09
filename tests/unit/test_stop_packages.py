"""RULE: every cloud's stop function runs from its shipped package alone, the stop core inside it.

Each package is unpacked into an empty folder and its entry module imported in a fresh interpreter that sees only
that folder (``python -I -S``: no site-packages, so no goldenenv and no cloud SDK): an import of the core that the
package lacks fails here, before it fails in the cloud. The import then runs one rule of the core through the entry
module, so the core found is the one shipped. A cloud with the hard stop and no package named here fails.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from goldenenv.clouds import base
from goldenenv.clouds.base import Capability

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HARD_STOP_CLOUDS = sorted(n for n in base.names() if Capability.HARD_STOP in base.get(n).capabilities)


def _archive_files(archive) -> dict[str, bytes]:
    """The files of a pulumi.AssetArchive of FileAssets."""
    return {name: Path(asset.path).read_bytes() for name, asset in archive.assets.items()}


def gcp() -> dict[str, bytes]:
    from goldenenv.clouds.gcp import budget

    return _archive_files(budget.source_archive())


def azure() -> dict[str, bytes]:
    from goldenenv.clouds.azure import budget

    return _archive_files(budget.source_archive())


def aws() -> dict[str, bytes]:
    from goldenenv.clouds.aws import teardown

    return _archive_files(teardown.reaper_archive())


def tencent() -> dict[str, bytes]:
    from goldenenv.clouds.tencent import budget

    with zipfile.ZipFile(budget.package()) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def alicloud() -> dict[str, bytes]:
    from goldenenv.clouds.alicloud import budget

    with zipfile.ZipFile(io.BytesIO(budget.code_zip())) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def huawei() -> dict[str, bytes]:
    from goldenenv.clouds.huawei import budget

    with zipfile.ZipFile(io.BytesIO(budget.package())) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


PACKAGES: dict[str, tuple[Callable[[], dict[str, bytes]], str]] = {
    "gcp": (gcp, "main"),
    "azure": (azure, "function_app"),
    "aws": (aws, "reaper"),
    "alicloud": (alicloud, "guard"),
    "tencent": (tencent, "stop"),
    "huawei": (huawei, "stop"),
}
"""cloud -> (its stop function's package as shipped: file name -> bytes, the entry module)."""

PROBE = """
import json, sys
sys.path[:0] = [sys.argv[1]]
entry = __import__(sys.argv[2])
core = sys.modules["stopcore"]
verdict = core.judge_spend("NaN", 100, currency="USD", cost_currency="USD", deployed_limit=None)
print(json.dumps({"core": core.__file__, "entry": entry.__file__, "stop": verdict.stop,
                  "goldenenv": "goldenenv" in sys.modules}))
"""


@pytest.mark.parametrize("cloud", HARD_STOP_CLOUDS)
def test_the_shipped_package_imports_and_runs_alone(cloud, tmp_path):
    assert cloud in PACKAGES, f"{cloud} declares the hard stop but its stop function's package is not checked here"
    files, entry = PACKAGES[cloud]
    shipped = files()
    assert "stopcore.py" in shipped, f"{cloud}'s package lacks the stop core: {sorted(shipped)}"
    for name, data in shipped.items():
        (tmp_path / name).write_bytes(data)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, str(tmp_path), entry], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(found["core"]).parent == Path(found["entry"]).parent == tmp_path
    assert found["stop"] is True and found["goldenenv"] is False


def test_the_core_imports_nothing_but_the_standard_library():
    import ast

    from goldenenv.clouds import stopcore

    tree = ast.parse(Path(stopcore.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_the_functions_time_limits_agree_with_what_is_deployed():
    """The core's deadline is the function's own time limit less a margin: Google Cloud's timeout_seconds, Azure's
    host.json functionTimeout (the alert's 230 s is Azure's HTTP limit, whatever the timeout)."""
    from goldenenv.clouds.azure import budget as azure_budget
    from goldenenv.clouds.azure.stopfn import function_app
    from goldenenv.clouds.gcp import budget as gcp_budget
    from goldenenv.clouds.gcp.stopfn import main

    assert main.INVOCATION_SECONDS == gcp_budget.TIMEOUT_SECONDS
    host = json.loads((azure_budget.STOPFN_DIR / "host.json").read_text())
    hours, minutes, seconds = host["functionTimeout"].split(":")
    assert function_app.TIMER_SECONDS == int(hours) * 3600 + int(minutes) * 60 + int(seconds)
    assert function_app.ALERT_SECONDS == 230
    assert 0 < main.MARGIN_SECONDS < main.INVOCATION_SECONDS and 0 < function_app.MARGIN_SECONDS < 230
