"""The operational log's pipeline: an event key and its fields rendered as one JSON line.

It writes the lines structlog wrote (the same keys in the same order, the same timestamp,
level and traceback fields), without importing structlog on the agent's path: its package
imports its dev console and tracebacks modules (rich and pygments where installed) and
asyncio, 11-16 MiB of the agent's ~45 MiB.  The console format still uses structlog's
renderer, imported only when asked for.

One writer serves both this log and stdlib `logging` records of other modules (Kubernetes
client, metrics server), so an operator greps one stream.  Every string value has its control
characters escaped: a pod-chosen name with a newline must not forge a line.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

from oomwatch.sanitize import escape_control

EventDict = dict[str, Any]
Renderer = Callable[[Any, str, EventDict], str]
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]

# The attributes every LogRecord has; any other is a field passed with `extra={...}`.
_RECORD_KEYS = frozenset(logging.LogRecord("name", 0, "pathname", 0, "msg", (), None).__dict__)


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return escape_control(value)
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _escaped(v) for k, v in value.items()}
    return value


def _exc_info(value: Any) -> ExcInfo | None:
    """`exc_info=` as logging takes it: an exception, a sys.exc_info() tuple, or True."""
    if isinstance(value, BaseException):
        return (value.__class__, value, value.__traceback__)
    if isinstance(value, tuple) and len(value) == 3:
        kind, exc, tb = value
        if (
            isinstance(kind, type)
            and issubclass(kind, BaseException)
            and isinstance(exc, BaseException)
            and (tb is None or isinstance(tb, TracebackType))
        ):
            return (kind, exc, tb)
    if value:
        current = sys.exc_info()
        if current[0] is not None and current[1] is not None:
            return (current[0], current[1], current[2])
    return None


def _finish(event_dict: EventDict, level: str) -> EventDict:
    """Level, UTC timestamp, a traceback in `exception`, strings escaped (in this order)."""
    event_dict["level"] = level
    stamp = datetime.datetime.now(tz=datetime.UTC).isoformat()
    event_dict["timestamp"] = stamp.replace("+00:00", "Z")
    exc_info = _exc_info(event_dict.pop("exc_info", None))
    if exc_info is not None:
        text = "".join(traceback.format_exception(*exc_info))
        event_dict["exception"] = text[:-1] if text.endswith("\n") else text
    return {k: _escaped(v) for k, v in event_dict.items()}


def _json_default(obj: Any) -> Any:
    try:
        return obj.__structlog__()
    except AttributeError:
        return repr(obj)


def render_json(_: Any, __: str, event_dict: EventDict) -> str:
    return json.dumps(event_dict, default=_json_default)


class _Output:
    """Where lines go and how they are rendered; one lock for both kinds of line."""

    def __init__(self, renderer: Renderer, stream: TextIO | None) -> None:
        self.renderer = renderer
        self.handler = logging.StreamHandler(stream if stream is not None else sys.stdout)

    def write(self, line: str) -> None:
        handler = self.handler
        handler.acquire()
        try:
            handler.stream.write(line + "\n")
            handler.stream.flush()
        finally:
            handler.release()


_output: _Output | None = None


def _current() -> _Output:
    global _output
    if _output is None:  # logged to before `configure`: JSON on stdout
        _output = _Output(render_json, None)
    return _output


class _RecordFormatter(logging.Formatter):
    """Renders a stdlib record as a line of this log: the message is the event key,
    `extra={...}` its fields, then the logger's name."""

    def format(self, record: logging.LogRecord) -> str:
        event_dict: EventDict = {"event": record.getMessage()}
        if record.exc_info:
            event_dict["exc_info"] = record.exc_info
        if record.stack_info:
            event_dict["stack_info"] = record.stack_info
        event_dict["logger"] = record.name
        for key, value in record.__dict__.items():
            if key not in _RECORD_KEYS:
                event_dict[key] = value
        method = record.levelname.lower()
        return _current().renderer(None, method, _finish(event_dict, method))


def configure(log_format: str = "json", stream: TextIO | None = None) -> None:
    """Send this log and the stdlib root logger (INFO and up) to `stream` (stdout), as JSON
    lines or, with `console`, structlog's console renderer without colours."""
    global _output
    renderer: Renderer = render_json
    if log_format != "json":
        import structlog.dev  # 11-16 MiB, only for people at a terminal

        renderer = structlog.dev.ConsoleRenderer(colors=False)
    _output = _Output(renderer, stream)
    _output.handler.setFormatter(_RecordFormatter())
    root = logging.getLogger()
    root.handlers[:] = [_output.handler]
    root.setLevel(logging.INFO)


class EventLog:
    """A logger of the operational log (`stages.EventLogger`): `log.info("key", field=...)`.

    Each call renders with what `configure` set last, so a logger made before it follows it.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """`error` with the traceback being handled in `exception`."""
        fields.setdefault("exc_info", True)
        self._emit("error", event, fields)

    def _emit(self, level: str, event: str, fields: EventDict) -> None:
        _current().write(rendered(level, event, fields, self))


def rendered(level: str, event: str, fields: EventDict, logger: EventLog | None = None) -> str:
    """The line `logger` would write, not written (the start-up warm-up renders one)."""
    fields["event"] = event
    return _current().renderer(logger, level, _finish(fields, level))
