#!/usr/bin/env bash
# Build (once, cached) a Debian bookworm minbase rootfs with python3 and python3-venv for the
# test LXC containers, packed as an uncompressed tarball (fast to unpack).
#
#   tests/remote/rootfs.sh            prints the tarball's path on stdout (progress on stderr)
#
# Cache dir: ${ENVLOCK_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/envlock-tests}.
# Mirror: the Debian mirror apt is configured with on this machine (/etc/apt/sources.list,
# /etc/apt/sources.list.d/*.list and *.sources); override with ENVLOCK_TEST_DEBIAN_MIRROR.
# Safe under concurrent calls: one builds, the others wait on a lock and reuse its result.
set -euo pipefail

SUITE=bookworm
VARIANT=minbase
INCLUDE=python3,python3-venv
# Bump when the recipe changes, so that an old cached tarball is not reused.
RECIPE=2

CACHE="${ENVLOCK_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/envlock-tests}"
TARBALL="$CACHE/rootfs-debian-$SUITE-$VARIANT-${INCLUDE//,/-}-r$RECIPE.tar"

say() { echo "rootfs: $*" >&2; }
die() {
  echo "rootfs: error: $*" >&2
  exit 1
}

if [ -s "$TARBALL" ]; then
  say "cached: $TARBALL"
  echo "$TARBALL"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || die "debootstrap needs root (running as uid $(id -u))"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
command -v flock >/dev/null || die "flock is not installed (util-linux)"

# Print the URI of the first enabled 'deb' source for $SUITE (not -updates/-security) that apt
# is configured with, in one-line (*.list) or deb822 (*.sources) format.
apt_mirror() {
  local f
  local files=()
  [ -f /etc/apt/sources.list ] && files+=(/etc/apt/sources.list)
  for f in /etc/apt/sources.list.d/*.list; do [ -f "$f" ] && files+=("$f"); done
  for f in "${files[@]}"; do
    # deb [opt=val ...] URI SUITE COMPONENT...
    awk -v suite="$SUITE" '
      /^[[:space:]]*#/ { next }
      $1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822 stanzas separated by blank lines; fields Types, URIs, Suites, Enabled.
    awk -v suite="$SUITE" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " suite " ")) {
          split(uris, u, " "); if (u[1] != "") { print u[1]; found = 1 }
        }
        types = ""; uris = ""; suites = ""; enabled = ""
      }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); if (found) exit; next }
      {
        key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[[:space:]]*/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "enabled") enabled = tolower(val)
      }
      END { if (!found) flush() }' "$f"
  done
}

MIRROR="${ENVLOCK_TEST_DEBIAN_MIRROR:-$(apt_mirror | grep -E '^(https?|file)://' | head -n 1 || true)}"
[ -n "$MIRROR" ] || die "no Debian '$SUITE' mirror found in /etc/apt/sources.list or" \
  "/etc/apt/sources.list.d/*.{list,sources}; set ENVLOCK_TEST_DEBIAN_MIRROR=URL"

# debootstrap fetches with wget: honour a proxy configured for apt.
if [ -z "${http_proxy:-}" ]; then
  proxy="$(apt-config dump Acquire::http::Proxy 2>/dev/null | sed -n 's/^Acquire::http::Proxy "\(.*\)";$/\1/p')"
  if [ -n "$proxy" ] && [ "$proxy" != DIRECT ]; then export http_proxy="$proxy"; fi
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/rootfs.lock"
if ! flock -n 9; then
  say "another process is building the rootfs; waiting for it"
  flock 9
fi
if [ -s "$TARBALL" ]; then # built while we waited
  say "cached: $TARBALL"
  echo "$TARBALL"
  exit 0
fi

WORK="$(mktemp -d "$CACHE/build.XXXXXX")"
LOG="$CACHE/rootfs-build.log"
cleanup() { rm -rf --one-file-system "$WORK"; }
trap cleanup EXIT

start=$SECONDS
say "building Debian $SUITE ($VARIANT, +$INCLUDE) from $MIRROR (about a minute, once)"
say "log: $LOG"
if ! debootstrap --variant="$VARIANT" --include="$INCLUDE" "$SUITE" "$WORK/rootfs" "$MIRROR" \
  >"$LOG" 2>&1; then
  tail -n 20 "$LOG" >&2
  die "debootstrap $SUITE from $MIRROR failed (full log: $LOG)"
fi
[ -x "$WORK/rootfs/usr/bin/python3" ] || die "debootstrap finished but the rootfs has no /usr/bin/python3"
# Keep the image small and quick to unpack (every test container unpacks it): no apt lists,
# downloaded .debs, docs, man pages or translations.
r="$WORK/rootfs"
rm -rf "$r/var/cache/apt/archives/"*.deb "$r/var/lib/apt/lists/"* "$r/usr/share/doc/"* \
  "$r/usr/share/man/"* "$r/usr/share/info/"* "$r/usr/share/locale/"*
say "debootstrap done in $((SECONDS - start)) s; packing"
tar --numeric-owner --xattrs --acls -C "$WORK/rootfs" -cf "$WORK/rootfs.tar" . ||
  die "packing $WORK/rootfs into a tarball failed"
mv -f "$WORK/rootfs.tar" "$TARBALL"
# drop tarballs of older recipes
find "$CACHE" -maxdepth 1 -name 'rootfs-*.tar' ! -name "${TARBALL##*/}" -delete
say "built $TARBALL ($(du -h "$TARBALL" | cut -f1)) in $((SECONDS - start)) s"
echo "$TARBALL"
