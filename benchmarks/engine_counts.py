"""The engine's counts, old (level-by-level KV-cache path) vs new (packed passes), in one process.

    python benchmarks/engine_counts.py                    # tiny random model, then SmolLM2
    python benchmarks/engine_counts.py --models tiny      # seconds
    python benchmarks/engine_counts.py --json out.json

The old engine is the level-by-level path the package still carries for the
models the packed pass cannot run exactly (``Scorer.packed = False``: shared
segments in their own passes, KV caches selected per child row and merged
between levels, a host read per chunk); nothing else differs between the two
columns. Figures (the CPU table of benchmarks/RESULTS.md):

- forward passes for 192 paired BBQ requests (96 items, text + letters) at a
  16,384-token budget and no row cap, and per 1,000 computed tokens at the
  budget ``token_budget="auto"`` gives the Llama-3.1-8B shape in bf16 on 120 GiB free;
- padding: share of the positions run that are padding, and share of the positions run that are
  not distinct tokens (padding, and shared segments a row repeats);
- in the largest HBB-SG pass that reads leaves: the share of its attended
  columns that are padding or parent-cache columns (old), or padding (new);
- KV-cache bytes copied per computed token;
- host-device copies per ``score()`` call: the copies the code asks for
  (``Tensor.to(device)``, ``.cpu()``, ``.tolist()``, ``.item()``,
  ``torch.tensor(..., device=...)``), counted on the CPU where each would be
  one transfer on a GPU;
- host milliseconds per 1,000 computed tokens with a stub model whose decoder
  and head return zeros (what the engine itself costs);
- max |delta| new vs old, and changed argmaxes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PROBE_DATA", str((ROOT.parent / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from probe.scoring import Scorer  # noqa: E402
from probe.scoring.engine.memory import ModelShape, fit_token_budget  # noqa: E402

BUDGET = 16_384
NO_ROW_CAP = 1 << 30
GIB = 1024**3


def budget_8b() -> int:
    """``token_budget="auto"`` for the Llama-3.1-8B shape in bf16 with 120 GiB free (an H200 after weights)."""
    shape = ModelShape(32, 4096, 32, 8, 128, 14336, 128256, 2, False)
    return fit_token_budget(shape, 120 * GIB)


class CopyCounter(TorchFunctionMode):
    """Counts the host-device copies the code asks for (each is one transfer on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if "transformers" in sys._getframe(1).f_code.co_filename:  # the model's own (buffers it keeps)
            return func(*args, **kwargs)
        if name in ("tolist", "item", "cpu"):
            self.copies += 1
        elif name == "to" and (any(isinstance(a, (torch.device, str)) for a in args[1:]) or "device" in kwargs):
            self.copies += 1
        elif func is torch.tensor and kwargs.get("device") is not None:
            self.copies += 1
        return func(*args, **kwargs)


class PassShapes:
    """Per forward pass: rows, columns attended (cache included), new tokens and cache columns. Level
    passes are read from the decoder's 2-D mask; packed passes from their arrays."""

    def __init__(self, scorer: Any) -> None:
        self.passes: list[dict[str, int]] = []
        self._h = scorer.engine.decoder.register_forward_pre_hook(self._hook, with_kwargs=True)
        real = scorer.driver._packed_pass

        def packed_pass(a, *rest):
            rows, width = a.ids.shape
            self.passes.append({"rows": rows, "width": width, "columns": rows * width,
                                "new": rows * width - a.padded, "cached": 0, "packed": 1})
            return real(a, *rest)

        scorer.driver._packed_pass = packed_pass

    def _hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        if isinstance(mask, dict) or mask.ndim == 4:
            return
        rows, width = ids.shape
        cols = mask.shape[1]
        new = int(mask[:, cols - width:].sum())
        self.passes.append({"rows": rows, "width": width, "columns": rows * cols, "new": new,
                            "cached": rows * (cols - width)})

    def close(self) -> None:
        self._h.remove()


def run(lm: Any, reqs: list, packed: bool, budget: int = BUDGET, rows: int = NO_ROW_CAP,
        sampling: tuple = ()) -> dict[str, Any]:
    scorer = Scorer(lm, batch_size=rows, token_budget=budget)
    scorer.packed = packed
    shapes = PassShapes(scorer)
    counter = CopyCounter()
    t = time.perf_counter()
    with counter:
        results = scorer.score(reqs, sampling=sampling)
    seconds = time.perf_counter() - t
    shapes.close()
    c = scorer.engine.counts()
    run_positions = c["tokens_computed"] + c["tokens_padded"]
    return {"results": results, "seconds": seconds, "counts": c, "passes": shapes.passes,
            "padding_share": c["tokens_padded"] / run_positions if run_positions else 0.0,
            "kv_bytes_per_token": c["kv_bytes_copied"] / max(1, c["tokens_computed"]),
            "host_copies": counter.copies}


def leaf_pass_waste(passes: list[dict[str, int]]) -> float | None:
    """In the largest pass that reads leaves (old: one with parent-cache columns; new: any), the share of
    its attended columns that are padding or cache: 1 - new tokens / (rows x columns)."""
    cands = [p for p in passes if p["cached"] or p.get("packed")]
    if not cands:
        return None
    p = max(cands, key=lambda p: p["columns"])
    return 1 - p["new"] / p["columns"]


def _values(results: list) -> list[float]:
    out: list[float] = []
    for r in results:
        out += list(getattr(r, "logprobs", ())) or [r.nll]
    return out


def _argmaxes(results: list) -> list[int]:
    return [max(range(len(r.logprobs)), key=lambda i: r.logprobs[i]) for r in results if hasattr(r, "labels")
            or hasattr(r, "options")]


def compare(old: dict, new: dict) -> dict[str, Any]:
    a, b = _values(old["results"]), _values(new["results"])
    diff = max((abs(x - y) for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)), default=0.0)
    changed = sum(x != y for x, y in zip(_argmaxes(old["results"]), _argmaxes(new["results"])))
    return {"max_abs_delta": diff, "changed_argmaxes": changed}


# -- the stub model --------------------------------------------------------------------
class _Out:
    def __init__(self, h: torch.Tensor) -> None:
        self.last_hidden_state = h
        self.past_key_values = None


class ZeroDecoder(torch.nn.Module):
    """A decoder that returns zeros (and extends a KV cache it is given with zeros): what is left of a
    score() call is the engine's host work."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.d_model = cfg.hidden_size
        self.n_layers = cfg.num_hidden_layers
        self.kv = (cfg.num_key_value_heads, getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None, position_ids: Any = None,
                past_key_values: Any = None, **kwargs: Any) -> _Out:
        rows, width = input_ids.shape
        if past_key_values is not None:
            z = torch.zeros(rows, self.kv[0], width, self.kv[1])
            for layer in range(self.n_layers):
                past_key_values.update(z, z, layer)
        out = _Out(torch.zeros(rows, width, self.d_model))
        out.past_key_values = past_key_values
        return out


def stub_lm(lm: Any) -> Any:
    """``lm`` with its decoder and head replaced by zeros of the same shapes."""
    import copy

    stub = copy.copy(lm)
    model = copy.copy(lm.model)
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    zero = ZeroDecoder(cfg)
    head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
    torch.nn.init.zeros_(head.weight)
    model.get_decoder = lambda: zero
    model.get_output_embeddings = lambda: head
    stub.model = model
    return stub


def host_ms_per_1k(lm: Any, reqs: list, packed: bool, repeats: int = 5) -> dict[str, float]:
    """Milliseconds per 1,000 computed tokens of a score() call with the zeros stub (best of
    ``repeats``; encoding done before): ``wall``, and ``host``: the wall time less the time inside the
    engine's device work (the decoder's forward pass with its mask, the head and the read on the
    positions it gathers; on a GPU these are kernel launches that run asynchronously), i.e. the
    planning, index building, staging and handing out that the engine does in Python and numpy."""
    stub = stub_lm(lm)
    best = {"wall": math.inf, "host": math.inf}
    for _ in range(repeats):
        scorer = Scorer(stub, batch_size=NO_ROW_CAP, token_budget=BUDGET)
        scorer.packed = packed
        encoded = [scorer.encode(r) for r in reqs]
        device = [0.0, 0]  # seconds, nesting depth (run_packed calls _decoder: counted once)
        eng = scorer.engine
        for name in ("run_packed", "read_packed", "_decoder", "read"):
            setattr(eng, name, _timed(getattr(eng, name), device))
        t = time.perf_counter()
        scorer._compute(encoded, progress=False)
        wall = time.perf_counter() - t
        per = 1e6 / max(1, eng.tokens_run)
        best = {"wall": min(best["wall"], wall * per), "host": min(best["host"], (wall - device[0]) * per)}
    return best


def _timed(fn: Any, acc: list) -> Any:
    """``fn``, adding the seconds spent inside it to ``acc[0]`` (outermost of the timed calls only:
    ``acc[1]`` is their shared nesting depth)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        acc[1] += 1
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[1] -= 1
            if acc[1] == 0:
                acc[0] += time.perf_counter() - t

    return call


# -- workloads -------------------------------------------------------------------------
def workloads(tok: Any, bbq_items: int, concepts: int, sg_n: int) -> dict[str, Any]:
    from gpu import bbq_workload, hbb_workload

    bbq, _ = bbq_workload(tok, bbq_items, "Age,Nationality,Religion")
    hbb = hbb_workload(tok, concepts, sg_n)
    return {"bbq": bbq, "hbb_mcq": hbb["mcq"], "hbb_sg": hbb["sg"], "sampling": hbb["sampling"]}


def load(name: str) -> Any:
    if name == "tiny":
        from tests.tiny import tiny_lm
        from probe.models import load_model

        real = load_model("smollm2", device="cpu", dtype="float32")
        lm = tiny_lm()
        # the tiny model with SmolLM2's tokenizer: real prompts, a tiny forward
        import transformers

        cfg = lm.model.config
        cfg.vocab_size = len(real.tokenizer)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
        return type(real)(model=model, tokenizer=real.tokenizer, name="tiny", source="benchmarks")
    from probe.models import load_model

    return load_model(name, device="cpu", dtype="float32")


def measure_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    lm = load(name)
    w = workloads(lm.tokenizer, args.bbq_items, args.concepts, args.sg_n)
    out: dict[str, Any] = {"model": name, "bbq_requests": len(w["bbq"]), "budget_8b": budget_8b()}
    for label in ("old", "new"):
        packed = label == "new"
        bbq = run(lm, w["bbq"], packed)
        big = run(lm, w["bbq"], packed, budget=out["budget_8b"])
        light = name in args.bbq_only.split(",")
        sg = bbq if light else run(lm, w["hbb_sg"], packed, budget=BUDGET, rows=16)
        mcq = bbq if light else run(lm, w["hbb_mcq"], packed, budget=BUDGET, rows=16, sampling=w["sampling"])
        out[label] = {
            "bbq_passes": bbq["counts"]["forward_passes"], "bbq_tokens": bbq["counts"]["tokens_computed"],
            "bbq_padding_share": bbq["padding_share"],
            "bbq_positions_run": bbq["counts"]["tokens_computed"] + bbq["counts"]["tokens_padded"],
            "passes_per_1k_tokens_8b_budget": 1000 * big["counts"]["forward_passes"] / big["counts"]["tokens_computed"],
            "hbb_sg_leaf_pass_pad_cache_share": leaf_pass_waste(sg["passes"]),
            "kv_bytes_per_token": max(bbq["kv_bytes_per_token"], sg["kv_bytes_per_token"]),
            "host_copies_per_call": {"bbq": bbq["host_copies"], "hbb_sg": sg["host_copies"], "hbb_mcq": mcq["host_copies"]},
            "seconds": {"bbq": bbq["seconds"], "hbb_sg": sg["seconds"], "hbb_mcq": mcq["seconds"]},
            "host_ms_per_1k_tokens_stub": None if light else host_ms_per_1k(lm, w["bbq"], packed),
            "_runs": {"bbq": bbq, "hbb_sg": sg, "hbb_mcq": mcq},
        }
    # distinct tokens: what the old path computes (each prefix-tree segment once, no row repeats one)
    distinct = out["old"]["bbq_tokens"]
    for label in ("old", "new"):
        out[label]["bbq_not_distinct_share"] = 1 - distinct / out[label]["bbq_positions_run"]
    out["new_vs_old"] = {k: compare(out["old"]["_runs"][k], out["new"]["_runs"][k]) for k in ("bbq", "hbb_sg", "hbb_mcq")}
    for label in ("old", "new"):
        out[label].pop("_runs")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--bbq-items", type=int, default=96, help="BBQ items (2 requests each: text and letters)")
    ap.add_argument("--concepts", type=int, default=2, help="HBB concept pairs (all their instances)")
    ap.add_argument("--sg-n", type=int, default=3, help="HBB-SG variations per option")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bbq-only", default="", help="models measured on BBQ only (HBB figures repeat BBQ's, no stub)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    res = {name: measure_model(name, args) for name in args.models.split(",")}
    text = json.dumps(res, indent=1, default=float)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return res


if __name__ == "__main__":
    with torch.inference_mode():
        main()
