"""A newcomer's first hour, as commands in a fresh directory: help, demo, bbq, hbb, two models, a report.

Each step runs `python -m probe ...` in its own process (as a user would), on the real SmolLM2 and, as the
second model, the tiny test model saved to a directory. Every step must finish without a traceback, and
every stage that can take long (a generation stage) must be announced before it starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _probe(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "probe", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, f"probe {' '.join(args)} failed:\n{proc.stderr[-3000:]}"
    return proc


def test_first_hour(tmp_path, model_dir, shared_data):
    work = tmp_path / "newcomer"
    work.mkdir()
    assert "probe demo" in _probe(["--help"], work).stdout  # the help opens with what to run first
    assert "stereoset" in _probe(["tasks"], work).stdout

    _probe(["demo", "--output", "demo", "--limit", "8", "--threads", "1"], work)
    assert (work / "demo" / "report.html").is_file()

    # the README's HBB example, with HBB-SG on: its generation stage is announced with how to skip it
    hbb = _probe(["run", "hbb", "--limit", "2", "--threads", "1", "--quiet", "--output", "hbb",
                  "--set", "sg_max_new_tokens=8"], work)
    assert "plan:" in hbb.stderr and "generation(s) before scoring" in hbb.stderr
    assert "--set hbb_sg=false" in hbb.stderr
    assert "bias type: 2 of 10 covered" in hbb.stderr

    # BBQ on two models at once (lm-eval's spellings), finished by the combined report
    two = _probe(["run", "--tasks", "bbq", "--model", f"smollm2,{model_dir}", "--limit", "8", "--threads", "1",
                  "--quiet", "--output_path", "two"], work)
    assert "bbq --limit 8: 8 of" in two.stderr and "category: 2 of 11 covered" in two.stderr
    assert "combined report" in two.stderr and "## Headline" in two.stdout
    assert {"report.md", "report.html", "results.csv"} <= {p.name for p in (work / "two" / "smollm2").iterdir()}
    frame = pd.read_csv(work / "two" / "results.csv")
    assert set(frame.task) == {"bbq"} and frame.model.nunique() == 2

    _probe(["report", "hbb", "two/smollm2", f"two/{model_dir.name}", "--output", "report"], work)
    page = (work / "report" / "report.html").read_text()
    assert "Headline" in page and (work / "report" / "results.csv").is_file()
