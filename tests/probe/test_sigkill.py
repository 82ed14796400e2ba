"""SIGKILL the flight-recorder writer at random instants: the last sample always survives."""

from __future__ import annotations

import os
import random
import signal
import struct
import time
from pathlib import Path

from support import wait_for
from support.probe_records import META, sample

from oomwatch.probe.reader import ProbeDirReader
from oomwatch.probe.ring import RingGeometry, RingWriter
from oomwatch.probe.schema import to_payload

KILLS = 200
_COUNTER = struct.Struct("<Q")


def _write_forever(path: str, done_fd: int) -> None:
    """Child: write samples as fast as it can; publish each seq once its pwrite returned."""
    writer = RingWriter(path, to_payload(META), RingGeometry(1024, 8, 1))
    i = 0
    while True:
        i += 1
        seq = writer.write_sample(to_payload(sample(i, rss_mib=100 + i % 50)))
        os.pwrite(done_fd, _COUNTER.pack(seq), 0)


def _published(done_fd: int) -> int:
    value: int = _COUNTER.unpack(os.pread(done_fd, 8, 0))[0]
    return value


def test_every_read_after_sigkill_is_the_last_complete_sample_or_the_one_before(
    probe_dir: Path,
) -> None:
    rng = random.Random(1234)
    reader = ProbeDirReader(probe_dir)
    seen_wraps = 0
    for n in range(KILLS):
        name = f"kill{n}.trainer.ring"  # a fresh file: a stale one cannot pass for this run
        # what the child has published, in a side file (page cache is shared with the child)
        done_fd = os.open(probe_dir / f"{name}.done", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.pwrite(done_fd, _COUNTER.pack(0), 0)
        pid = os.fork()
        if pid == 0:
            try:
                _write_forever(str(probe_dir / name), done_fd)
            finally:
                os._exit(1)

        def published_one(fd: int = done_fd) -> bool:
            return _published(fd) > 0

        started = wait_for(published_one, 30.0, interval_s=0.0002)
        if started:
            time.sleep(rng.uniform(0, 0.004))  # the kill lands at a random point of a write
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert started, f"kill {n}: the writer published nothing in 30 s"
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        published = _published(done_fd)
        record = reader.read_one(name)
        last = record.samples[-1]
        # `published` was complete; `published + 1` may have completed before the kill
        # landed between the pwrite and the publish.  Anything older would be a lost sample.
        assert last.seq in (published, published + 1), (n, last.seq, published)
        assert last.step == last.seq and last.rss_bytes == (100 + last.seq % 50) << 20
        assert [s.seq for s in record.samples] == list(range(max(1, last.seq - 7), last.seq + 1))
        seen_wraps += last.seq > 8
        (probe_dir / name).unlink()
        os.close(done_fd)
        (probe_dir / f"{name}.done").unlink()
    assert seen_wraps > KILLS // 2  # the ring wrapped in most runs: the hard case was covered
