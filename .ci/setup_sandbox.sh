#!/usr/bin/env bash
# Everything the sandbox tests need on a clean Debian 12 machine, as root; safe to rerun.
#   1. apt: docker.io, bubblewrap, debootstrap, iproute2, haproxy (only what is missing; haproxy:
#      the load balancer of the fleet tests, tests/sandbox/test_fleet_haproxy.py)
#   2. dockerd in the background, wait until it answers (GSPO_DOCKERD_WAIT_S, default 60 s;
#      its log: GSPO_DOCKERD_LOG, default /var/log/gspo-dockerd.log)
#   3. the sandbox rootfs + Docker image, built offline with debootstrap (cached by recipe hash)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "setup_sandbox.sh: must run as root (apt, dockerd, debootstrap)" >&2
  exit 1
fi

DOCKERD_LOG=${GSPO_DOCKERD_LOG:-/var/log/gspo-dockerd.log}
DOCKERD_WAIT_S=${GSPO_DOCKERD_WAIT_S:-60}

missing=()
# The daemon, not only the CLI: a machine may ship the `docker` client with no engine.
{ command -v docker >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1; } || missing+=(docker.io)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)  # namespaces: loopback up
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)  # fleet tests: services behind a LB
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_sandbox.sh: installing ${missing[*]}"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; }; then
    echo "setup_sandbox.sh: could not install ${missing[*]} with apt-get" >&2
    exit 1
  fi
fi

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "setup_sandbox.sh: the docker CLI answers no daemon and there is no dockerd to start" >&2
    exit 1
  fi
  echo "setup_sandbox.sh: starting dockerd (log: $DOCKERD_LOG)"
  nohup dockerd >"$DOCKERD_LOG" 2>&1 &
  for _ in $(seq 1 "$DOCKERD_WAIT_S"); do
    if [ -S /var/run/docker.sock ] && docker info >/dev/null 2>&1; then break; fi
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    echo "setup_sandbox.sh: dockerd did not come up; its log:" >&2
    tail -n 40 "$DOCKERD_LOG" >&2 || true
    exit 1
  fi
fi

echo "setup_sandbox.sh: building (or finding cached) sandbox rootfs and image"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 - <<'PY'
import logging

logging.basicConfig(level=logging.INFO, format="%(message)s")
from sandbox.isolation import image

print("rootfs:", image.ensure_rootfs())
print("image: ", image.ensure_image())
PY
echo "setup_sandbox.sh: done"
