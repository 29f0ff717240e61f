#!/usr/bin/env bash
# Adds burn-amp to a new Burn project the way README's Install section says, and checks that
# README's first program compiles there: a crate outside this workspace whose
# [dependencies] are README's, with the git source pointed at this checkout (CI has no
# network to GitHub). Reuses this workspace's target folder and Cargo.lock, so it builds
# little. CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
dir="target/new-user"
mkdir -p "$dir/src"

# README's ```toml block (its Install section), the git source replaced by a path.
deps="$(awk '/^```toml$/ { inside = 1; next } /^```$/ { if (inside) exit } inside' README.md)"
grep -q '^burn-amp = { git = ' <<<"$deps" || {
    echo "new-user-check.sh: README's toml block has no 'burn-amp = { git = ... }' line" >&2
    exit 2
}
deps="$(sed -E "s|^burn-amp = \{ git = \"[^\"]*\"|burn-amp = { path = \"$root\"|" <<<"$deps")"
cat >"$dir/Cargo.toml" <<EOF
[package]
name = "new-burn-project"
version = "0.0.0"
edition = "2024"
publish = false

# Not a member of burn-amp's workspace: a project of its own.
[workspace]

$deps
EOF
cp examples/readme.rs "$dir/src/main.rs"
cp Cargo.lock "$dir/Cargo.lock"
echo "new-user-check.sh: $dir/Cargo.toml:"
cat "$dir/Cargo.toml"
CARGO_TARGET_DIR="$root/target" cargo check --manifest-path "$dir/Cargo.toml"
echo "new-user-check.sh: README's dependencies and first program compile in a new project"
