#!/usr/bin/env bash
# System packages the suite needs beyond Python (installed only when missing).
set -euo pipefail
need=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "system-deps: need root to install: ${need[*]}" >&2
    exit 1
  fi
  # Another apt-get (an unattended upgrade, a second checkout's set-up) may hold dpkg's lock:
  # wait for it, and say so, rather than fail at once.
  wait=(-o DPkg::Lock::Timeout=600)
  echo "system-deps: installing ${need[*]} (waiting up to 10 min for dpkg's lock if another apt holds it)" >&2
  apt-get "${wait[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive apt-get "${wait[@]}" install -y -qq --no-install-recommends "${need[@]}"
fi
