"""notebooks/representations_walkthrough.ipynb is committed executed (outputs and figures, no errors, no local
paths), and runs, every code cell, headless, on the tiny random model.

``python tools/execute_notebook.py`` re-executes it in place on the default model (the ``notebooks`` extra).

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


def _outputs_text(out: dict) -> str:
    parts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items() if k.startswith("text/")]
    return "".join("".join(p) if isinstance(p, list) else p for p in parts)


def test_notebook_is_committed_executed_with_outputs_and_figures():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] for c in code), "a code cell has no output: run tools/execute_notebook.py"
    outputs = [o for c in code for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert not [o for o in outputs if "Traceback (most recent call last)" in _outputs_text(o)]
    # run top to bottom in one fresh kernel
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) >= 2  # the probe accuracies and the logit lens, at least
    local = ("/work/", "/tmp/", "/home/", "/root/", "/Users/", "C:\\")
    leaks = [p for o in outputs for p in local if p in _outputs_text(o)]
    assert leaks == [], f"local paths in the outputs: {leaks}"


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
    assert {"probes.csv", "lens.png", "patching.npz", "steering.csv", "summary.json"} <= set(
        p.name for p in ns["study"].iterdir())
    assert last.data.startswith(b"\x89PNG") and last._repr_png_() == last.data  # shown inline by Jupyter
