"""./scripts/setup.sh tells a newcomer what it installs and never goes quiet, installs no cloud's provider and not the
test extra unless asked (--cloud, --test), does nothing when what is asked is installed, and hands uv the same
package sources and certificates pip would use.

No real install runs here (minutes, network): the script runs in a copy of its folder whose .venv/bin/python is a
stand-in that refuses to install, so what it says before and around the installers is what is checked.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"

# a python that answers the script's health checks but fails every install, saying what it was asked to run
REFUSING_PYTHON = """#!/usr/bin/env bash
case "$*" in
    "-c ") exit 0 ;;
    "-m pip --version") echo "pip stand-in" ;;
    --version) echo "Python 3.stand-in" ;;
    *) echo "stand-in python asked: $*"; exit 1 ;;
esac
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The script's folder with pyproject.toml and setup.py, and a .venv whose python refuses to install."""
    shutil.copytree(SCRIPTS, tmp_path / "scripts")
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy(REPO / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in {"python": REFUSING_PYTHON, "goldenenv": "#!/bin/sh\n"}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return tmp_path


def _setup(checkout: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "GOLDENENV_INSTALLER"} | env
    return subprocess.run([str(checkout / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          env=environ, timeout=60)


PROVIDERS = {"aws": "pulumi-aws", "alicloud": "pulumi-alicloud", "gcp": "pulumi-gcp", "azure": "pulumi-azure-native"}
"""The clouds' extras in pyproject.toml and the provider each installs."""


@pytest.mark.parametrize("args,clouds", [([], []), (["--cloud", "aws,gcp"], ["aws", "gcp"]),
                                         (["--cloud=azure"], ["azure"]), (["--test"], list(PROVIDERS))])
def test_setup_says_what_it_installs_and_how_big_before_installing(checkout, args, clouds):
    result = _setup(checkout, *args)
    first_line, size_line = result.stdout.splitlines()[:2]
    for cloud, provider in PROVIDERS.items():
        assert (provider in first_line) == (cloud in clouds), first_line
    if not clouds:
        assert "without any cloud's provider" in first_line and "./scripts/setup.sh --cloud aws" in first_line
    assert re.search(r"about \d+ MB on disk", size_line) and "minute" in size_line
    assert result.stdout.index("MB on disk") < result.stdout.index("stand-in python asked")


@pytest.mark.parametrize("args,target", [([], "."), (["--test"], ".[test]"), (["--cloud", "aws,gcp"], ".[aws,gcp]"),
                                         (["--cloud", "all"], ".[all]"), (["--cloud", "aws", "--test"], ".[test]")])
def test_setup_installs_the_extras_asked_for_and_no_cloud_unless_asked(checkout, args, target):
    result = _setup(checkout, *args, GOLDENENV_INSTALLER="pip")
    assert f"stand-in python asked: -m pip install --no-compile --progress-bar off -e {target} pip==" in result.stdout


def test_setup_falls_back_to_pip_when_uv_cannot_be_installed_and_fails_when_pip_does(checkout):
    result = _setup(checkout)
    assert "stand-in python asked: -m pip install -qq --progress-bar off uv==" in result.stdout
    assert "uv could not be installed" in result.stdout
    assert "-m pip install --no-compile" in result.stdout
    assert result.returncode == 1
    assert "done" not in result.stdout


EXTRAS = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"][
    "optional-dependencies"]
"""pyproject.toml's extras: the test extra holds every cloud's."""


def _stamp(checkout: Path, extras: str) -> None:
    """The stamp a set-up of these extras leaves: pyproject.toml's and setup.py's fingerprint, then the extras."""
    fingerprint = hashlib.sha256((checkout / "pyproject.toml").read_bytes() + (checkout / "setup.py").read_bytes())
    (checkout / ".venv" / ".goldenenv-installed").write_text(f"{fingerprint.hexdigest()} {extras}\n")


def test_setup_does_nothing_when_pyproject_is_unchanged_and_the_extras_asked_are_installed(checkout):
    _stamp(checkout, " ".join(sorted(EXTRAS)))  # what --test installed: every extra of pyproject.toml
    for args in (["--test"], [], ["--cloud", "gcp"], ["--cloud", "all"]):  # the test extra holds every cloud
        result = _setup(checkout, *args)
        assert result.returncode == 0
        assert "already installed" in result.stdout and "stand-in" not in result.stdout
    _stamp(checkout, "")  # what the main command installed
    assert "already installed" in _setup(checkout).stdout
    assert "stand-in python asked" in _setup(checkout, "--cloud", "aws").stdout
    with (checkout / "pyproject.toml").open("a") as pyproject:
        pyproject.write("# a pin changed\n")
    assert "stand-in python asked" in _setup(checkout).stdout


def test_setup_keeps_the_clouds_installed_before_when_it_installs_again(checkout):
    _stamp(checkout, "aws")
    added = _setup(checkout, "--cloud", "gcp", GOLDENENV_INSTALLER="pip")
    assert "-e .[aws,gcp] pip==" in added.stdout
    with (checkout / "pyproject.toml").open("a") as pyproject:
        pyproject.write("# a pin changed\n")
    assert "-e .[aws] pip==" in _setup(checkout, GOLDENENV_INSTALLER="pip").stdout


@pytest.mark.parametrize("args,named", [(["--tests"], "'--tests'"), (["--cloud", "aws,nope"], "'nope'"),
                                        (["--cloud"], "--cloud needs a value")])
def test_setup_refuses_an_unknown_option_or_cloud_naming_the_valid_ones(checkout, args, named):
    result = _setup(checkout, *args)
    assert result.returncode == 2
    assert named in result.stderr
    assert "--test" in result.stderr and "--cloud" in result.stderr
    assert re.search(r"each one of aws, alicloud, gcp, azure(, [a-z]+)*, or all\)", result.stderr), result.stderr
    assert result.stdout == ""


def test_setup_refuses_a_python_older_than_pyprojects_requirement(checkout):
    old_python = checkout / "old-bin" / "python3"
    old_python.parent.mkdir()
    old_python.write_text('#!/usr/bin/env bash\n[[ $1 == --version ]] && echo "Python 3.9.2"; exit 1\n')
    old_python.chmod(stat.S_IRWXU)
    result = _setup(checkout, PATH=f"{old_python.parent}:{os.environ['PATH']}")
    assert result.returncode == 2
    assert "needs Python 3.11 or later" in result.stderr and "Python 3.9.2" in result.stderr
    assert result.stdout == ""


def _run_step(command: str) -> subprocess.CompletedProcess:
    script = f"source {SCRIPTS / 'lib' / 'progress.sh'}; PROGRESS_EVERY=0.2; {command}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)


def test_a_silent_step_prints_a_line_at_each_interval_and_keeps_its_own_lines_and_status():
    slow_installer = "bash -c 'printf \"Resolved 80\"; sleep 1; printf \" packages\\nInstalled\"; exit 3'"
    result = _run_step(f"run_step 'fake install' {slow_installer}; echo status=$?")
    heartbeats = [line for line in result.stdout.splitlines() if "fake install: still working" in line]
    assert len(heartbeats) >= 3
    assert "    Resolved 80 packages\n" in result.stdout  # a line cut by a heartbeat comes out whole
    assert "    Installed\n" in result.stdout  # a last line without a newline is not lost
    assert result.stdout.rstrip().endswith("status=3")


def test_a_step_can_hide_the_installers_list_of_packages():
    result = _run_step("PROGRESS_HIDE='^ [-+~] ' run_step uv printf ' + pulumi==3\\nInstalled 1 package\\n'")
    assert result.stdout == "    Installed 1 package\n"


def _uv_env_module():
    spec = importlib.util.spec_from_file_location("uv_env_from_pip", SCRIPTS / "lib" / "uv_env_from_pip.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# `pip config list` as pip prints it on a machine with a pip.conf and PIP_* variables
PIP_CONFIG_LIST = """:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
:env:.index-url='https://mirror.example/simple'
global.cert='/etc/pip-ca.pem'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/other-wheels /opt/more-wheels'
global.index-url='https://ignored.example/simple'
install.trusted-host='mirror.example'
"""


def test_uv_gets_pips_sources_with_pips_precedence_and_best_match_across_indexes():
    uv_env = _uv_env_module().uv_environment(PIP_CONFIG_LIST, environ={})
    assert uv_env == {
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",  # PIP_CERT outranks the config file
        "UV_FIND_LINKS": "/opt/wheels",
        "UV_INDEX_URL": "https://mirror.example/simple",
        "UV_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
        "UV_EXTRA_INDEX_URL": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "UV_INSECURE_HOST": "mirror.example",
    }


def test_uv_settings_the_user_made_win_and_several_wheel_folders_are_comma_separated():
    config = "global.find-links='/opt/other-wheels /opt/more-wheels'\nglobal.cert='/etc/pip-ca.pem'\n"
    uv_env = _uv_env_module().uv_environment(config, environ={"SSL_CERT_FILE": "/mine.pem"})
    assert uv_env == {"UV_FIND_LINKS": "/opt/other-wheels,/opt/more-wheels"}
