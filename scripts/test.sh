#!/usr/bin/env bash
# Set up on a fresh machine (virtualenv, Docker engine), then run the whole test suite:
# unit tests (Pulumi mocks, pure logic) and image tests (real builds and checks on a real engine).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
./scripts/start-docker.sh
# One worker per logical CPU (pytest-xdist): one worker runs every test that uses the Docker engine, in order,
# while the others run the unit tests beside it (tests/engine_apart.py); -n 0 runs everything in one process.
.venv/bin/python -m pytest -n logical "$@"
