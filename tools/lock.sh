#!/usr/bin/env bash
# Regenerate the two locks with pip-tools:
#   requirements/cpu.lock  the runtime install for users: probe's dependencies and its interp and lm-eval extras;
#   requirements/dev.lock  the same set plus the test tools (the dev extra: pytest, hypothesis, import-linter,
#                          pytest-xdist), for running the suite.
# Both take the pins of requirements/cpu.in, and pip-compile keeps every version already in a lock, so the two
# agree on every package they share (the dev lock is compiled against the runtime lock as a constraint).
# pip-compile runs pip's own resolver with pip's configuration, so it sees a local CPU wheel of torch (uv does
# not look there and would resolve a CUDA build). Review the diff, run tools/drift.py and the suite, then
# commit the locks.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${LOCK_VENV:-/tmp/probe-lock-venv}
[ -x "$venv/bin/pip-compile" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q "pip-tools==7.6.2"; }
compile() {
    "$venv/bin/pip-compile" --quiet --strip-extras --allow-unsafe --no-emit-find-links --no-emit-index-url \
        --no-emit-trusted-host "$@"
}
compile --extra interp --extra lm-eval --output-file requirements/cpu.lock pyproject.toml requirements/cpu.in
compile --extra dev --extra interp --extra lm-eval --constraint requirements/cpu.lock \
    --output-file requirements/dev.lock pyproject.toml requirements/cpu.in
# The tracked pins, shipped with the package (probe.versions): an installed probe compares against them.
python3 - <<'PY'
import json, re
from pathlib import Path
tracked = ("torch", "transformers", "accelerate", "transformer-lens", "numpy")
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", Path("requirements/cpu.lock").read_text(), re.M))
out = {"lock": "requirements/cpu.lock", "versions": {n: pins[n] for n in tracked}}
Path("probe/resources/locked_versions.json").write_text(json.dumps(out, indent=1) + "\n")
PY
