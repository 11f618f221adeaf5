#!/usr/bin/env bash
# fetch-chdb.sh: make sure the embedded ClickHouse engine (libchdb.so) is on disk.
#
# The library comes from the npm package @chdb/lib-linux-x64-gnu at a pinned
# version; the tarball's sha256 is pinned below and checked before anything is
# extracted. The library lands at
#   ${EVENTGATE_CHDB_LIB:-$HOME/.cache/eventgate/chdb/<version>/libchdb.so}
# and the script prints that path. If the file is already there it prints the
# path and exits at once. Keep CHDB_VERSION in step with chdb.Version in
# internal/clickhouse/chdb.
set -euo pipefail

CHDB_PACKAGE="@chdb/lib-linux-x64-gnu"
CHDB_VERSION="26.5.3"
# sha256 of the tarball `npm pack @chdb/lib-linux-x64-gnu@26.5.3` (166,572,008 bytes).
CHDB_TARBALL_SHA256="b874e449710950da3abd7e20376f7bb3387d9e03adcc7082f022be18dfdf316a"

die() { echo "fetch-chdb: error: $*" >&2; exit 1; }

if [[ -n "${EVENTGATE_CHDB_LIB:-}" ]]; then
  dest="$EVENTGATE_CHDB_LIB"
else
  [[ -n "${HOME:-}" ]] || die "neither EVENTGATE_CHDB_LIB nor HOME is set; set EVENTGATE_CHDB_LIB=/path/to/libchdb.so"
  dest="$HOME/.cache/eventgate/chdb/$CHDB_VERSION/libchdb.so"
fi

if [[ -s "$dest" ]]; then
  echo "$dest"
  exit 0
fi

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) die "$CHDB_PACKAGE only supports Linux x86_64 (glibc); this is $(uname -s)/$(uname -m). Point --clickhouse-dsn at a ClickHouse server instead." ;;
esac

command -v npm >/dev/null 2>&1 || die "npm is required to download $CHDB_PACKAGE@$CHDB_VERSION (install Node.js/npm), or place libchdb.so yourself and set EVENTGATE_CHDB_LIB"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum is required (coreutils)"
command -v tar >/dev/null 2>&1 || die "tar is required"

dest_dir="$(dirname "$dest")"
mkdir -p "$dest_dir" || die "cannot create directory $dest_dir"

work="$(mktemp -d "${TMPDIR:-/tmp}/fetch-chdb.XXXXXX")" || die "cannot create a temporary directory"
tmp_lib=""
cleanup() {
  rm -rf "$work"
  if [[ -n "$tmp_lib" ]]; then rm -f "$tmp_lib"; fi
}
trap cleanup EXIT

echo "fetch-chdb: downloading $CHDB_PACKAGE@$CHDB_VERSION (about 166 MB)..." >&2
if ! tarball="$(cd "$work" && npm pack --silent "$CHDB_PACKAGE@$CHDB_VERSION" 2>"$work/npm.log" | tail -n 1)"; then
  cat "$work/npm.log" >&2 || true
  die "npm pack $CHDB_PACKAGE@$CHDB_VERSION failed (is the npm registry reachable?)"
fi
[[ -n "$tarball" && -f "$work/$tarball" ]] || { cat "$work/npm.log" >&2 || true; die "npm pack did not produce a tarball"; }

got="$(sha256sum "$work/$tarball" | awk '{print $1}')"
if [[ "$got" != "$CHDB_TARBALL_SHA256" ]]; then
  die "checksum mismatch for $tarball: got sha256 $got, want $CHDB_TARBALL_SHA256 — refusing to install"
fi

tar -xzf "$work/$tarball" -C "$work" package/libchdb.so || die "package/libchdb.so not found in $tarball"
[[ -s "$work/package/libchdb.so" ]] || die "package/libchdb.so in $tarball is empty"

# Copy next to the destination first, then rename: the rename is atomic, so a
# reader never sees a half-written library.
tmp_lib="$(mktemp "$dest_dir/.libchdb.so.XXXXXX")" || die "cannot write to $dest_dir"
cp "$work/package/libchdb.so" "$tmp_lib" || die "cannot copy libchdb.so to $dest_dir (disk full?)"
chmod 0755 "$tmp_lib"
mv -f "$tmp_lib" "$dest" || die "cannot move libchdb.so into place at $dest"
tmp_lib=""

echo "$dest"
