"""The inotify wrapper against the running kernel, on a tmp directory.  The kernel queues an
event before the file operation returns, so each test reads at once, without waiting."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from oomwatch.cgroups import inotify
from oomwatch.cgroups.inotify import Inotify, InotifyEvent, parse_events

_DIR_EVENTS = inotify.IN_CREATE | inotify.IN_DELETE | inotify.IN_ONLYDIR
_DIR_MADE = inotify.IN_CREATE | inotify.IN_ISDIR


@pytest.fixture
def watches() -> Iterator[Inotify]:
    instance = Inotify()
    yield instance
    instance.close()


def test_nothing_pending_reads_nothing_at_once(watches: Inotify, tmp_path: Path) -> None:
    watches.add_watch(tmp_path, _DIR_EVENTS)
    assert watches.read() == []
    assert os.get_blocking(watches.fileno()) is False


def test_a_directory_made_and_removed(watches: Inotify, tmp_path: Path) -> None:
    wd = watches.add_watch(tmp_path, _DIR_EVENTS)
    (tmp_path / "pod1").mkdir()
    (tmp_path / "pod1").rmdir()
    assert watches.read() == [
        InotifyEvent(wd, _DIR_MADE, 0, "pod1"),
        InotifyEvent(wd, inotify.IN_DELETE | inotify.IN_ISDIR, 0, "pod1"),
    ]


def test_a_modified_file_and_ignored_when_deleted(watches: Inotify, tmp_path: Path) -> None:
    counters = tmp_path / "memory.events"
    counters.write_text("oom 0\n")
    wd = watches.add_watch(counters, inotify.IN_MODIFY)
    counters.write_text("oom 1\n")
    assert watches.read() == [InotifyEvent(wd, inotify.IN_MODIFY, 0, "")]
    counters.unlink()
    assert watches.read() == [InotifyEvent(wd, inotify.IN_IGNORED, 0, "")]


def test_an_open_is_seen(watches: Inotify, tmp_path: Path) -> None:
    """What the probe reader's tests count to prove a file was never opened."""
    (tmp_path / "x.ring").write_bytes(b"")
    wd = watches.add_watch(tmp_path, inotify.IN_OPEN)
    (tmp_path / "x.ring").read_bytes()
    assert watches.read() == [InotifyEvent(wd, inotify.IN_OPEN, 0, "x.ring")]


def test_rm_watch_queues_ignored_and_ends_the_events(watches: Inotify, tmp_path: Path) -> None:
    wd = watches.add_watch(tmp_path, _DIR_EVENTS)
    watches.rm_watch(wd)
    (tmp_path / "after").mkdir()
    assert watches.read() == [InotifyEvent(wd, inotify.IN_IGNORED, 0, "")]
    with pytest.raises(OSError) as raised:
        watches.rm_watch(wd)  # gone already: the kernel says EINVAL
    assert raised.value.errno == errno.EINVAL


def test_a_watch_on_a_missing_path_raises_its_errno(watches: Inotify, tmp_path: Path) -> None:
    with pytest.raises(OSError) as raised:
        watches.add_watch(tmp_path / "gone" / "memory.events", inotify.IN_MODIFY)
    assert raised.value.errno == errno.ENOENT
    assert raised.value.strerror == os.strerror(errno.ENOENT)


def test_names_are_decoded_as_the_file_system_does(watches: Inotify, tmp_path: Path) -> None:
    watches.add_watch(tmp_path, _DIR_EVENTS)
    raw = b"caf\xe9-not-utf8"  # no valid UTF-8: os.fsdecode keeps it as surrogates
    os.mkdir(os.path.join(os.fsencode(tmp_path), raw))
    (tmp_path / "コンテナ").mkdir()
    assert [e.name for e in watches.read()] == [os.fsdecode(raw), "コンテナ"]


def test_more_events_than_one_read_holds_all_come_back(watches: Inotify, tmp_path: Path) -> None:
    wd = watches.add_watch(tmp_path, _DIR_EVENTS)
    names = [f"{i:04d}" + "x" * 200 for i in range(400)]  # 400 events of 224 bytes: > 64 KiB
    for name in names:
        (tmp_path / name).mkdir()
    assert watches.read() == [InotifyEvent(wd, _DIR_MADE, 0, n) for n in names]
    assert watches.read() == []


def test_the_overflow_event_has_watch_descriptor_minus_one() -> None:
    head = struct.pack("=iIII", -1, inotify.IN_Q_OVERFLOW, 0, 0)
    named = struct.pack("=iIII", 3, _DIR_MADE, 0, 16) + b"pod\0".ljust(16, b"\0")
    assert parse_events(head + named) == [
        InotifyEvent(-1, inotify.IN_Q_OVERFLOW, 0, ""),
        InotifyEvent(3, _DIR_MADE, 0, "pod"),
    ]


def test_a_closed_instance_has_no_descriptor() -> None:
    instance = Inotify()
    instance.close()
    instance.close()  # a second close does not close a descriptor reused since
    with pytest.raises(ValueError):
        instance.fileno()
