"""pytest plugin behind the host checks: the cases file, sudo, and a per-case results file that check_hosts reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goldenenv.checks import host


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("goldenenv host")
    group.addoption("--host-cases", required=True, help="JSON cases from goldenenv.checks.host.host_cases")
    group.addoption("--host-results", default=None, help="write each failed case (id, message) here as JSON")
    group.addoption("--host-sudo", action="store_true", help="run the cases that need root through sudo -n")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "host_case" in metafunc.fixturenames:
        cases = host.read_cases(Path(metafunc.config.getoption("--host-cases")))
        metafunc.parametrize("host_case", cases, ids=[c.id for c in cases])


def pytest_configure(config: pytest.Config) -> None:
    config._goldenenv_host_failed = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if not (report.failed and report.when in ("setup", "call")):
        return
    failed = item.config._goldenenv_host_failed
    error = call.excinfo.value if call.excinfo else None
    if isinstance(error, AssertionError):
        case = item.callspec.params["host_case"]
        failed.append({"id": case.id, "message": str(error).strip().splitlines()[0]})
    elif not any(f["id"] == host.UNREACHABLE for f in failed):
        failed.append({"id": host.UNREACHABLE, "message": f"not reached: {_why(error, report)}"})


def _why(error: BaseException | None, report: pytest.TestReport) -> str:
    """The backend's own words: testinfra raises RuntimeError(CommandResult) when ssh or docker exec fails."""
    result = error.args[0] if error is not None and error.args else None
    text = getattr(result, "stderr", None) or (str(error) if error is not None else report.longreprtext)
    return text.strip()[-300:] or type(error).__name__


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--host-results")
    if path:
        Path(path).write_text(json.dumps({"failed": session.config._goldenenv_host_failed}))
