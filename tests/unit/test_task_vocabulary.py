"""Every task folder names a job the same way: the vocabulary of ``docs/tasks.md`` ("Module names in a task
folder"), read from the document itself, so the table a plugin author follows is the one the suite checks.

A folder's module may not take a name the table lists as a synonym of another (``answers.py`` for
``parse.py``), and no two folders may use names that differ only by a plural ``s`` (``layout.py`` and
``layouts.py``), listed or not.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "tasks.md"
TASKS = ROOT / "probe" / "tasks"
SECTION = "## Module names in a task folder"


def vocabulary(doc: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``module -> (job, synonyms)`` from the section's table (module names without ``.py``)."""
    section = doc.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`(\w+)\.py`\s*\|(.*)\|(.*)\|\s*$", line)
        if m:
            out[m.group(1)] = (m.group(2).strip(), tuple(re.findall(r"`(\w+)`", m.group(3))))
    return out


def task_folders(root: Path = TASKS) -> dict[str, set[str]]:
    """``folder -> its module names`` for every task folder (one holding a ``task.py``) under ``root``."""
    return {d.name: {p.stem for p in d.glob("*.py") if p.stem != "__init__"}
            for d in sorted(root.iterdir()) if (d / "task.py").is_file()}


def synonym_clashes(folders: dict[str, set[str]], vocab: dict[str, tuple[str, tuple[str, ...]]]) -> list[str]:
    """``folder/module.py: name.py (job)`` for each module named like a synonym the vocabulary lists."""
    instead = {syn: name for name, (_, syns) in vocab.items() for syn in syns}
    return [f"{folder}/{m}.py: name it {instead[m]}.py ({vocab[instead[m]][0]})"
            for folder, modules in folders.items() for m in sorted(modules) if m in instead]


def plural_pairs(folders: dict[str, set[str]]) -> list[str]:
    """``a.py / as.py (folders)`` for two module names, in any folders, that differ only by a final ``s``."""
    where: dict[str, list[str]] = {}
    for folder, modules in folders.items():
        for m in modules:
            where.setdefault(m, []).append(folder)
    return [f"{m}.py ({', '.join(where[m])}) / {m}s.py ({', '.join(where[m + 's'])})"
            for m in sorted(where) if m + "s" in where]


def test_the_table_reads_and_names_no_module_twice():
    vocab = vocabulary(DOC.read_text(encoding="utf-8"))
    assert len(vocab) >= 20 and {"layout", "parse", "summary", "data", "task"} <= set(vocab)
    synonyms = [s for _, syns in vocab.values() for s in syns]
    assert len(synonyms) == len(set(synonyms)), "a synonym listed under two names"
    assert not set(synonyms) & set(vocab), "a name listed as a synonym of another"


def test_no_task_folder_uses_a_listed_synonym():
    vocab = vocabulary(DOC.read_text(encoding="utf-8"))
    assert synonym_clashes(task_folders(), vocab) == []


def test_no_two_module_names_differ_by_a_plural():
    assert plural_pairs(task_folders()) == []


def test_every_name_in_the_table_is_used_by_a_folder():
    """The table describes the folders as they are: a row no folder follows is a stale row."""
    used = set().union(*task_folders().values())
    assert sorted(set(vocabulary(DOC.read_text(encoding="utf-8"))) - used) == []


def test_the_checks_see_a_synonym_and_a_plural(tmp_path):
    for folder, modules in {"one": ("task", "parse", "layout"), "two": ("task", "answers", "layouts")}.items():
        (tmp_path / folder).mkdir()
        for m in modules:
            (tmp_path / folder / f"{m}.py").write_text("")
    (tmp_path / "not_a_task").mkdir()
    (tmp_path / "not_a_task" / "results.py").write_text("")
    folders = task_folders(tmp_path)
    assert set(folders) == {"one", "two"}
    vocab = {"parse": ("the paper's answer parser", ("answers",)), "layout": ("its report section", ())}
    assert synonym_clashes(folders, vocab) == ["two/answers.py: name it parse.py (the paper's answer parser)"]
    assert plural_pairs(folders) == ["layout.py (one) / layouts.py (two)"]
