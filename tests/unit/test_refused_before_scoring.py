"""Said in one line before anything is scored: a model whose chat template fails to render or is refused by
transformers' sandbox, and a multi-model run whose later model can be neither found on disk nor loaded offline."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from probe.cli import main
from tests.unit.test_hostile_inputs import _one_line_error
from tests.unit.test_hostile_locks_merge import no_load  # noqa: F401 (a fixture)

#: template -> what the one line says of it (the template's own error)
HOSTILE = {
    "{{ ''.__class__.__mro__ }}": "SecurityError",
    "{{ messages[0]['content'] ": "TemplateSyntaxError",
    "{{ raise_exception('this model takes no prompts') }}": "this model takes no prompts",
    "{% for i in range(100000000) %}x{% endfor %}": "Range too big",
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread."""


@pytest.mark.parametrize("template", list(HOSTILE))
def test_render_prompt_names_the_model_and_the_template_error(template):
    from probe.prompts.chat import ChatTemplateError, render_prompt
    from tests.tiny import tiny_tokenizer

    tok = copy.deepcopy(tiny_tokenizer())  # the cached one is shared by every test
    tok.chat_template = template
    tok.name_or_path = "my-model"
    with pytest.raises(ChatTemplateError) as info:
        render_prompt(tok, "Who?", system="Be brief.")
    line = str(info.value)
    assert "\n" not in line and "'my-model'" in line and HOSTILE[template] in line and "--no-chat-template" in line


def _with_template(model_dir: Path, where: Path, template: str) -> Path:
    """A copy of the tiny model directory whose chat template is ``template``."""
    d = where / "hostile-model"
    shutil.copytree(model_dir, d)
    (d / "chat_template.jinja").write_text(template, encoding="utf-8")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("template", list(HOSTILE))
def test_score_refuses_a_hostile_chat_template_before_scoring(tmp_path, model_dir, capsys, template):
    model = _with_template(model_dir, tmp_path, template)
    inp = tmp_path / "items.jsonl"
    inp.write_text(json.dumps({"id": "q1", "prompt": "Who?", "options": ["A", "B"]}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(model), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--chat-template"]) == 1
    _one_line_error(capsys, "hostile-model", "chat template", HOSTILE[template])
    assert not out.exists() and not (tmp_path / "out.jsonl.input.json").exists()


def test_a_task_run_refuses_a_hostile_chat_template_before_scoring(tmp_path, model_dir, capsys):
    model = _with_template(model_dir, tmp_path, "{{ ''.__class__.__mro__ }}")
    out = tmp_path / "run"
    assert main(["run", "demo", "--model", str(model), "--limit", "2", "--output", str(out), "--device", "cpu",
                 "--no-progress"]) == 1
    _one_line_error(capsys, "hostile-model", "SecurityError")
    assert not (out / "records.jsonl").exists()


@pytest.mark.parametrize("second", ["nobody-here/no-such-model", "no such model"])
def test_a_later_model_that_cannot_be_found_is_refused_before_the_first_runs(tmp_path, model_dir, capsys, no_load,
                                                                               monkeypatch, second):
    """``probe run demo --model a,b``: b neither on disk nor in the offline hub cache stops the run before a."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "runs"
    assert main(["run", "demo", "--model", f"{model_dir},{second}", "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, repr(second), "cannot load model")
    assert no_load == [] and not out.exists()


def test_a_hub_id_in_the_offline_cache_passes_the_check(tmp_path, monkeypatch):
    from probe.models.loader import check_model_resolvable

    hub = tmp_path / "hub"
    snap = hub / "models--someone--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (hub / "models--someone--tiny" / "refs").mkdir()
    (hub / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    assert check_model_resolvable("someone/tiny") == "hub"
