"""Re-execute a notebook in place, so that it is committed with its outputs and figures.

    python tools/execute_notebook.py                                   # notebooks/representations_walkthrough.ipynb
    python tools/execute_notebook.py notebooks/X.ipynb --timeout 1200  # another one, a longer cell limit

Every code cell runs in a fresh kernel (nbclient), top to bottom; the first
error stops the run and the file is left as it was. The notebook writes its
files under a temporary directory (``PROBE_NOTEBOOK_OUT``), removed afterwards.
Before saving, outputs are made portable: that directory, the repository root
and the home directory are replaced by ``OUT``, ``.`` and ``~``, so no local path
is committed, and execution counts run 1, 2, 3, ... as in a clean run.

Needs the ``notebooks`` extra (``pip install -e '.[notebooks]'``: nbclient,
nbformat, ipykernel). Set ``PROBE_NOTEBOOK_MODEL`` to study another model than
the notebook's default; ``--threads`` (default 1) caps torch's CPU threads in
the kernel.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "notebooks" / "representations_walkthrough.ipynb"


def portable(nb: object, replacements: list[tuple[str, str]]) -> int:
    """Replace local paths in every text output of ``nb`` (an nbformat notebook); returns the count."""
    count = 0

    def clean(text: str) -> str:
        nonlocal count
        for old, new in replacements:
            if old and old in text:
                count += text.count(old)
                text = text.replace(old, new)
        return text

    for cell in nb.cells:  # type: ignore[attr-defined]
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = clean(out["text"] if isinstance(out["text"], str) else "".join(out["text"]))
            for mime, value in out.get("data", {}).items():
                if mime.startswith("text/") and isinstance(value, (str, list)):
                    out["data"][mime] = clean(value if isinstance(value, str) else "".join(value))
            if "traceback" in out:
                out["traceback"] = [clean(line) for line in out["traceback"]]
    return count


def execute(path: Path, timeout: int, threads: int) -> int:
    """Run ``path`` in a fresh kernel and write it back with its outputs; returns the exit status."""
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError:
        print("execute_notebook: needs nbclient, nbformat and ipykernel (pip install -e '.[notebooks]')",
              file=sys.stderr)
        return 2
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):  # cell ids (nbformat 4.5), numbered in order
        cell["id"] = f"cell-{i:02d}"
    with tempfile.TemporaryDirectory(prefix="notebook-") as out:
        out = os.path.realpath(out)
        env = {"PROBE_NOTEBOOK_OUT": out, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "TQDM_DISABLE": "1"}  # progress bars are noise in committed outputs
        os.environ.update(env)  # the kernel inherits this process's environment
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(REPO)}})
        try:
            client.execute()
        except CellExecutionError as exc:
            print(f"execute_notebook: {path.name}: a cell failed, the file is unchanged:\n{exc}", file=sys.stderr)
            return 1
        home = str(Path.home())
        n = portable(nb, [(out, "OUT"), (str(REPO) + os.sep, ""), (str(REPO), "."), (home, "~")])
    for i, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        cell.execution_count = i
        for o in cell.get("outputs", []):
            if "execution_count" in o:
                o["execution_count"] = i
        cell.metadata.pop("execution", None)  # timestamps: noise in every diff
    nbformat.write(nb, path)
    print(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: executed, "
          f"{sum(len(c.get('outputs', [])) for c in nb.cells)} outputs, {n} local path(s) made portable")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebook", nargs="?", type=Path, default=DEFAULT, help="the .ipynb file (rewritten in place)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for torch in the kernel (default 1)")
    args = p.parse_args(argv)
    if not args.notebook.is_file():
        print(f"execute_notebook: {args.notebook}: no such notebook", file=sys.stderr)
        return 2
    return execute(args.notebook.resolve(), args.timeout, args.threads)


if __name__ == "__main__":
    sys.exit(main())
