"""The reachability walk the thread seams' tests stand on finds what is held, however."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import pytest

from support.ownership import paths_to


class Owned:
    pass


@dataclass(frozen=True, slots=True)
class Slotted:
    held: object


class Plain:
    def __init__(self, held: object) -> None:
        self.held = held

    def method(self) -> None:
        pass


def test_it_finds_an_object_behind_attributes_slots_containers_and_callables() -> None:
    owned = Owned()
    assert paths_to(Plain(owned), Owned) == ["root.held"]
    assert paths_to(Slotted([{"k": (owned,)}]), Owned) == ["root.held[0]['k'][0]"]
    assert paths_to(Plain(Plain(owned).method), Owned) == ["root.held.__self__.held"]
    assert paths_to(functools.partial(print, owned), Owned) == ["root.args[0]"]

    def closure() -> object:
        return owned

    assert paths_to(Plain(closure), Owned) == ["root.held.<cell 0>"]


def test_it_finds_nothing_where_nothing_leads_there() -> None:
    assert paths_to(Plain(Slotted(("a", 1, None))), Owned) == []
    assert paths_to(Plain(threading.Thread(target=print)), Owned) == []


def test_a_thread_leads_to_its_target_and_arguments() -> None:
    thread = threading.Thread(target=Plain(Owned()).method, args=(Owned(),))
    assert sorted(paths_to(Plain(thread), Owned)) == [
        "root.held._args[0]",
        "root.held._target.__self__.held",
    ]


def test_a_walk_too_large_to_finish_says_so() -> None:
    with pytest.raises(AssertionError, match="not whole"):
        paths_to([[i] for i in range(50)], Owned, limit=10)


def test_it_finds_a_client_librarys_object_but_does_not_walk_into_it() -> None:
    from kubernetes import client

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    try:
        assert paths_to(Plain(api), client.ApiClient) == ["root.held"]
        assert paths_to(Plain(api), client.Configuration) == []  # inside the library
    finally:
        api.close()  # type: ignore[no-untyped-call]
