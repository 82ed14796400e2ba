"""`oomwatch` command line: dispatches to one module per subcommand.

Each subcommand module exposes `configure(parser)` and `main(args) -> int`; they are imported
lazily so `oomwatch report` never pays for the daemon's or the Kubernetes client's imports,
and runs where only `pip install oomwatch` (no `agent` extra) was installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from oomwatch import __version__

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "report": (
        "oomwatch.report.command",
        "post-mortem of OOM kills: a log, stdin, the store or /dev/kmsg",
    ),
    "run": ("oomwatch.daemon.command", "the node agent: follow the kernel log and cgroup counters"),
    "demo": ("oomwatch.demo", "provoke a real OOM kill in a scratch cgroup and show the incident"),
}
# What `pip install oomwatch` leaves out (the `agent` extra, pyproject.toml), by import name.
AGENT_LIBRARIES = frozenset({"kubernetes", "structlog", "psutil", "yaml"})
# The subcommands that need them, looked for before they start (not imported: the agent
# imports each only where it is used, and a standalone one may never need some).
NEEDS_AGENT_LIBRARIES = frozenset({"run"})


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="oomwatch",
        description="Node-level OOM diagnostics: who was killed, why, which limit, what to change.",
    )
    parser.add_argument("--version", action="version", version=f"oomwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if wanted is not None and name != wanted:
            continue  # the others' parsers show only in `oomwatch --help`, which names none
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == wanted:
            missing = _missing_agent_libraries() if name in NEEDS_AGENT_LIBRARIES else []
            if missing:
                return _needs_agent_libraries(name, missing)
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name not in AGENT_LIBRARIES:
                    raise
                return _needs_agent_libraries(name, [exc.name])
            module.configure(p)
            p.set_defaults(_main=module.main)
    args = parser.parse_args(argv)
    result: int = args._main(args)
    return result


def _missing_agent_libraries() -> list[str]:
    return sorted(name for name in AGENT_LIBRARIES if importlib.util.find_spec(name) is None)


def _needs_agent_libraries(command: str, missing: list[str]) -> int:
    """Exit status 2 and the extra to install, naming the agent libraries `missing`."""
    sys.stderr.write(
        f"oomwatch {command}: needs the agent's libraries ({', '.join(missing)}"
        f" {'is' if len(missing) == 1 else 'are'} missing): pip install 'oomwatch[agent]'\n"
    )
    return 2


def run() -> NoReturn:
    """The `oomwatch` program: `main`, then the process's exit.  Once a report is written
    the process ends without the interpreter's teardown, which frees every module and object
    one by one (~15 ms after a dense log's report); a report holds nothing else to close, its
    HTML file is closed already and the standard streams are flushed here first.  Other
    commands (the agent's threads and store) and a failed flush exit as usual.  A report also
    keeps the memory it frees for its next piece (`report.heap`), which nothing else should."""
    argv = sys.argv[1:]
    report = argv[:1] == ["report"]
    if report:
        from oomwatch.report.heap import keep_freed_memory

        keep_freed_memory()
    code = main(argv)
    if report:
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:  # None: started with that descriptor closed
                    stream.flush()
        except OSError:
            raise SystemExit(code) from None
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    run()
