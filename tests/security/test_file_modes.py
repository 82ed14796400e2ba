"""Files the agent and the probe create: the store is the agent's alone; a ring
file is built under a name no other pod can predict, never through a planted file, and is
readable by its owner and the agent's group only where the probe directory gives it that
group (0600 cannot be: the agent is another uid with no capabilities)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from oomwatch.probe.ring import RingWriter
from oomwatch.store import IncidentStore


def test_the_store_is_not_world_readable(tmp_path: Path) -> None:
    state = tmp_path / "state"
    IncidentStore(state).close()
    for path in state.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


def test_an_existing_world_readable_store_is_narrowed(tmp_path: Path) -> None:
    IncidentStore(tmp_path).close()
    db = tmp_path / "oomwatch.db"
    db.chmod(0o644)
    IncidentStore(tmp_path).close()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_a_planted_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    target = tmp_path / "victim-file"
    target.write_text("untouched")
    ring = tmp_path / "trainer.ring"
    (tmp_path / ".trainer.ring.tmp").symlink_to(target)  # the old, predictable name
    RingWriter(str(ring), {"pid": 1, "comm": "python3"}).close()
    assert target.read_text() == "untouched"
    assert ring.is_file() and not ring.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [".trainer.ring.tmp"]
    assert os.stat(ring).st_nlink == 1


AGENT_GID = 65532  # runAsGroup of the agent's container; the probe directory's group


def as_user(uid: int, gid: int, action: Callable[[], None]) -> int:
    """Run `action` in a forked child that has become uid:gid (no other groups, umask 077):
    0 if it returned, 13 on PermissionError, 1 on anything else."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.umask(0o077)
            action()
            code = 0
        except PermissionError:
            code = 13
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(os.geteuid() != 0, reason="becomes other uids")
def test_a_ring_file_is_read_by_its_owner_and_the_agent_group_only() -> None:
    """The DaemonSet's probe directory (prepare-dirs: root:65532, 3777) and a per-pod directory
    made in it as the kubelet makes one (mkdir as root, then chmod to the volume's mode): the
    trainer's ring file, written under umask 077, is 0640 in the agent's group."""
    top = Path(tempfile.mkdtemp(prefix="oomwatch-modes-"))  # not under 0700 pytest dirs
    try:
        top.chmod(0o755)
        probe = top / "probe"
        probe.mkdir()
        os.chown(probe, 0, 0)
        probe.chmod(0o3777)
        os.chown(probe, 0, AGENT_GID)
        pod = probe / "1b2c0000-4444"
        pod.mkdir()  # the kubelet: mkdirat, then fchmod with the volume root's mode
        pod.chmod(0o3777)
        assert pod.stat().st_gid == AGENT_GID  # inherited from the setgid parent
        ring = pod / "trainer.ring"

        def write() -> None:
            RingWriter(str(ring), {"pid": 1, "comm": "python3"}).close()

        assert as_user(1000, 1000, write) == 0
        st = ring.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, AGENT_GID, 0o640)

        def read() -> None:
            ring.read_bytes()

        assert as_user(65532, AGENT_GID, read) == 0  # the agent: no capabilities, its group
        assert as_user(2000, 2000, read) == 13  # another pod's uid
        assert as_user(2000, 0, read) == 13  # ... even in the root group
    finally:
        shutil.rmtree(top)


def test_without_a_setgid_directory_a_ring_file_stays_readable_whatever_the_umask(
    tmp_path: Path,
) -> None:
    """No group to rely on (a directory from before, a local run): 0644, so the agent running
    as another uid still reads it; the umask does not narrow it to nothing."""
    ring = tmp_path / "trainer.ring"
    old = os.umask(0o077)
    try:
        RingWriter(str(ring), {"pid": 1, "comm": "python3"}).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(ring.stat().st_mode) == 0o644
