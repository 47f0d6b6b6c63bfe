#!/usr/bin/env bash
# Downloads the wheels a lock file pins (for Python 3.12 / x86-64 Linux) and checks every file against
# its SHA-256. The GPU machine has no network, so these wheels travel with the tree and are installed
# there with
#     pip install --no-index --no-deps --target DIR DEST/*.whl
# and used through PYTHONPATH=DIR. The locks:
#   tools/bench/gdn_peer_wheels.lock    -> .whl/gdn-peers   the GDN peer kernels (docs/benchmarks/gdn-peers.md)
#   tools/bench/serve_bench_wheels.lock -> .whl/serve-bench guidellm, the HTTP serving benchmark client
#                                                           (docs/benchmarks/serving-http.md)
#
# usage: tools/bench/fetch_wheels.sh LOCK DEST [--verify-only] [--budget-mib N]
#   --verify-only    download nothing; only check what is there
#   --budget-mib N   fail when the wheels total more than N MiB (default 45: the carry limit is
#                    60 MiB with about 10 MiB of other files)
set -euo pipefail

lock="" dest=""
verify_only=0
budget_mib=45

while [[ $# -gt 0 ]]; do
  case "$1" in
    --verify-only) verify_only=1; shift ;;
    --budget-mib) budget_mib="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "fetch_wheels: unknown argument: $1" >&2; exit 2 ;;
    *) if [[ -z "$lock" ]]; then lock=$1; elif [[ -z "$dest" ]]; then dest=$1; else
         echo "fetch_wheels: one LOCK and one DEST, got also $1" >&2; exit 2; fi; shift ;;
  esac
done

die() { echo "fetch_wheels: $*" >&2; exit 1; }
[[ -n "$lock" && -n "$dest" ]] || die "usage: fetch_wheels.sh LOCK DEST [--verify-only] [--budget-mib N]"

[[ -f "$lock" ]] || die "lock file missing: $lock"
mkdir -p "$dest"

# "sha256  filename" lines; comments and blank lines skipped.
mapfile -t entries < <(grep -Ev '^[[:space:]]*(#|$)' "$lock")
[[ ${#entries[@]} -gt 0 ]] || die "no wheels listed in $lock"

declare -A want_sha=()
specs=()
for line in "${entries[@]}"; do
  read -r sha file rest <<<"$line"
  [[ -z "${rest:-}" && ${#sha} -eq 64 && "$file" == *.whl ]] || die "malformed lock line: $line"
  want_sha["$file"]="$sha"
  # Wheel names are name-version-...; pip matches '_' and '-' in names alike.
  name="${file%%-*}"
  version="${file#*-}"; version="${version%%-*}"
  if [[ ! -f "$dest/$file" ]]; then
    specs+=("$name==$version")
  fi
done

if [[ $verify_only -eq 0 && ${#specs[@]} -gt 0 ]]; then
  echo "fetch_wheels: downloading ${#specs[@]} wheel(s) into $dest"
  # --no-deps: the lock is the whole list. The platform tags cover every manylinux level a
  # glibc 2.39 x86-64 machine accepts that these wheels use; pure wheels match any platform.
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    --dest "$dest" "${specs[@]}" \
    || die "pip download failed (PyPI reachable? versions still published?)"
fi

# Every locked file present with its hash; nothing else (pip install *.whl would take it).
status=0
total=0
for file in "${!want_sha[@]}"; do
  path="$dest/$file"
  if [[ ! -f "$path" ]]; then
    echo "fetch_wheels: MISSING $file (pip picked another build of this version? see $dest)" >&2
    status=1
    continue
  fi
  got="$(sha256sum "$path" | cut -d' ' -f1)"
  if [[ "$got" != "${want_sha[$file]}" ]]; then
    echo "fetch_wheels: SHA-256 MISMATCH $file: expected ${want_sha[$file]}, got $got (delete it and rerun to fetch it again)" >&2
    status=1
  fi
  total=$((total + $(stat -c %s "$path")))
done
for path in "$dest"/*.whl; do
  [[ -e "$path" ]] || continue
  file="$(basename "$path")"
  if [[ -z "${want_sha[$file]:-}" ]]; then
    echo "fetch_wheels: UNLISTED $file in $dest (remove it: the install takes every *.whl)" >&2
    status=1
  fi
done
[[ $status -eq 0 ]] || die "the wheels in $dest do not match $lock"

mib="$(awk -v b="$total" 'BEGIN { printf "%.1f", b / 1048576 }')"
echo "fetch_wheels: ${#want_sha[@]} wheels verified, $total bytes ($mib MiB) in $dest"
if awk -v b="$total" -v m="$budget_mib" 'BEGIN { exit !(b > m * 1048576) }'; then
  die "the wheels total $mib MiB, over the budget of $budget_mib MiB"
fi

# Peers left out on purpose, with the reason the harness will report for them.
grep -E '^# unavailable: ' "$lock" | sed 's/^# unavailable: /fetch_wheels: not carried: /' || true
