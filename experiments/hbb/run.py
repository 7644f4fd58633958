"""Run this study end to end: `python experiments/hbb/run.py [--quick] [--models M ...] [-- PROBE_RUN_OPTIONS]`.

See README.md beside this file; the driver is experiments/common.py.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import run_study  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_study(HERE))
