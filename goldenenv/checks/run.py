"""Run the golden-image suite on a built image (docker://) or on nodes (ssh://)."""

from __future__ import annotations

import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import docker

from goldenenv.images.lock import Lock, lock_path

SUITE = Path(__file__).with_name("test_image.py")


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    output: str


def pytest_command(lock_file: Path, hosts: str, extra: list[str] = ()) -> list[str]:
    return [sys.executable, "-m", "pytest", str(SUITE), "-p", "goldenenv.checks.plugin", "-p", "no:cacheprovider",
            "-v", "-rfE", "--tb=line", "--no-header", f"--hosts={hosts}", f"--lock={lock_file}", *extra]


def check_image(lock: Lock, tag: str | None = None, lock_file: Path | None = None,
                client: docker.DockerClient | None = None, extra: list[str] = ()) -> CheckResult:
    """Start a throwaway container of the image (no network) and run the suite against it."""
    client = client or docker.from_env()
    container = client.containers.run(
        tag or lock.tag, command=["sleep", "infinity"], detach=True, network_mode="none",
        name=f"goldenenv-check-{lock.name}-{secrets.token_hex(3)}", labels={"goldenenv.check": lock.name},
    )
    try:
        done = subprocess.run(pytest_command(lock_file or lock_path(lock.name), f"docker://{container.name}",
                                             list(extra)), capture_output=True, text=True)
    finally:
        container.remove(force=True)
    return CheckResult(done.returncode == 0, done.stdout + done.stderr)
