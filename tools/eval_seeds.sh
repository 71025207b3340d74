#!/usr/bin/env bash
# Trains a task once per seed at the lesson's settings (or with the extra flags given) and
# prints each seed's validation accuracy and the mean. Usage:
#   tools/eval_seeds.sh TASK FIRST_SEED LAST_SEED [extra attnkit train flags...]
#   tools/eval_seeds.sh neighbor-sum 0 9
# ATTNKIT (default build/release/tools/attnkit) picks the binary; runs go to a temp folder.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 TASK FIRST_SEED LAST_SEED [attnkit train flags...]" >&2
  exit 2
fi
task=$1 first=$2 last=$3
shift 3
bin=${ATTNKIT:-"$(dirname "$0")/../build/release/tools/attnkit"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sum=0 n=0 min=1 max=0
for seed in $(seq "$first" "$last"); do
  "$bin" train "$task" --seed "$seed" --out "$work/$seed" --quiet "$@"
  acc=$(sed -n 's/^ *"val_accuracy": *\([0-9.e+-]*\),*$/\1/p' "$work/$seed/metrics.json")
  printf '%s seed %s: val_accuracy %.4f\n' "$task" "$seed" "$acc"
  sum=$(awk -v a="$sum" -v b="$acc" 'BEGIN { print a + b }')
  min=$(awk -v a="$min" -v b="$acc" 'BEGIN { print (b < a ? b : a) }')
  max=$(awk -v a="$max" -v b="$acc" 'BEGIN { print (b > a ? b : a) }')
  n=$((n + 1))
done
awk -v s="$sum" -v n="$n" -v lo="$min" -v hi="$max" -v t="$task" -v f="$first" -v l="$last" \
  'BEGIN { printf "%s seeds %s-%s: mean val_accuracy %.4f (min %.4f, max %.4f, %d runs)\n", t, f, l, s / n, lo, hi, n }'
