"""Slurm and munge in the golden image: installed at the lock's versions, no munge key in any layer, and the image
check names the pin a host misses.

A lock's `slurm:` section pins slurmd, slurmctld and slurm-client (one source package, one version) and munge with
libmunge2, all from the base's own distribution. munge's install script makes /etc/munge/munge.key; every cluster
gets its own key from its secret store, so the key is removed in the RUN that installs the packages, and no layer of
the image ever holds it.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from goldenenv.checks.expectations import expectations
from goldenenv.images import base as base_module
from goldenenv.images import dockerfile
from goldenenv.images.base import sources_list
from goldenenv.images.lock import IMAGES, Lock, load, names
from goldenenv.images.size import final_stage_steps

CAPTURES = Path(__file__).parent / "captures"
MUNGE_KEY = "/etc/munge/munge.key"
SLURM_LOCKS = [name for name in names() if load(name).slurm]
UBUNTU_LOCKS = [name for name in names() if (b := load(name).base.bootstrap) and b.distro == "ubuntu"]


def stage(text: str, name: str) -> str:
    """The instructions of one stage of a rendered Dockerfile."""
    return text.split(f" AS {name}\n", 1)[1].split("\nFROM ", 1)[0]


def test_every_shipped_lock_pins_slurm():
    """goldenenv:scheduler slurm is every stack's default: every image the project ships can run it."""
    assert SLURM_LOCKS == names()
    assert {"aws-ampere", "alicloud-a10"} <= set(UBUNTU_LOCKS)


@pytest.mark.parametrize("name", SLURM_LOCKS)
def test_each_slurm_and_munge_package_is_pinned_name_equals_version_from_the_lock(name):
    lock = load(name)
    text = dockerfile.dockerfile(lock, "base:ref")
    download = stage(text, "apt")
    words = shlex.split(download.split("--download-only", 1)[1].split("&&", 1)[0].replace("\\\n", " "))
    pinned = dict(word.split("=", 1) for word in words if "=" in word)
    assert {package: pinned.get(package) for package in ("slurmd", "slurmctld", "slurm-client")} == dict.fromkeys(
        ("slurmd", "slurmctld", "slurm-client"), lock.slurm.version)
    assert {package: pinned.get(package) for package in ("munge", "libmunge2")} == dict.fromkeys(
        ("munge", "libmunge2"), lock.slurm.munge)
    assert not [word for word in words if word.split("=", 1)[0] in ("slurmd", "munge") and "=" not in word]


@pytest.mark.parametrize("name", SLURM_LOCKS)
def test_the_munge_key_is_removed_in_the_run_that_installs_the_packages(name):
    text = dockerfile.dockerfile(load(name), "base:ref")
    steps = final_stage_steps(text)  # the image's own instructions, its parent stages' first
    installs = [i for i, step in enumerate(steps) if step.startswith("RUN") and "/tmp/goldenenv-debs" in step
                and "apt-get install" in step]
    assert len(installs) == 1, "the OS packages are installed by one RUN"
    install = steps[installs[0]]
    removal = install.split("rm -rf", 1)[1]
    assert MUNGE_KEY in shlex.split(removal.replace("\\", " ")), install
    assert steps[installs[0] - 1].startswith("COPY --from=apt"), "the key is made and removed in the same layer"
    assert not [step for step in steps if MUNGE_KEY in step and step is not install]


def test_a_lock_without_slurm_installs_neither_slurm_nor_munge():
    doc = yaml.safe_load((IMAGES / "cpu-dev" / "lock.yaml").read_text())
    doc.pop("slurm")
    text = dockerfile.dockerfile(Lock.model_validate(doc), "base:ref")
    assert "slurmd" not in text and "munge" not in text


@pytest.mark.parametrize("name", UBUNTU_LOCKS)
def test_an_ubuntu_base_reads_its_updates_and_security_pockets(name):
    """Ubuntu's fixes stay in RELEASE-updates and RELEASE-security (noble's munge 0.5.15-4ubuntu0.1 is only there):
    a base reading the release alone could not install the lock's pins."""
    bootstrap = load(name).base.bootstrap
    lines = sources_list(bootstrap).splitlines()
    assert [line.split()[2] for line in lines] == [bootstrap.release, f"{bootstrap.release}-updates",
                                                   f"{bootstrap.release}-security"]
    assert all(line.split()[1] == bootstrap.mirror and line.split()[3:] == ["main", "universe"] for line in lines)


def test_a_debian_base_reads_its_release_alone():
    bootstrap = load("cpu-dev").base.bootstrap
    assert sources_list(bootstrap) == f"deb {bootstrap.mirror} {bootstrap.release} main\n"


@pytest.mark.parametrize("name", UBUNTU_LOCKS)
def test_a_debootstrap_older_than_the_release_still_bootstraps_it(name, tmp_path, monkeypatch):
    """Debian 12's debootstrap (1.0.128) has no script named noble: "E: No such script". Every Ubuntu release
    bootstraps with the gutsy script, which newer debootstraps link noble to."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "gutsy").write_text("# debootstrap's Ubuntu script\n")
    keyring = tmp_path / "ubuntu-archive-keyring.gpg"
    keyring.write_bytes(b"")
    monkeypatch.setattr(base_module, "DEBOOTSTRAP_SCRIPTS", scripts)
    monkeypatch.setitem(base_module.KEYRINGS, "ubuntu", (keyring, "ubuntu-keyring"))
    bootstrap = load(name).base.bootstrap
    command = base_module.debootstrap_command(bootstrap, tmp_path / "rootfs", bootstrap.mirror)
    assert command[-4:] == [bootstrap.release, str(tmp_path / "rootfs"), bootstrap.mirror, str(scripts / "gutsy")]
    (scripts / bootstrap.release).symlink_to("gutsy")  # a debootstrap that knows the release: nothing to name
    assert base_module.debootstrap_command(bootstrap, tmp_path / "rootfs", bootstrap.mirror)[-1] == bootstrap.mirror


def probe() -> dict:
    """What checks/probe.py reported in the image built from the cpu-dev lock (a real capture)."""
    return json.loads((CAPTURES / "probe-cpu-dev.json").read_text())


def slurm_problems(found: dict, lock: Lock) -> dict[str, str | None]:
    return {e.id: e.verify(found) for e in expectations(lock)
            if e.id.startswith(("deb-", "slurmd-", "slurmctld-", "munged-"))}


def test_the_captured_image_has_the_locks_slurm_munge_and_mariadb():
    lock = load("cpu-dev")
    problems = slurm_problems(probe(), lock)
    assert set(problems) == {"deb-slurmd", "deb-slurmctld", "deb-slurmdbd", "deb-slurm-client", "deb-munge",
                             "deb-libmunge2", "deb-mariadb-server", "slurmd-version", "slurmctld-version",
                             "munged-version"}
    assert [p for p in problems.values() if p] == []


def test_a_slurmd_of_another_release_fails_naming_the_pin():
    lock = load("cpu-dev")
    found = probe()
    found["os_packages"]["slurmd"] = "21.08.5-2ubuntu1"
    found["scheduler"]["slurmd"] = {"rc": 0, "out": "slurm-wlm 21.08.5\n"}
    problems = slurm_problems(found, lock)
    assert problems["deb-slurmd"] == f"OS package slurmd: lock pins {lock.slurm.version}, host has 21.08.5-2ubuntu1"
    assert problems["slurmd-version"] == f"slurmd: lock pins {lock.slurm.upstream}, it reports slurm-wlm 21.08.5 (rc 0)"
    assert problems["deb-slurmctld"] is None and problems["slurmctld-version"] is None


def test_a_missing_daemon_or_package_is_named():
    lock = load("cpu-dev")
    found = probe()
    del found["scheduler"]["slurmctld"], found["os_packages"]["libmunge2"]
    problems = slurm_problems(found, lock)
    assert problems["slurmctld-version"] == "slurmctld: not on PATH"
    assert problems["deb-libmunge2"] == f"OS package libmunge2: lock pins {lock.slurm.munge}, host has not installed"
