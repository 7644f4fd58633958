"""BBQ's items in a process that runs several runs: the JSONL files read once (kept) vs read every time.

``probe.tasks.bbq.data.load_bbq_jsonl`` keeps each file's reading until the file changes (as
``expand_templates`` keeps its expansions). The script builds the ``bbq`` task's items (every category,
from the shared data) ``--repeats`` times in one process, alternating a kept build and one with the kept
readings dropped first, and prints the median times, their ratio and whether both give the same items.

    python benchmarks/bbq_kept_readings.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from probe.tasks import get
from probe.tasks.bbq import data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    task = get("bbq")
    config = task.make_config({})
    t0 = time.process_time()
    first = task.items(config)  # the template expansions and the readings, once
    print(f"first build (templates expanded, files read): {time.process_time() - t0:.2f} s CPU, {len(first)} items")
    kept, fresh = [], []
    for _ in range(args.repeats):
        data._LOADED.clear()
        t0 = time.process_time()
        again = task.items(config)
        fresh.append(time.process_time() - t0)
        t0 = time.process_time()
        same = task.items(config)
        kept.append(time.process_time() - t0)
        assert again == same == first
    f, k = statistics.median(fresh), statistics.median(kept)
    print(f"JSONL read again: {f:.3f} s CPU; kept: {k:.3f} s CPU; ratio {f / k:.1f}x (median of {args.repeats}); "
          "same items: yes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
