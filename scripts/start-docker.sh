#!/usr/bin/env bash
# Make sure a Docker engine (and mmdebstrap or debootstrap, for registry-free bases) is available, starting dockerd
# if needed.
# A fresh machine may have only the Docker client: install Debian's engine, then run dockerd in the background.
# debootstrap verifies each release's signature (--force-check-gpg), so the distributions' archive keyrings are
# installed with it: Debian's from debian-archive-keyring, Ubuntu's from ubuntu-keyring. Debian 12 does not ship
# ubuntu-keyring; then Debian 13's package is fetched and checked against the sha256 its signed index lists.
set -euo pipefail
KEYRINGS=/usr/share/keyrings
UBUNTU_KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1-0.2_all.deb
UBUNTU_KEYRING_SHA256=b2e7ed48431bf9e7978ae810bbdaf253093570d6e3f864e575b7c13554b81174
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
# mmdebstrap bootstraps a base several times faster; optional (debootstrap does it too), so only root installs it
if ! command -v mmdebstrap >/dev/null && [ "$(id -u)" -eq 0 ]; then need+=(mmdebstrap); fi
[ -f "$KEYRINGS/debian-archive-keyring.gpg" ] || need+=(debian-archive-keyring)
ubuntu_missing=false
[ -f "$KEYRINGS/ubuntu-archive-keyring.gpg" ] || ubuntu_missing=true
if [ "${#need[@]}" -gt 0 ] || $ubuntu_missing; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install ${need[*]} ubuntu-keyring (as root: apt-get install -y ${need[*]} ubuntu-keyring)" >&2; exit 1
  fi
  apt-get update -qq
  fetch_ubuntu_keyring=false
  if $ubuntu_missing; then
    if LC_ALL=C apt-cache policy ubuntu-keyring | grep -q 'Candidate: [0-9]'; then
      need+=(ubuntu-keyring)
    else
      fetch_ubuntu_keyring=true
    fi
  fi
  if [ "${#need[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  if $fetch_ubuntu_keyring; then
    deb=$(mktemp --suffix=.deb)
    if wget -q -O "$deb" "http://deb.debian.org/debian/$UBUNTU_KEYRING_DEB" \
        && echo "$UBUNTU_KEYRING_SHA256  $deb" | sha256sum -c --quiet - && dpkg -i "$deb" >/dev/null; then
      :
    else
      echo "warning: Ubuntu's archive keyring is not installed: Ubuntu bases cannot be bootstrapped" >&2
    fi
    rm -f "$deb"
  fi
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
