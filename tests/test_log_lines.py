"""The operational log writes, without structlog on the agent's path, the lines structlog's
pipeline wrote (`import structlog` alone was 11-16 MiB of the agent's RSS): the same keys
in the same order, levels, tracebacks, escaping, and stdlib records with their `extra`."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from oomwatch.sinks.log import get_logger, setup_logging
from oomwatch.stages import EventLogger

structlog = pytest.importorskip("structlog")

STAMP = re.compile(r'"timestamp": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"')


def structlog_setup(stream: io.StringIO) -> EventLogger:
    """The agent's logging as it was configured through structlog (the reference)."""
    from oomwatch.sinks.eventlog import _escaped  # the escaping is the product's own

    def escape(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        return {k: _escaped(v) for k, v in event_dict.items()}

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        escape,
    ]
    renderer = structlog.processors.JSONRenderer(sort_keys=False)
    structlog.configure(
        processors=[*shared, renderer],
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.stdlib.ExtraAdder(),
                *shared,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logger: EventLogger = structlog.get_logger("oomwatch")
    return logger


class Opaque:
    def __repr__(self) -> str:
        return "<opaque\nthing>"


def lines_of(log: EventLogger) -> None:
    log.info("started", cgroups_watched=3, path="/kubepods/a\nb", ok=True, none=None)
    log.warning("oom_kill", nested={"k": ["x\x1b[2J", 1.5]}, thing=Opaque(), pair=(1, "\u202e"))
    log.error("sink_failed", error="boom")
    log.exception("no_exception_now", where="outside")
    try:
        raise ValueError("bad\ninput")
    except ValueError as exc:
        log.exception("kmsg_read_failed", attempt=2)
        log.warning("with_exc", exc_info=exc)
    stdlib = logging.getLogger("oomwatch.forecast")
    stdlib.info("forecast_started %s", "x", extra={"cgroup": "/a\tb"})
    stdlib.debug("not_shown")
    table: dict[str, int] = {}
    try:
        table["missing"]
    except KeyError:
        stdlib.exception("forecast_failed", extra={"cgroup": "/c"})
    logging.getLogger("kubernetes.client").warning("retrying %d", 3)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def captured(setup: Callable[[io.StringIO], EventLogger]) -> list[str]:
    out = io.StringIO()
    lines_of(setup(out))
    return [STAMP.sub('"timestamp": "T"', line) for line in out.getvalue().splitlines()]


def ours(stream: io.StringIO) -> EventLogger:
    setup_logging("json", stream=stream)
    return get_logger()


@pytest.mark.usefixtures("restore_logging")
def test_lines_match_structlogs_pipeline() -> None:
    expected = captured(structlog_setup)
    got = captured(ours)
    assert len(got) == 9 and all(STAMP.pattern not in line for line in got)
    assert got == expected
    records = [json.loads(line) for line in got]
    assert [r["event"] for r in records][-3:] == [
        "forecast_started x",
        "forecast_failed",
        "retrying 3",
    ]
    assert records[3]["level"] == "error" and "exception" not in records[3]
    assert "ValueError: bad\\x0ainput" in records[4]["exception"]


def test_the_agents_log_imports_no_structlog(tmp_path: Any) -> None:
    """The agent's modules, logging a line, leave structlog (and rich, asyncio) unimported."""
    import subprocess

    code = (
        "import sys, oomwatch.daemon.agent, oomwatch.daemon.command\n"
        "from oomwatch.sinks.log import setup_logging, get_logger\n"
        "setup_logging('json'); get_logger().info('started', n=1)\n"
        "heavy = {'structlog', 'rich', 'pygments', 'asyncio'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy), file=sys.stderr)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(run.stdout)["event"] == "started"
    assert run.stderr.strip() == "[]"
