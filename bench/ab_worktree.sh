#!/usr/bin/env bash
# A/B of one traceatlas command: a former commit (a git worktree of REV) against the working
# tree, run alternately REPEAT times each, in fresh processes, through the same venv; per run
# wall s, user+sys CPU s and peak RSS (/usr/bin/time) and the 1-min load; the two outputs
# (stdout) compared byte for byte.
#
#   bench/ab_worktree.sh REV REPEAT traceatlas analyze idle STORE --table causes -f csv
#
# The worktree goes to ${TMPDIR:-/tmp}/ta-ab-REV (kept for reruns; `git worktree remove` it).
set -euo pipefail
rev=$1 repeat=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
wt=${TMPDIR:-/tmp}/ta-ab-$rev
[ -d "$wt" ] || git -C "$root" worktree add -q --detach "$wt" "$rev"
out=$(mktemp -d)
cmd=("$root/.venv/bin/$1" "${@:2}")
for i in $(seq "$repeat"); do
  for side in before after; do
    src=$root/src
    [ "$side" = before ] && src=$wt/src
    load=$(cut -d' ' -f1 /proc/loadavg)
    PYTHONPATH=$src /usr/bin/time -o "$out/time" -f "%e %U %S %M" "${cmd[@]}" \
      > "$out/$side.out" 2> "$out/$side.err"
    read -r wall user sys rss < "$out/time"
    echo "$side run $i: ${wall} s, $(echo "$user + $sys" | bc) CPU-s, $((rss / 1024)) MB, load $load"
  done
done
if cmp -s "$out/before.out" "$out/after.out"; then echo "outputs identical"; else
  echo "outputs DIFFER: $out/before.out $out/after.out"; exit 1; fi
rm -rf "$out"
