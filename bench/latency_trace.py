"""`oomwatch run` with timing hooks, for `bench/latency.py --breakdown` (never the product).

Wraps the stages between a kill's record and its log line and appends one line per event to
the file named by `OOMWATCH_LATENCY_TRACE`: `<CLOCK_MONOTONIC s> <thread> <event> [<pid>]`.
Events: `oom_signal` (the cgroup worker queued an OOM notification), `turn` (the loop woke),
`take read|idle` (the loop's turn on the kernel log, told to read it: it is readable or
cgroup news came), `read`/`read_end` (a /dev/kmsg read; `kill_read <pid>`: it held that
pid's kill line), `closed <pid>` (the report came out of the kernel log), `commit <pid>`
(diagnosis starts), `stored <pid>`, `metric <pid>`, `logged <pid>` (the line is written),
the parts `reconcile`, `annotate`, `observe`, `enrich`, `diagnose`, `store`, `log_fields`
(each with its `_end`), `worker`/`worker_end` `counters|sample` (a counter or sample pass
of the cgroup worker: it holds the GIL while it runs Python), `gc <gen>`/`gc_end <gen>`.
The hooks cost a few microseconds per event.

`OOMWATCH_LATENCY_WITHOUT` (comma-separated) turns the agent's latency settings off for an
A/B: `switch` (the 1 ms GIL switch interval: back to Python's 5 ms), `freeze` (the start-up
heap left in the cyclic GC's reach).

    python bench/latency_trace.py run ...   (as `python -m oomwatch.cli run ...`)
"""

from __future__ import annotations

import functools
import gc
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oomwatch import cli
from oomwatch.daemon import agent, cgroup_thread, interpreter, pipeline
from oomwatch.diagnosis.history import History
from oomwatch.sinks import log as log_sink
from oomwatch.sinks import metrics
from oomwatch.sources import kernel_log, kmsg
from oomwatch.store import IncidentStore

_FD = os.open(os.environ["OOMWATCH_LATENCY_TRACE"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
_KILLED = re.compile(rb"Killed process (\d+)")


def stamp(event: str, detail: object = "") -> None:
    line = f"{time.monotonic():.6f} {threading.current_thread().name} {event} {detail}\n"
    os.write(_FD, line.encode())


def _victim_pid(incident: Any) -> object:
    victim = getattr(incident, "victim", None)
    return victim.pid if victim is not None else "-"


def around(owner: Any, name: str, event: str, detail: Callable[..., object] | None = None) -> None:
    """Stamp `event` before and `event_end` after `owner.name` (detail from its arguments)."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def traced(*args: Any, **kwargs: Any) -> Any:
        mark = "" if detail is None else detail(*args)
        stamp(event, mark)
        try:
            return inner(*args, **kwargs)
        finally:
            stamp(event + "_end", mark)

    setattr(owner, name, traced)


def after(owner: Any, name: str, event: str, detail: Callable[..., object]) -> None:
    """Stamp `event` after `owner.name` returns (detail from its arguments)."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def traced(*args: Any, **kwargs: Any) -> Any:
        try:
            return inner(*args, **kwargs)
        finally:
            stamp(event, detail(*args))

    setattr(owner, name, traced)


def install() -> None:
    read_available = kmsg.KmsgFollower.read_available

    def traced_read(self: Any, *args: Any) -> Any:
        stamp("read")
        records = read_available(self, *args)
        for _, raw in records:
            killed = _KILLED.search(raw)
            if killed:
                stamp("kill_read", int(killed.group(1)))
        stamp("read_end", len(records))
        return records

    kmsg.KmsgFollower.read_available = traced_read  # type: ignore[method-assign,assignment]

    take = kernel_log.KernelLog.take

    def traced_take(self: Any, **kwargs: Any) -> Any:
        stamp("take", "read" if kwargs.get("read") else "idle")
        out = take(self, **kwargs)
        for incident in out.incidents:
            stamp("closed", _victim_pid(incident))
        return out

    kernel_log.KernelLog.take = traced_take  # type: ignore[method-assign]

    queue_batch = cgroup_thread.CgroupThread._queue

    def traced_queue(self: Any, batch: Any) -> None:
        for signal in batch.signals:
            stamp("oom_signal", signal.cgroup.rsplit("/", 1)[-1][:12])
        queue_batch(self, batch)

    cgroup_thread.CgroupThread._queue = traced_queue  # type: ignore[method-assign]
    around(cgroup_thread.CgroupThread, "_counters", "worker", lambda _self: "counters")
    around(cgroup_thread.CgroupThread, "_sample", "worker", lambda _self: "sample")
    around(agent.Agent, "_turn", "turn")
    # the parts of the stages above, for a finer look at the raw trace (`--trace-file`)
    around(pipeline, "reconcile", "reconcile")
    around(pipeline, "annotate", "annotate")
    around(pipeline.Pipeline, "_observe_cgroup", "observe")
    around(pipeline.Pipeline, "_enrich", "enrich")
    around(History, "diagnose", "diagnose")
    around(IncidentStore, "add", "store")
    around(log_sink, "incident_fields", "log_fields")
    around(pipeline.Pipeline, "_commit", "commit", lambda _self, i: _victim_pid(i))
    after(IncidentStore, "add", "stored", lambda _self, i: _victim_pid(i))
    after(metrics.Metrics, "emit", "metric", lambda _self, i: _victim_pid(i))
    after(log_sink.LogSink, "emit", "logged", lambda _self, i: _victim_pid(i))

    def collection(phase: str, info: dict[str, Any]) -> None:
        stamp("gc" if phase == "start" else "gc_end", info.get("generation"))

    gc.callbacks.append(collection)
    without = set(filter(None, os.environ.get("OOMWATCH_LATENCY_WITHOUT", "").split(",")))
    if "switch" in without:
        interpreter.SWITCH_INTERVAL_S = 0.005
    if "freeze" in without:
        gc.freeze = lambda: None  # the start-up heap stays in reach


if __name__ == "__main__":
    install()
    raise SystemExit(cli.main())
