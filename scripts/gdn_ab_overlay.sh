#!/usr/bin/env bash
# On the development machine: the "A" side of a GDN kernel A/B round (scripts/gdn_ab_round.sh) as an
# overlay: every file under src/ and bench/ that differs between REV and the working tree, as it is
# at REV (bench/ too, so that a bench taught a new field of src/ still builds against REV's),
# at its repository path under DIR (a file the working tree added, committed or not, is listed in
# DIR/removed.txt).
# DIR/tree.sha256 lists every file under src/ and bench/ of the working tree as it was: a round checks
# the tree it runs in against it (check_overlay_matches_tree in scripts/gpu_build_env.sh), so that an
# overlay made before the tree changed is refused at once rather than failing A's build.
# Carry DIR along (it should be a git-ignored path, e.g. .device/ab-a).
# usage: scripts/gdn_ab_overlay.sh REV DIR
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1 dir=$2
git rev-parse --verify --quiet "$rev^{commit}" >/dev/null || { echo "not a commit: $rev" >&2; exit 2; }
rm -rf "$dir"
mkdir -p "$dir"
git rev-parse --short "$rev" >"$dir/revision.txt"
: >"$dir/removed.txt"
changed=0
while IFS= read -r path; do
  if git cat-file -e "$rev:$path" 2>/dev/null; then
    mkdir -p "$dir/$(dirname "$path")"
    git show "$rev:$path" >"$dir/$path"
  else
    echo "$path" >>"$dir/removed.txt"
  fi
  changed=$((changed + 1))
done < <({ git diff --name-only "$rev" -- src bench; git ls-files -o --exclude-standard -- src bench; } | sort -u)
[ "$changed" -gt 0 ] || { echo "src/ and bench/ are the same at $rev and in the working tree: nothing to compare" >&2; exit 1; }
git ls-files -co --exclude-standard -- src bench | sort | xargs -d '\n' sha256sum >"$dir/tree.sha256"
echo "$changed file(s) of src/ and bench/ as at $(cat "$dir/revision.txt") in $dir"
