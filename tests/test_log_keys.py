"""Every operational log line of the agent has a stable snake_case event key, so an
operator's query (`event="sink_failed"`) survives a rewording; details go in fields."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "oomwatch"
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
KEY = re.compile(r"[a-z][a-z0-9_]*")
# The probe runs inside training processes and logs for people reading their output (its
# warnings say what it will not do for the job); the demo and the CLI print for a terminal.
NOT_THE_AGENT = {"probe/probe.py", "demo.py", "cli.py"}


def _log_calls(tree: ast.AST) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LEVELS
        and _is_logger(node.func.value)
    ]


def _is_logger(value: ast.expr) -> bool:
    name = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")
    return name in {"log", "_log", "logger"} or (
        isinstance(value, ast.Call) and getattr(value.func, "attr", "") == "getLogger"
    )


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "text"` assignments (an event key kept in a constant)."""
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def test_every_log_line_starts_with_a_snake_case_key() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in NOT_THE_AGENT:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = _string_constants(tree)
        for call in _log_calls(tree):
            first = call.args[0] if call.args else None
            if isinstance(first, ast.JoinedStr) and rel == "probe/refusals.py":
                continue  # f"probe_file_{what}": refused or trimmed, both keys
            key = (
                first.value
                if isinstance(first, ast.Constant)
                else constants.get(first.id)
                if isinstance(first, ast.Name)
                else None
            )
            if not (isinstance(key, str) and KEY.fullmatch(key)):
                offenders.append(f"{rel}:{call.lineno}")
    assert offenders == []
