#!/usr/bin/env bash
# Prints which top-level modules of src/ import which ("a -> b", with a count of files),
# then any pair that imports each other (root re-exports count as their module; comments,
# doc links included, do not count); then checks that no files of one module folder import
# each other in a circle (scripts/file-cycles.py, both crates).
set -euo pipefail
cd "$(dirname "$0")/../src"
map() {
    case "$1" in
        MixedPrecision | ScaledGradients | cast_to_output) echo backend ;;
        Policy | PolicyError | IntoPolicy | set_global_policy | global_policy | with_policy) echo policy ;;
        LossScale* | SkippedStepsMetric) echo loss_scale ;;
        *) echo "$1" ;;
    esac
}
edges=$(for f in $(find . -name '*.rs' | sort); do
    top=$(echo "$f" | sed -E 's#^\./##; s#/.*##; s#\.rs$##')
    # `crate::x` paths, and the names inside `use crate::{a, b::c}` groups.
    code=$(grep -vE '^[[:space:]]*//' "$f")
    { grep -oE 'crate::[A-Za-z_0-9]+' <<<"$code" | sed 's/crate:://' || true
      grep -ozE 'use crate::\{[^}]*\}' <<<"$code" | tr '\0' '\n' | sed -E 's/use crate::\{//; s/\}//' |
          tr ',' '\n' | sed -E 's/^[[:space:]]*//; s/::.*//' | grep -E '^[A-Za-z_]' || true
    } | sort -u | while read -r dep; do
        dep=$(map "$dep")
        [ "$dep" != "$top" ] && [ "$dep" != "self" ] && echo "$top -> $dep"
    done
done | sort | uniq -c)
echo "$edges"
cycles=$(echo "$edges" | awk '{print $2, $4}' | while read -r a b; do
    if echo "$edges" | awk '{print $2, $4}' | grep -qx "$b $a"; then
        echo "cycle: $a <-> $b"
    fi
done | sort -u)
if [ -n "$cycles" ]; then echo "$cycles"; exit 1; fi
echo "no two modules import each other"
# Inside each module folder, of either crate: no circle between its files.
cd ..
python3 scripts/file-cycles.py src shaders/src
