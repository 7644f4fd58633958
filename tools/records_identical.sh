#!/usr/bin/env bash
# Are a run's records byte-identical between two source trees? Runs the demo and a --limit run of every
# built-in task on each tree (same Python environment, smollm2, one thread), then compares every records
# file (*.jsonl) of the two output folders with `cmp`.
#
#   tools/records_identical.sh BASE_TREE NEW_TREE [OUT_DIR]
#
# e.g. against a commit:  git worktree add /tmp/base COMMIT && tools/records_identical.sh /tmp/base .
# On a busy 2-core machine ImplicitBBQ's chain-of-thought generations and exact parses take hours; a quicker
# comparison of its scored records:
#   IMPLICITBBQ_LIMIT=4 IMPLICITBBQ_SET="--set strategies=[zero_shot,safety,few_shot] --set parse_exact=false" \
#       tools/records_identical.sh /tmp/base .
#
# Environment: CMP_ISO_LIMIT (default 2), IMPLICITBBQ_LIMIT (default 24) and IMPLICITBBQ_SET (extra options,
# e.g. "--set parse_exact=false": the exact parse of 24 items takes about an hour on a busy 2-core machine);
# ONLY=base or ONLY=new runs one tree; TASKS=a,b runs only those (demo counts as one; the others' outputs are
# kept); SKIP_RUNS=1 compares existing outputs only.
# Exit status 0 when every records file matches, 1 otherwise.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BASE_TREE NEW_TREE [OUT_DIR]" >&2; exit 2; }
base=$(cd "$1" && pwd); new=$(cd "$2" && pwd); out=${3:-/tmp/records-identical}
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 PROBE_DATA=${PROBE_DATA:-/work/shared/data}

only() { [ -z "${TASKS:-}" ] || [[ ",$TASKS," == *",$1,"* ]]; }  # is task $1 to be run?

runs() {  # TREE OUT: the demo and one --limit run per task, with the tree's own code
    local tree=$1 dir=$2
    mkdir -p "$dir"
    (
        cd "$tree" && export PYTHONPATH=$tree
        ! only demo || python -m probe.cli demo --model smollm2 --threads 1 --output "$dir/demo"
        run() { only "$1" || return 0; python -m probe.cli run "$1" --model smollm2 --threads 1 --no-progress --limit "$2" \
                    --output "$dir/$1" "${@:3}"; }
        run bbq 24
        run crows_pairs 24
        run hbb 20 --set hbb_sg=false
        # shellcheck disable=SC2086  # IMPLICITBBQ_SET: extra options, word-split on purpose
        run implicitbbq "${IMPLICITBBQ_LIMIT:-24}" ${IMPLICITBBQ_SET:-}
        run cmp_iso "${CMP_ISO_LIMIT:-2}"
    ) >>"$dir.log" 2>&1
    echo "$tree -> $dir (log: $dir.log, exit $?)"
}

if [ "${SKIP_RUNS:-0}" != 1 ]; then
    for side in base new; do
        [ -z "${ONLY:-}" ] || [ "$ONLY" = "$side" ] || continue
        for t in demo bbq crows_pairs hbb implicitbbq cmp_iso; do ! only "$t" || rm -rf "${out:?}/$side/$t"; done
        if [ "$side" = base ]; then runs "$base" "$out/base"; else runs "$new" "$out/new"; fi
    done
fi

status=0
cd "$out/base" || exit 2
files=$(find . -name '*.jsonl' | sort)
[ -n "$files" ] || { echo "no records files under $out/base"; exit 1; }
for f in $files; do
    if [ ! -f "$out/new/$f" ]; then echo "MISSING  $f"; status=1
    elif cmp -s "$f" "$out/new/$f"; then echo "same     $f"
    else echo "DIFFERS  $f"; status=1; fi
done
(cd "$out/new" && find . -name '*.jsonl' | sort) | while read -r f; do
    [ -f "$out/base/$f" ] || echo "EXTRA    $f"
done
exit $status
