#!/usr/bin/env bash
# Set up on a fresh machine (virtualenv, Docker engine), then run the whole test suite:
# unit tests (Pulumi mocks, pure logic) and image tests (real builds and checks on a real engine).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
./scripts/start-docker.sh
.venv/bin/python -m pytest "$@"
