"""The collection pause: automatic GC off while a kill is on its way through the loop, back on
when it is out, never off longer than `COLLECTION_PAUSE_MAX_S`, and never switched on where
someone else switched it off."""

from __future__ import annotations

from oomwatch.daemon.interpreter import COLLECTION_PAUSE_MAX_S, CollectionPause


class Collector:
    """The `gc` switch, recorded."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.switches: list[bool] = []

    def isenabled(self) -> bool:
        return self.enabled

    def enable(self) -> None:
        self.enabled = True
        self.switches.append(True)

    def disable(self) -> None:
        self.enabled = False
        self.switches.append(False)


def test_collection_waits_while_a_kill_is_on_its_way_and_resumes_when_it_is_out() -> None:
    gc = Collector()
    pause = CollectionPause(gc)
    pause.hold(False, 0.0)
    assert gc.switches == []  # idle: untouched
    pause.hold(True, 1.0)  # OOM news
    pause.hold(True, 1.005)  # the report is open
    assert not gc.enabled and pause.paused
    pause.hold(False, 1.010)  # stored, counted, logged
    assert gc.enabled and gc.switches == [False, True] and not pause.paused


def test_a_loop_busy_for_longer_than_the_limit_gets_its_collections() -> None:
    gc = Collector()
    pause = CollectionPause(gc)
    pause.hold(True, 0.0)
    pause.hold(True, COLLECTION_PAUSE_MAX_S)
    assert gc.enabled
    pause.hold(True, COLLECTION_PAUSE_MAX_S + 0.1)  # still busy: no second pause ...
    assert gc.enabled and gc.switches == [False, True]
    pause.hold(False, COLLECTION_PAUSE_MAX_S + 0.2)
    pause.hold(True, COLLECTION_PAUSE_MAX_S + 0.3)  # ... until the loop was idle once
    assert not gc.enabled


def test_a_collector_switched_off_elsewhere_stays_off() -> None:
    gc = Collector(enabled=False)
    pause = CollectionPause(gc)
    pause.hold(True, 0.0)
    pause.hold(False, 0.1)
    pause.release()
    assert gc.switches == [] and not gc.enabled


def test_release_ends_a_pause() -> None:
    gc = Collector()
    pause = CollectionPause(gc)
    pause.hold(True, 0.0)
    pause.release()
    assert gc.enabled and not pause.paused
