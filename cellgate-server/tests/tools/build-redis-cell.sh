#!/usr/bin/env bash
# Builds redis-cell 0.2.2 (the reference CL.THROTTLE) from crates.io and copies its Redis module
# to DEST. The comparison test loads it into a local redis-server when
# CELLGATE_REDIS_CELL_SO points at the copy.
#
# usage: build-redis-cell.sh DEST_DIR
set -euo pipefail
dest="${1:?usage: build-redis-cell.sh DEST_DIR}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A scratch project whose only purpose is to make cargo fetch the crate's source.
mkdir -p "$work/fetch/src"
cat > "$work/fetch/Cargo.toml" <<'TOML'
[package]
name = "fetch-redis-cell"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
redis-cell = "=0.2.2"
TOML
echo 'fn main() {}' > "$work/fetch/src/main.rs"
cargo fetch --manifest-path "$work/fetch/Cargo.toml" >&2
src="$(cargo metadata --manifest-path "$work/fetch/Cargo.toml" --format-version 1 \
  | python3 -c 'import json,sys; m=json.load(sys.stdin); print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="redis-cell"))')"
src="$(dirname "$src")"
# Build a copy: the registry's source directory is shared and must stay pristine.
cp -r "$src" "$work/redis-cell"
cargo build --release --manifest-path "$work/redis-cell/Cargo.toml" --target-dir "$work/target" >&2
cp "$work/target/release/libredis_cell.so" "$dest/libredis_cell.so"
echo "$dest/libredis_cell.so"
