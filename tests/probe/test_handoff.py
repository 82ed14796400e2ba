"""Ring files handed over as descriptors (oomwatch.probe.handoff), against sockets a hostile
pod could put in its own directory: each is refused within the walk's time, nothing it sends
stays open in the agent, and the real probe beside it is still read."""

from __future__ import annotations

import array
import contextlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import wait_for
from support.clock import FakeClock
from support.probe_records import refusals, write_record

from oomwatch.probe import handoff
from oomwatch.probe.handoff import MAGIC, MAX_FDS, SOCKET_TIMEOUT_S
from oomwatch.probe.no_follow import ProbeFileError
from oomwatch.probe.probe import Probe
from oomwatch.probe.reader import ProbeDirReader, ReaderLimits

POD = "1b2c0000-4444"
HOSTILE = "9f9f0000-6666"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def leaked(reader: ProbeDirReader, before: int) -> int:
    """Descriptors open beyond `before` (taken before the reader's first walk), less the
    reader's directory and the ring descriptors it holds from the real probe; waits a
    little for the peers' threads of this process to close their ends."""

    def extra() -> int:
        return open_fds() - before - 1 - reader._held.held_fds

    wait_for(lambda: extra() == 0, 2.0)
    return extra()


class Peer:
    """A socket in `directory` that answers each connection with `answer(conn)`."""

    def __init__(self, path: Path, answer: Callable[[socket.socket], None] | None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.answer = answer
        self.thread = threading.Thread(target=self._serve, daemon=True)
        if answer is not None:  # None: listens, never accepts
            self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                assert self.answer is not None
                with contextlib.suppress(OSError):
                    self.answer(conn)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def sending(fds: list[int], names: list[str], messages: int = 1) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        for _ in range(messages):
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
            conn.sendmsg([MAGIC + "\n".join(names).encode()], rights)

    return answer


@pytest.fixture
def pods(probe_dir: Path) -> Iterator[tuple[Path, Probe]]:
    """A real probe in its pod directory, and the directory of a hostile pod beside it."""
    (probe_dir / HOSTILE).mkdir()
    probe = Probe(probe_dir / POD, pod_uid=POD, container="trainer").start()
    yield probe_dir / HOSTILE, probe
    probe.stop()


def test_a_probe_hands_over_its_0600_file_and_the_agent_keeps_it_after_the_probe_is_gone(
    probe_dir: Path,
) -> None:
    probe = Probe(probe_dir / POD, pod_uid=POD, container="trainer").start()
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in (probe_dir / POD).iterdir()}
    assert modes == {f"{POD}.trainer.ring": 0o600, f"{POD}.trainer.sock": 0o660}
    reader = ProbeDirReader(probe_dir)
    probe.set_phase("first")
    (record,) = reader.read_all()
    assert (record.name, record.pod_dir) == (f"{POD}/{POD}.trainer.ring", POD)
    assert record.samples[-1].phase == "first"
    probe.set_phase("last words")
    probe.stop()  # as if killed: nothing listens any more
    (record,) = reader.read_all(time.time() + 3)  # mtime ticks coarsely: past IDLE_S
    assert record.samples[-1].phase == "last words"  # from the descriptor still held
    reader.close()


def test_a_restarted_probe_hands_over_the_previous_runs_file_too(probe_dir: Path) -> None:
    first = Probe(probe_dir / POD, pod_uid=POD, container="trainer").start()
    first.set_phase("died here")
    first.stop()
    second = Probe(probe_dir / POD, pod_uid=POD, container="trainer").start()
    try:
        reader = ProbeDirReader(probe_dir)  # an agent that never saw the first run
        by_name = {r.name: r for r in reader.read_all()}
        previous = by_name[f"{POD}/{POD}.trainer.prev.ring"]
        assert previous.samples[-1].phase == "died here"
        assert reader._held.held_fds == 2
        reader.close()
    finally:
        second.stop()


def test_a_socket_that_never_answers_costs_one_short_wait_then_none(
    pods: tuple[Path, Probe], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    hostile, _ = pods
    peers = [Peer(hostile / f"s{i}.sock", None) for i in range(8)]
    limits = ReaderLimits(max_walk_s=0.25)
    clock = FakeClock()  # moved by each wait the reader grants a socket, and by nothing else
    reader = ProbeDirReader(hostile.parent, limits, clock=clock)
    asked: list[tuple[str, float]] = []
    receive = handoff.receive_rings

    def timed(dir_fd: int, name: str, timeout_s: float) -> list[tuple[str, int]]:
        asked.append((name, timeout_s))
        try:
            return receive(dir_fd, name, timeout_s)
        except ProbeFileError:
            clock.advance(timeout_s)  # it waited its whole timeout
            raise

    monkeypatch.setattr(handoff, "receive_rings", timed)
    before = open_fds()
    with caplog.at_level(logging.WARNING):
        first = reader.read_all()
    silent = [t for name, t in asked if name.startswith("s")]
    # each silent socket costs one wait of SOCKET_TIMEOUT_S at most, and the walk stops at
    # its deadline: partial, the rest read next time
    assert silent and max(silent) <= SOCKET_TIMEOUT_S
    assert len(silent) <= limits.max_walk_s / SOCKET_TIMEOUT_S + 1, asked
    assert "no answer within" in refusals(caplog)[f"{HOSTILE}/s0.sock"]
    assert "walk over 0.25 s: the rest is read next time" in refusals(caplog)["*"]
    walks = [first] + [reader.read_all() for _ in range(6)]  # the rest in turns, then none
    assert any(r.name.startswith(POD) for records in walks for r in records)
    assert sorted(name for name, _ in asked if name.startswith("s")) == [
        f"s{i}.sock" for i in range(8)
    ]  # each asked once
    asked.clear()
    reader.read_all()
    assert [name for name, _ in asked if name.startswith("s")] == []  # not again for RETRY_S
    assert leaked(reader, before) == 0
    for peer in peers:
        peer.close()
    reader.close()


def test_a_thousand_descriptors_are_cut_at_the_buffer_and_none_stays_open(
    pods: tuple[Path, Probe], caplog: pytest.LogCaptureFixture
) -> None:
    hostile, _ = pods
    ring = write_record(hostile, "flood.ring")
    fds = [os.open(ring, os.O_RDONLY) for _ in range(250)]  # SCM_MAX_FD is 253 a message
    peer = Peer(hostile / "flood.sock", sending(fds, ["flood.ring"] * 250, messages=4))
    reader = ProbeDirReader(hostile.parent)
    before = open_fds()
    with caplog.at_level(logging.WARNING):
        records = reader.read_all()
    assert f"more than {MAX_FDS} descriptors" in refusals(caplog)[f"{HOSTILE}/flood.sock"]
    assert [r.pod_dir for r in records] == [POD]
    assert leaked(reader, before) == 0
    peer.close()
    for fd in fds:
        os.close(fd)
    reader.close()


@pytest.mark.parametrize("what", ["fifo", "device", "directory", "other-filesystem"])
def test_a_descriptor_of_anything_but_a_ring_file_here_is_refused(
    pods: tuple[Path, Probe], caplog: pytest.LogCaptureFixture, what: str
) -> None:
    hostile, _ = pods
    if what == "fifo":
        os.mkfifo(hostile / "x.fifo")
        fd = os.open(hostile / "x.fifo", os.O_RDWR | os.O_NONBLOCK)
    elif what == "device":
        fd = os.open("/dev/zero", os.O_RDONLY)
    elif what == "directory":
        fd = os.open(hostile, os.O_RDONLY | os.O_DIRECTORY)
    else:
        shm = Path("/dev/shm") / f"oomwatch-test-{os.getpid()}.ring"
        shm.write_bytes(write_record(hostile, "x.ring").read_bytes())
        (hostile / "x.ring").unlink()
        fd = os.open(shm, os.O_RDONLY)
        shm.unlink()
        if os.fstat(fd).st_dev == os.stat(hostile).st_dev:
            os.close(fd)
            pytest.skip("/dev/shm is on the test directory's filesystem")
    peer = Peer(hostile / "x.sock", sending([fd], ["x.ring"]))
    reader = ProbeDirReader(hostile.parent)
    before = open_fds()
    with caplog.at_level(logging.WARNING):
        records = reader.read_all()
    reason = refusals(caplog)[f"{HOSTILE}/x.sock"]
    expected = "outside the probe directory" if what == "other-filesystem" else "not a regular"
    assert expected in reason
    assert [r.pod_dir for r in records] == [POD]
    assert leaked(reader, before) == 0
    peer.close()
    os.close(fd)
    reader.close()


def test_what_a_pod_can_plant_in_its_own_directory_speaks_only_for_that_directory(
    pods: tuple[Path, Probe], caplog: pytest.LogCaptureFixture
) -> None:
    """Another pod cannot reach the trainer's directory (the admission policy mounts each pod
    its own); in its own it may answer with a file that claims the trainer's pod, a file of
    another uid, a name outside its socket's, or link its socket elsewhere."""
    hostile, probe = pods
    claims = write_record(hostile, "liar.ring")  # META's pod_uid: not this directory
    own = Peer(hostile / "liar.sock", sending([os.open(claims, os.O_RDONLY)], ["liar.ring"]))
    foreign = write_record(hostile, "other.ring")
    os.chown(foreign, 4321, 4321)
    theirs = Peer(hostile / "other.sock", sending([os.open(foreign, os.O_RDONLY)], ["other.ring"]))
    renamed = Peer(
        hostile / "name.sock", sending([os.open(claims, os.O_RDONLY)], [f"{POD}.trainer.ring"])
    )
    (hostile / "link.sock").symlink_to(probe._server.path if probe._server else "/")
    reader = ProbeDirReader(hostile.parent)
    with caplog.at_level(logging.WARNING):
        records = reader.read_all()
    refused = refusals(caplog)
    assert "not the peer's" in refused[f"{HOSTILE}/other.sock"]
    assert "unexpected name" in refused[f"{HOSTILE}/name.sock"]
    assert "not a socket" in refused[f"{HOSTILE}/link.sock"]
    by_name = {r.name: r for r in records}
    assert by_name[f"{HOSTILE}/liar.ring"].pod_dir == HOSTILE  # vouched by where it lies
    assert by_name[f"{POD}/{POD}.trainer.ring"].pod_dir == POD
    assert len(records) == 2
    for peer in (own, theirs, renamed):
        peer.close()
    reader.close()
