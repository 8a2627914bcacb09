"""The host suite: run by check_hosts on a bake's build instance and by `goldenenv validate` on every node.

One case per pinned component of the pool's host layer (goldenenv.checks.host.host_cases); each case's id names the
component and the package, module or device, and its failure says what the host has and what the lock pins.
"""

from __future__ import annotations

from goldenenv.checks import host as host_checks


def test_host_layer(host, host_case, request):
    done = host.run(host_checks.command(host_case, request.config.getoption("--host-sudo")))
    problem = host_checks.judge(host_case, done.rc, done.stdout + (done.stderr if done.rc else ""))
    assert problem is None, problem
