"""A user's remote step on a booted cloud node, built by goldenenv itself: the ssh target of the node's pool as its
cloud's node_login names it (access.node_targets, what `validate` and `run` take from the stack outputs) and the exec
prefix `jobs`, `validate` and `run` put before a command in the golden container (jobs.container_exec), run over ssh
with the stack's key."""

from __future__ import annotations

import shlex
import subprocess
import time

from goldenenv import clouds, jobs, remote
from goldenenv.clouds import access
from goldenenv.clouds.base import HostsBy

BETWEEN_STARTS = ("is not running", "No such container", "is restarting", "OCI runtime exec failed")
"""What the engine answers an exec while the golden container is between two starts (with no head, slurmd ends and
systemd starts the container again every 15 s); the last when the container ends while the exec is starting."""


def target(spec, address: str) -> str:
    """ssh://<login>@<address> of the stack's first node, given its private address as the outputs would."""
    [host] = access.node_targets(clouds.get(spec.cloud), spec, {"nodePrivateIps": [address]}, None,
                                 HostsBy.PRIVATE_IP)
    return host


def in_golden(spec, host: str, ssh: remote.Ssh, command: list[str], timeout: float = 240) -> str:
    """The command's output in the node's golden container, through goldenenv's exec prefix for the stack."""
    step = shlex.join([*remote.prefix_words(jobs.container_exec(spec)), *command])
    deadline = time.monotonic() + timeout
    while True:
        try:
            return remote.remote_output(host, step, ssh)
        except remote.RemoteError as e:
            if not any(words in str(e) for words in BETWEEN_STARTS) or time.monotonic() > deadline:
                raise
        time.sleep(1)


def as_login(host: str, ssh: remote.Ssh, command: str) -> subprocess.CompletedProcess:
    """A command run over ssh as the node's login itself, outside goldenenv (what a user would type)."""
    return subprocess.run(ssh.argv(host, command), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def assert_reaches_golden_only_through_sudo(booted, user: str, ssh: remote.Ssh, image_ref: str,
                                            image_user: str) -> None:
    """The node's login as its cloud declares it (node_login: `user`, Docker through sudo) reaches the golden
    container through goldenenv's own ssh target and exec prefix as the image's user, and a plain `docker exec` as
    that login is refused by the engine socket's permissions: the rule, not only the happy path. With no head, the
    unit's container lives about a second in every 15 s, which made the exec a race: for the check the unit is
    stopped and the same image runs steady under the container's name, then the unit starts again."""
    from goldenenv.clouds.base import DockerReach

    login = clouds.get(booted.spec.cloud).node_login(booted.spec, booted.spec.nodes[0])
    assert (login.user, login.docker) == (user, DockerReach.SUDO)
    host = target(booted.spec, booted.host.address)
    assert host == f"ssh://{user}@{booted.host.address}"
    groups = as_login(host, ssh, "id -nG; sudo -n true && echo sudo-ok")
    assert groups.returncode == 0 and "docker" not in groups.stdout.split() and "sudo-ok" in groups.stdout, groups
    assert image_user and image_user != "root"
    steady = booted.host.sh("systemctl stop goldenenv-container.service; docker rm -f goldenenv >/dev/null 2>&1; "
                            f"docker run -d --name goldenenv --entrypoint sleep {shlex.quote(image_ref)} infinity")
    assert steady[0] == 0, steady
    try:
        assert image_user in in_golden(booted.spec, host, ssh, ["sh", "-c", "id -un; id -u"]).split()
        plain = as_login(host, ssh, "docker exec goldenenv id -un")
        assert plain.returncode != 0 and "permission denied" in plain.stderr and "docker.sock" in plain.stderr, plain
    finally:
        booted.host.sh("docker rm -f goldenenv >/dev/null 2>&1; systemctl start goldenenv-container.service")
