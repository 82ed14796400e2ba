"""The store's WAL checkpoints on a thread of their own, never inside a kill's commit.

SQLite checkpoints a WAL of `wal_autocheckpoint` (1,000) pages at the end of the commit that
crosses it: it syncs the WAL, copies its pages into the database file and syncs that.  An
incident's commit writes ~8 pages, so every ~120th kill paid 15-45 ms on this machine's
disk under load before its log line (bench/RESULTS.md, "h26p").  The agent moves the
automatic checkpoint out of reach on its connection (`COMMIT_CHECKPOINT_FRAMES`) and the
loop, at its tick, asks this thread for a PASSIVE checkpoint once the WAL holds
`CHECKPOINT_FRAMES`; PASSIVE never blocks the loop's commits, which go on appending while
it copies.  The first write after a whole checkpoint
starts the WAL again from its start and syncs its new header (3-10 ms here under load):
this thread makes that write itself; a kill's commit waits for it only if it comes in
those milliseconds (SQLite's busy wait).

Durability is SQLite's `synchronous=NORMAL` in WAL mode either way: a commit is in the
kernel's page cache before the log line is written, so a crash of the agent loses nothing;
a power loss or kernel crash can lose the commits since the last checkpoint synced (at most
`CHECKPOINT_FRAMES` pages, about 120 incidents), never the database itself.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import struct
import threading
from pathlib import Path

log = logging.getLogger("oomwatch.store")

CHECKPOINT_FRAMES = 1000  # SQLite's own automatic checkpoint size
# ... and where a commit still runs one: only if this thread fell that far behind (or fails),
# so the WAL stays bounded (16 MiB of 4 KiB pages, the store's journal_size_limit)
COMMIT_CHECKPOINT_FRAMES = 4 * CHECKPOINT_FRAMES
_MX_FRAME = struct.Struct("=I")  # the wal-index header's mxFrame: offset 16, native order


class WalIndex:
    """The frames in the WAL now, from the wal-index header in `<db>-shm` (sqlite.org's
    walformat: `mxFrame`, a native-order u32 at offset 16; 0 when there is none), read
    through one descriptor held open until `close()`, which comes after the store's own
    connection closed.

    Closing a descriptor of a file drops every fcntl lock its process holds on that file
    (POSIX fcntl(2); Linux `locks_remove_posix` at each close, fs/locks.c), SQLite's shared
    lock on the -shm's "dead man switch" byte among them (os_unix.c, `UNIX_SHM_DMS`).  A
    process that opens the store next (`oomwatch report --store`, a test reading it) finds
    that byte unlocked, takes itself for the first user and truncates the -shm under this
    process's mapping, whose next access dies of SIGBUS.  So the descriptor stays open; a
    -shm made anew (a store moved aside) is followed, and the old one's descriptor closed:
    nothing uses that file any more.
    """

    def __init__(self, db_path: Path) -> None:
        self._path = f"{db_path}-shm"
        self._fd: int | None = None

    def frames(self) -> int:
        try:
            inode = os.stat(self._path).st_ino
        except OSError:
            return 0
        if self._fd is not None and os.fstat(self._fd).st_ino != inode:
            self.close()
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return 0
        try:
            header = os.pread(self._fd, 20, 0)
        except OSError:
            return 0
        return _MX_FRAME.unpack_from(header, 16)[0] if len(header) == 20 else 0

    def close(self) -> None:
        """(After the store's connections closed) the descriptor, and the locks with it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WalCheckpoints:
    """A thread that runs the PASSIVE checkpoints the loop asks for, on its own connection."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.index = WalIndex(db_path)  # closed by the store, after its connection
        self.done = 0  # checkpoints run (for tests and the bench)
        self._asked = threading.Event()
        self._running = False  # a checkpoint asked for has not finished yet
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="oomwatch-wal", daemon=True)
        self._thread.start()

    def ask_if_due(self, frames: int = CHECKPOINT_FRAMES) -> bool:
        """(Loop thread, at its tick) ask for a checkpoint if the WAL holds `frames` and
        none is under way (the WAL keeps its frames until the commit after a checkpoint)."""
        due = not self._running and self.index.frames() >= frames
        if due:
            self._running = True
            self._asked.set()
        return due

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop = True
        self._asked.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._asked.wait()
            self._asked.clear()
            if self._stop:
                return
            self._checkpoint()
            self._running = False

    def _checkpoint(self) -> None:
        try:
            # mode=rw: a store moved aside meanwhile is not made again, empty, here
            uri = f"file:{self.db_path}?mode=rw"
            db = sqlite3.connect(uri, uri=True, timeout=5.0, isolation_level=None)
            try:
                busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if not busy and 0 < frames == copied:
                    _restart_wal(db)
            finally:
                db.close()
            self.done += 1
        except sqlite3.Error as exc:  # the next tick asks again
            log.warning(
                "store_checkpoint_failed", extra={"path": str(self.db_path), "error": str(exc)}
            )


def _restart_wal(db: sqlite3.Connection) -> None:
    """The write after a whole checkpoint starts the WAL again and syncs its new header: make
    it here (the schema version, rewritten unchanged) so that no kill's commit pays that sync.
    A commit that came first has restarted it already; this one then only appends a page."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        db.execute(f"PRAGMA user_version = {version}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
