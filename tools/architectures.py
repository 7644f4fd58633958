"""Print the architecture sweep's table: per decoder-only family of the installed transformers, the scoring path
probe takes, and each path's result against a plain forward (``tests/unit/test_architecture_sweep.py``).

    python tools/architectures.py              # a plain-text table
    python tools/architectures.py --markdown   # the table docs/scoring.md ("Architectures") holds
    python tools/architectures.py llama mpt    # some families only

Runs on the CPU in about a minute (tiny random models built in memory; no download).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def markdown(outcomes: list) -> str:
    """The sweep as a Markdown table: family, scoring path, then per path exact / refused (why) / failing."""
    from tests.unit.test_architecture_sweep import PATHS

    def cell(v: str) -> str:
        return v if v == "exact" else v.split(":")[0] + ": " + v.split(":", 1)[1].strip().replace("|", "/")[:90]

    lines = ["| family | scoring path | " + " | ".join(PATHS) + " |", "|" + "---|" * (len(PATHS) + 2)]
    for o in sorted(outcomes, key=lambda o: o.family):
        lines.append(f"| {o.family} | {o.route or '-'} | " + " | ".join(cell(o.paths.get(p, "-")) for p in PATHS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", help="families to sweep (default: all)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging

    from tests.unit import _architectures as zoo
    from tests.unit.test_architecture_sweep import sweep, table

    logging.set_verbosity_error()
    outcomes = [sweep(f) for f in (args.families or zoo.families())]
    print(markdown(outcomes) if args.markdown else table(outcomes))
    return 1 if any(o.status == "failing" for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
