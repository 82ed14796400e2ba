"""Sinks for pipeline tests: one that keeps what it is given, one that always fails.

An enricher or stage is tested through `Pipeline(store, [CollectingSink()], [stage])`; what
the sink got is what every real sink would have been handed."""

from __future__ import annotations

from oomwatch.incident import Incident

__all__ = ["BrokenSink", "CollectingSink"]


class CollectingSink:
    """Keeps every incident emitted to it, in order, in `got`."""

    def __init__(self) -> None:
        self.got: list[Incident] = []

    def emit(self, incident: Incident) -> None:
        self.got.append(incident)

    def close(self) -> None:
        pass


class BrokenSink:
    """Raises on every emit: the pipeline must log it and go on to the next sink."""

    def emit(self, incident: Incident) -> None:
        raise RuntimeError("sink down")

    def close(self) -> None:
        pass
