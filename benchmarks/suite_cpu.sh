#!/usr/bin/env bash
# CPU seconds (user + sys) of test files run alone, one process (-n 0), in two checkouts one after the other,
# so a busy machine weighs on both alike: benchmarks/suite_cpu.sh BEFORE_DIR AFTER_DIR tests/unit/test_X.py ...
set -u
before=$1 after=$2; shift 2
printf "| file | before (s) | after (s) |\n|---|---:|---:|\n"
for f in "$@"; do
  row="| $(basename "$f")"
  for root in "$before" "$after"; do
    t=$(cd "$root" && PYTHONPATH=$root OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 /usr/bin/time -f "%U %S" \
        python -m pytest -q -p no:cacheprovider -n 0 "$f" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}')
    row="$row | $t"
  done
  echo "$row |"
done
