#!/usr/bin/env bash
# Create .venv (the virtualenv Pulumi.yaml names) and install goldenenv, editable from this checkout, with its pinned
# dependencies (pyproject.toml). It says what it installs and how big before it starts, then a line per phase with the
# seconds since the start, and a line at least every 10 s, at a terminal as in a pipe or a CI log.
#   ./scripts/setup.sh                  what the goldenenv command needs, and no cloud's provider: the local flow
#   ./scripts/setup.sh --cloud aws,gcp  and those clouds' Pulumi providers (pyproject.toml's extras aws, alicloud, gcp,
#                                       azure; all: every one); the clouds installed before stay
#   ./scripts/setup.sh --test           and the test suite's own dependencies, with every cloud (what ./scripts/test.sh
#                                       asks for)
# uv (pinned below) installs: it downloads in parallel and does not byte-compile the cloud providers' tens of thousands
# of files (Python compiles a module the first time it is imported). Where uv cannot be installed or fails, or with
# GOLDENENV_INSTALLER=pip, pip installs instead (also without byte-compiling), slower. A second run with pyproject.toml
# unchanged and no new extra asked does nothing (the stamp, $VENV/.goldenenv-installed, holds pyproject.toml's
# fingerprint and the extras installed); after a change it installs only what changed, with the extras installed then.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/progress.sh

UV_VERSION=0.13.9  # https://pypi.org/project/uv/
PIP_VERSION=26.3   # https://pypi.org/project/pip/ : the virtualenv's own pip, which `goldenenv image pin` runs
VENV=.venv

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup.sh: goldenenv needs Python 3.11 or later (pyproject.toml's requires-python);" \
        "python3 here is $(python3 --version 2>&1)" >&2
    exit 2
fi
stamp="$VENV/.goldenenv-installed"
fingerprint=$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)
stamped="" had=""  # the stamp's fingerprint, and the extras installed then
if [[ -f $stamp ]]; then
    read -r stamped had <"$stamp" || true
fi

# extras: what to install (.[aws,gcp]); covers: every extra that holds; providers: the clouds' providers among them
extras="" covers="" providers="" disk_mb=""
choice=$(python3 scripts/lib/extras.py "$@") || exit 2  # a wrong option or cloud: said there
eval "$choice"
if [[ -x $VENV/bin/goldenenv && $stamped == "$fingerprint" ]] &&
    python3 -c 'import sys; sys.exit(not set(sys.argv[1].split()) <= set(sys.argv[2].split()))' "$covers" "$had"; then
    say "goldenenv${had:+ with the extras $had} is already installed in $VENV and pyproject.toml has not" \
        "changed since; nothing to do (delete $stamp to install again)"
    exit 0
fi
# a rerun keeps what the set-ups before installed (their clouds, at pyproject.toml's pins now)
eval "$(python3 scripts/lib/extras.py "$@" --had "$had")"
target=".${extras:+[$extras]}"

if [[ -n $providers ]]; then
    what="Pulumi with the providers of $providers (most of the size)"
else
    what="Pulumi without any cloud's provider (the local flow needs none: ./scripts/setup.sh --cloud aws adds one)"
fi
say "installing goldenenv (editable: this checkout's code) and its pinned dependencies (pyproject.toml)" \
    "${extras:+with the extras $extras }into $VENV: $what, Docker's SDK, pydantic, typer, rich, matplotlib, pytest"
say "about $disk_mb MB on disk; a first run takes under a minute on 2 cores with uv (the downloads dominate), about 2 minutes with" \
    "pip; with uv's cache warm, about 20 s"

installer=${GOLDENENV_INSTALLER:-uv}
if [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c '' 2>/dev/null; then
    say "using the existing $VENV ($("$VENV/bin/python" --version))"
elif [[ $installer == uv ]]; then
    # without pip: the Python's bundled pip takes seconds to unpack, and uv installs the pinned one in a fraction
    run_step "creating $VENV" python3 -m venv --without-pip "$VENV"
    say "created $VENV ($("$VENV/bin/python" --version))"
else
    run_step "creating $VENV" python3 -m venv "$VENV"
    say "created $VENV ($("$VENV/bin/python" --version))"
fi

# find_pip: set PIP to a pip that installs into $VENV: its own, else this machine's (pip 22.3 and later can install into
# another environment), else the Python's bundled one, unpacked into $VENV
find_pip() {
    if "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
        PIP=("$VENV/bin/python" -m pip)
    elif python3 -m pip --python "$VENV/bin/python" --version >/dev/null 2>&1; then
        PIP=(python3 -m pip --python "$VENV/bin/python")
    elif run_step "unpacking Python's bundled pip" "$VENV/bin/python" -m ensurepip --default-pip; then
        PIP=("$VENV/bin/python" -m pip)
    else
        say "no pip can install into $VENV: install pip for python3 (Debian, Ubuntu: apt install python3-pip) and run again"
        exit 1
    fi
}

install_with_uv() {
    [[ $installer == uv ]] || return 1
    if [[ $("$VENV/bin/uv" --version 2>/dev/null) == "uv $UV_VERSION "* ]]; then
        say "uv $UV_VERSION is already in $VENV"
    else
        say "installing the installer, uv $UV_VERSION, into $VENV (about 20 MB)"
        if ! run_step "installing uv" "${PIP[@]}" install -qq --progress-bar off "uv==$UV_VERSION"; then
            say "uv could not be installed (see above); pip installs instead, slower"
            return 1
        fi
    fi
    # uv reads UV_* variables, never pip's: carry over this machine's indexes, wheel folders, certificates, constraints
    eval "$("${PIP[@]}" config list | python3 scripts/lib/uv_env_from_pip.py)"
    say "resolving, downloading and installing with uv (uv prints a line as each phase ends)"
    PROGRESS_HIDE='^ [-+~] ' run_step "uv pip install" \
        "$VENV/bin/uv" pip install --python "$VENV/bin/python" --no-progress -e "$target" "pip==$PIP_VERSION" &&
        return 0
    say "uv failed (see above); pip tries instead"
    return 1
}

install_with_pip() {
    say "resolving, downloading and installing with pip (a line per package; its install phase is silent for a minute)"
    run_step "pip install" "${PIP[@]}" install --no-compile --progress-bar off -e "$target" "pip==$PIP_VERSION"
}

find_pip
install_with_uv || install_with_pip

say "checking that the command runs: $VENV/bin/goldenenv --help (its first start compiles what it imports)"
run_step "goldenenv --help" bash -c '"$1" --help >/dev/null' check "$VENV/bin/goldenenv"
echo "$fingerprint $covers" >"$stamp"
say "done: goldenenv is installed in $VENV; try $VENV/bin/goldenenv --help"
