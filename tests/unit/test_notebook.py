"""notebooks/representations_walkthrough.ipynb runs, every code cell, headless, on the tiny random model.

The cells are executed in-process from the notebook's JSON (the json module, one shared namespace, in
order) rather than through nbclient: nbclient, nbformat and ipykernel are an optional extra
(``pip install probe[notebooks]``) that the CPU lock file does not pin, and a kernel subprocess adds
nothing the test checks. The notebook uses no IPython magics (asserted), so plain ``exec`` runs it as
Jupyter would; the last expression of a cell is only displayed there, so it is evaluated here too.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "representations_walkthrough.ipynb"


def _cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_notebook_has_no_magics_and_teaches_the_one_road():
    code = "\n".join(_cells())
    assert not any(line.lstrip().startswith(("%", "!")) for line in code.splitlines())
    assert "probe.evaluate(" in code and "capture=" in code
    for gone in ("ActivationItem", "record_activations", "probe.activations.items", "probe.activations.record"):
        assert gone not in code


def test_notebook_runs_headless(shared_data, model_dir, tmp_path, monkeypatch, one_torch_thread):
    monkeypatch.setenv("PROBE_NOTEBOOK_MODEL", str(model_dir))
    monkeypatch.setenv("PROBE_NOTEBOOK_OUT", str(tmp_path))
    ns: dict = {"__name__": "__notebook__"}
    last = None
    for i, src in enumerate(_cells()):
        tree = ast.parse(src)
        tail = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, f"<notebook cell {i}>", "exec"), ns)
        if tail is not None:  # the value Jupyter would display
            last = eval(compile(ast.Expression(tail.value), f"<notebook cell {i}>", "eval"), ns)
    e, acts = ns["e"], ns["acts"]
    assert acts.ids == list(e.records["id"]) and len(acts.keys()) == 2  # the tiny model's two layers
    assert set(ns["table"]["layer"]) == {0, 1} and len(ns["by_layer"]) == 2
    assert list(ns["steered"]["strength"]) == [-2.0, 0.0, 2.0]
    assert {"probes.csv", "lens.png", "patching.npz", "steering.csv", "summary.json"} <= set(last)
