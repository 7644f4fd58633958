"""The ``probe`` command. Each subcommand only parses its arguments and delegates.

Subcommands live in :mod:`probe.commands` and in each task's ``cli`` module
(:func:`probe.tasks.command_modules`: a benchmark's own commands, such as
building its items or computing its metrics from predictions made elsewhere).
Each such module exposes ``register(groups)`` where ``groups`` maps a command
path to the argparse sub-parser collection it adds to: ``""`` (top level, e.g.
``probe score``), ``"data"`` (``probe data fetch``), ``"data build"`` (``probe
data build NAME``) and ``"metrics"`` (``probe metrics NAME``). A registered
parser sets ``func=callable(args) -> int`` with ``set_defaults``. A task's
``cli`` module may also list ``FIRST_STEPS``, ``(command, what it does)`` pairs
that ``probe --help`` shows first.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from probe.errors import ProbeError
from probe.tasks import available, command_modules as task_modules
from probe.versions import version_report

#: Command modules, registered in this order, the tasks' own after ``data`` (:func:`command_modules`).
#: Heavy imports (torch) stay inside their functions so that ``probe --help`` is instant.
COMMAND_MODULES = (
    "probe.commands.score",
    "probe.commands.data",
    "probe.commands.activations",
    "probe.commands.run",
    "probe.commands.analyze",
    "probe.commands.report",
    "probe.commands.lm_eval",
    "probe.commands.validate",
    "probe.commands.merge",
)


DESCRIPTION = ("Exact bias evaluation of open-weight language models: every answer option scored by its "
               "log-probability, no sampling, no parsing.")
EPILOG = """first steps:
{first}  probe tasks                                   the benchmarks: {tasks}
  probe data fetch NAME                         fetch a benchmark's public data (`probe data fetch --help`)
  probe run TASK --limit 24 --threads 1         a stratified sample; writes report.md and report.html
  probe run TASK,TASK --model smollm2,gemma3-270m --limit 24 --output runs/x
                                                several tasks and models, one combined report
  probe report RUN_DIR [RUN_DIR ...] -o report  compare finished runs

`probe COMMAND --help` describes each command."""


def command_modules() -> list[str]:
    """Every command module, in registration order: :data:`COMMAND_MODULES` with the tasks' own after ``data``."""

    at = COMMAND_MODULES.index("probe.commands.data") + 1
    return [*COMMAND_MODULES[:at], *task_modules(), *COMMAND_MODULES[at:]]


def _epilog(modules: list) -> str:
    """:data:`EPILOG` with the tasks' ``FIRST_STEPS`` on top and the registered task names."""

    first = "".join(f"  {cmd:<45} {what}\n" for m in modules for cmd, what in getattr(m, "FIRST_STEPS", ()))
    return EPILOG.format(first=first, tasks=", ".join(available()))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="probe", formatter_class=argparse.RawDescriptionHelpFormatter, description=DESCRIPTION)
    parser.add_argument("--version", action=_VersionAction,
                        help="print probe's version and the versions of the packages that decide its numbers")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    data = top.add_parser("data", help="fetch benchmark data sets and build benchmark items")
    data_sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    build = data_sub.add_parser("build", help="build benchmark items (one JSONL line per instance)")
    build_sub = build.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    metrics = top.add_parser("metrics", help="compute a benchmark's metrics from predictions made anywhere")
    metrics_sub = metrics.add_subparsers(dest="metric", metavar="BENCHMARK")
    groups = {"": top, "data": data_sub, "data build": build_sub, "metrics": metrics_sub}
    modules = []
    for name in command_modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a command module not written yet
                continue
            raise
        module.register(groups)
        modules.append(module)
    parser.epilog = _epilog(modules)
    for p, sub in ((data, data_sub), (build, build_sub), (metrics, metrics_sub)):
        p.set_defaults(func=_usage(p))
    return parser


class _VersionAction(argparse.Action):
    """``--version``: probe's version and, beside it, torch/transformers/... installed vs the lock."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_report())
        parser.exit()


def _usage(parser: argparse.ArgumentParser):
    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return show


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except (ProbeError, OSError, UnicodeError) as exc:
        # under `accelerate launch` every rank meets the same bad input: say it once
        if os.environ.get("RANK", "0") == "0":
            print(f"probe: error: {error_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("probe: interrupted; records written so far are kept, re-run the same command to resume", file=sys.stderr)
        return 130


def error_line(exc: BaseException) -> str:
    """One line for the user: a ProbeError as written; an OS error as ``PATH: what went wrong``
    (a file in the way, no permission, disk or file-size limit full); an encoding error as what it is.

    >>> error_line(OSError(27, "File too large", "out.jsonl"))
    'out.jsonl: File too large (errno 27)'
    """
    if isinstance(exc, OSError) and not isinstance(exc, ProbeError):
        where = f"{exc.filename}: " if exc.filename is not None else ""
        what = exc.strerror or str(exc)
        return f"{where}{what}" + (f" (errno {exc.errno})" if exc.errno else "")
    if isinstance(exc, UnicodeError) and not isinstance(exc, ProbeError):
        return f"text that cannot be encoded or decoded ({exc})"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
