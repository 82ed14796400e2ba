"""The test sinks keep, or refuse, what the pipeline emits, and satisfy `stages.Sink`."""

from __future__ import annotations

import pytest

from oomwatch.incident import Incident
from oomwatch.stages import Sink
from support.sinks import BrokenSink, CollectingSink


def test_the_collecting_sink_keeps_incidents_in_order_and_the_broken_one_raises() -> None:
    first, second = Incident(kind="memcg"), Incident(kind="global")
    sinks: list[Sink] = [CollectingSink(), BrokenSink()]
    collecting = sinks[0]
    assert isinstance(collecting, CollectingSink)
    collecting.emit(first)
    collecting.emit(second)
    assert collecting.got == [first, second]
    with pytest.raises(RuntimeError, match="sink down"):
        sinks[1].emit(first)
