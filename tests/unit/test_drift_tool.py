"""tools/drift.py's bookkeeping: reading pins and listing what moved against the lock."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("drift", Path(__file__).resolve().parents[2] / "tools" / "drift.py")
drift = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(drift)


def test_pins_normalise_names_and_skip_comments():
    text = "# via x\nTransformer_Lens==4.3.0\n    # via probe\ntorch==2.13.0+cpu\n-e file:///repo\nfoo>=1\n"
    assert drift._pins(text) == {"transformer-lens": "4.3.0", "torch": "2.13.0+cpu"}


def test_moved_lists_changed_added_and_removed_packages():
    locked = {"transformers": "5.23.0", "numpy": "2.4.6", "gone": "1.0"}
    newest = {"transformers": "5.24.0", "numpy": "2.4.6", "added": "0.1"}
    assert drift.moved(locked, newest) == {
        "added": {"locked": None, "newest": "0.1"},
        "gone": {"locked": "1.0", "newest": None},
        "transformers": {"locked": "5.23.0", "newest": "5.24.0"},
    }
