#!/usr/bin/env bash
# Set up on a fresh machine, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/python -m pytest "$@"
