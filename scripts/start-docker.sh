#!/usr/bin/env bash
# Make sure a Docker engine (and debootstrap, for registry-free bases) is available, starting dockerd if needed.
# A fresh machine may have only the Docker client: install Debian's engine, then run dockerd in the background.
set -euo pipefail
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install ${need[*]} (as root: apt-get install -y ${need[*]})" >&2; exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if docker info >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then echo "the Docker engine is not running: start it (sudo dockerd &)" >&2; exit 1; fi
mkdir -p /var/log
nohup dockerd >/var/log/goldenenv-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "dockerd did not start; see /var/log/goldenenv-dockerd.log" >&2
tail -20 /var/log/goldenenv-dockerd.log >&2
exit 1
