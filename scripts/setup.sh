#!/usr/bin/env bash
# Create .venv (the virtualenv Pulumi.yaml names) and install goldenenv with its pinned dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
echo "goldenenv installed in .venv: .venv/bin/goldenenv --help"
