"""The README's commands, as written: every `probe ...` line of its code blocks parses with the real command-line
parser, every file, folder and lock a command reads exists in the repository, the Python examples compile, and
the cheap commands (`probe --help`, `probe data fetch --help`, `probe tasks`) run. The demo itself is run by the
integration tests (tests/integration/test_newcomer.py). No model is loaded here."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from probe.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: a token naming a file the repository ships (an input the command reads), not an output or a placeholder
SHIPPED = re.compile(r"^(?:requirements|experiments|tools|docs|benchmarks)/|\.(?:lock|yaml|yml|sh|py|toml)$")


def blocks(lang: str) -> list[str]:
    """The README's fenced code blocks in ``lang``."""
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def commands() -> list[list[str]]:
    """Every command of the README's bash blocks, as argv lists: comments dropped, ``&&`` / ``;`` split,
    ``for v in a b; do ...; done`` unrolled with each value."""
    out: list[list[str]] = []
    for block in blocks("bash"):
        loop: tuple[str, list[str]] | None = None
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[0] == "for":  # for m in a b; do
                head = line.split(";")[0].split()
                loop = (head[1], head[3:])
                continue
            if words == ["done"]:
                loop = None
                continue
            text = line.split(" #")[0]
            for value in (loop[1] if loop else [None]):
                expanded = text.replace(f"${loop[0]}", value) if loop and value else text
                for part in re.split(r"&&|;", expanded):
                    argv = shlex.split(part, comments=True)
                    if argv:
                        out.append(argv)
    return out


def test_the_readme_has_the_commands_a_newcomer_runs():
    cmds = [" ".join(c) for c in commands()]
    assert "probe demo --output probe-demo" in cmds
    assert any(c.startswith("pip install -r requirements/cpu.lock") for c in cmds)
    assert any("--model smollm2,gemma3-270m" in c for c in cmds)
    assert sum(c.startswith("probe ") for c in cmds) >= 15


@pytest.mark.parametrize("argv", [c for c in commands() if c[0] == "probe"], ids=lambda c: " ".join(c)[:60])
def test_every_probe_command_parses(argv):
    parser = build_parser()
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as exc:  # argparse's refusal: the README's command would fail as written
        pytest.fail(f"README command does not parse ({exc.code}): {' '.join(argv)}")
    assert getattr(args, "func", None) is not None, f"README command names no subcommand: {' '.join(argv)}"


@pytest.mark.parametrize("argv", commands(), ids=lambda c: " ".join(c)[:60])
def test_every_file_a_command_reads_exists(argv):
    for word in argv[1:]:
        value = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
        if SHIPPED.search(value) and "*" not in value:
            assert (ROOT / value).exists(), f"{' '.join(argv)}: {value} is not in the repository"
    if argv[:2] == ["pip", "install"]:
        for flag, value in zip(argv, argv[1:]):
            if flag == "-r":
                assert (ROOT / value).is_file(), f"{value}: no such lock"
            if flag == "-e":
                assert (ROOT / value / "pyproject.toml").is_file()


def test_the_python_examples_compile():
    examples = blocks("python")
    assert examples
    for code in examples:
        compile(code, "README.md", "exec")


def test_the_cheap_commands_run(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["data", "fetch", "--help"])
    assert exc.value.code == 0 and "bbq" in capsys.readouterr().out
    assert main(["tasks"]) == 0
    assert {"demo", "bbq", "hbb", "stereoset"} <= set(re.findall(r"\w+", capsys.readouterr().out))


def test_probe_help_runs_as_its_own_process():
    proc = subprocess.run([sys.executable, "-m", "probe", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0 and "probe demo" in proc.stdout and "Traceback" not in proc.stderr
