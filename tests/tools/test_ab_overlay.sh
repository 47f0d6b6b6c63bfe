#!/usr/bin/env bash
# scripts/gdn_ab_overlay.sh and the check a round makes of it (check_overlay_matches_tree in
# scripts/gpu_build_env.sh), in a small repository of the project's layout: the overlay holds the
# files as at the revision, and a round refuses it, naming the files, once the tree has changed since.
set -uo pipefail
scripts=$1
work=$2
rm -rf "$work" && mkdir -p "$work/repo/scripts" "$work/repo/src/kernels" "$work/repo/bench"
cp "$scripts/gdn_ab_overlay.sh" "$scripts/gpu_build_env.sh" "$work/repo/scripts/"
source "$(dirname "$0")/check.sh"
cd "$work/repo" || exit 1
echo "int a = 1;" >src/kernels/a.cu
echo "int b = 1;" >bench/b.cpp
echo "docs" >README.md
git init -q . && git add -A && git -c user.name=t -c user.email=t@example.com commit -qm first
echo "int a = 2;" >src/kernels/a.cu
echo "int c = 1;" >src/kernels/c.cu
out=$(bash scripts/gdn_ab_overlay.sh HEAD .overlay 2>&1)
check "the overlay is made" "2 file(s) of src/ and bench/" "$out"
check "a changed file as at the revision" "int a = 1;" "$(cat .overlay/src/kernels/a.cu)"
check "an added file listed as removed" "src/kernels/c.cu" "$(cat .overlay/removed.txt)"
check "the tree's files recorded" "bench/b.cpp" "$(cat .overlay/tree.sha256)"
source scripts/gpu_build_env.sh
out=$(check_overlay_matches_tree .overlay 2>&1) && echo "ok   - the same tree passes" ||
  { echo "FAIL - the same tree refused: $out"; failures=$((failures + 1)); }
echo "more docs" >>README.md
out=$(check_overlay_matches_tree .overlay 2>&1) && echo "ok   - a change outside src/ and bench/ passes" ||
  { echo "FAIL - a change outside src/ and bench/ refused: $out"; failures=$((failures + 1)); }
echo "int b = 2;" >bench/b.cpp
echo "int d = 1;" >src/kernels/d.cu
out=$(check_overlay_matches_tree .overlay 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "ok   - a changed tree refused" || { echo "FAIL - a changed tree gave $rc: $out"; failures=$((failures + 1)); }
check "the changed file named" "bench/b.cpp" "$out"
check "the added file named" "src/kernels/d.cu" "$out"
check "what to do named" "make it again with scripts/gdn_ab_overlay.sh" "$out"
echo "int b = 1;" >bench/b.cpp
rm src/kernels/d.cu
out=$(check_overlay_matches_tree .overlay 2>&1) && echo "ok   - the tree restored passes" ||
  { echo "FAIL - the tree restored refused: $out"; failures=$((failures + 1)); }
rm .overlay/tree.sha256
out=$(check_overlay_matches_tree .overlay 2>&1) && { echo "FAIL - an overlay without checksums passed"; failures=$((failures + 1)); }
check "an overlay without checksums refused" "has no tree.sha256" "$out"
finish
