"""Files the agent and the probe create: the store is the agent's alone; a ring
file is built under a name no other pod can predict, never through a planted file, is 0600,
and reaches the agent (another uid, no capabilities) as a descriptor over its probe's
socket (oomwatch.probe.handoff)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support import until

from oomwatch.probe.ring import RingWriter
from oomwatch.store import IncidentStore

REPO = Path(__file__).resolve().parents[2]


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


TRAINER = """
import sys, oomwatch.probe
probe = oomwatch.probe.start(sys.argv[1], excepthooks=False)
for line in sys.stdin:
    probe.set_phase(line.strip())
    print("ok", flush=True)
"""
AGENT = """
import json, os, sys
from pathlib import Path
from oomwatch.probe.reader import ProbeDirReader
reader = ProbeDirReader(Path(sys.argv[1]))
for line in sys.stdin:
    try:
        os.open(line.strip(), os.O_RDONLY)
        opened = "yes"
    except PermissionError:
        opened = "EACCES"
    records = [[r.name, r.pod_dir, r.samples[-1].phase] for r in reader.read_all()]
    print(json.dumps({"records": records, "opened": opened}), flush=True)
"""
POD_UID = "1b2c0000-4444-4000-8000-000000000001"


def as_process(uid: int, gid: int, script: str, arg: str) -> subprocess.Popen[str]:
    """`script` as uid:gid with no groups and no capabilities (the DaemonSet's agent:
    setpriv as bench/soak_hostile.py runs it), umask 077, on the system python3."""
    setpriv = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]
    env = {
        "PYTHONPATH": str(REPO),
        "PATH": "/usr/bin:/bin",
        "OOMWATCH_POD_UID": POD_UID,
        "OOMWATCH_CONTAINER_NAME": "trainer",
    }
    return subprocess.Popen(
        [*setpriv, "sh", "-c", 'umask 077; exec "$@"', "sh", "/usr/bin/python3", "-c", script, arg],
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )


def ask(proc: subprocess.Popen[str], line: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return proc.stdout.readline()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="becomes other uids")
def test_a_0600_ring_file_reaches_the_agent_by_descriptor_only() -> None:
    """The DaemonSet's probe directory (prepare-dirs: root:65532, 3777) and a per-pod directory
    made in it as the kubelet makes one.  A trainer (uid 1000) writes a 0600 ring file and
    listens on a 0660 socket of the agent's group; the agent (65532, no capabilities) cannot
    open the file, reads it by descriptor, and still reads the trainer's last sample after
    the trainer is SIGKILLed.  Another uid cannot connect to the socket."""
    top = Path(tempfile.mkdtemp(prefix="oomwatch-modes-"))  # not under 0700 pytest dirs
    trainer = agent = None
    try:
        top.chmod(0o755)
        probe = top / "probe"
        probe.mkdir()
        os.chown(probe, 0, 0)
        probe.chmod(0o3777)
        os.chown(probe, 0, AGENT_GID)
        pod = probe / POD_UID
        pod.mkdir()  # the kubelet: mkdirat, then fchmod with the volume root's mode
        pod.chmod(0o3777)
        assert pod.stat().st_gid == AGENT_GID  # inherited from the setgid parent
        trainer = as_process(1000, 1000, TRAINER, str(pod))
        assert ask(trainer, "warmup").strip() == "ok"
        ring, sock = pod / f"{POD_UID}.trainer.ring", pod / f"{POD_UID}.trainer.sock"
        st = ring.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, AGENT_GID, 0o600)
        st = sock.lstat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, AGENT_GID, 0o660)

        agent = as_process(65532, AGENT_GID, AGENT, str(probe))
        seen = json.loads(ask(agent, str(ring)))
        assert seen == {
            "records": [[f"{POD_UID}/{ring.name}", POD_UID, "warmup"]],
            "opened": "EACCES",
        }

        def connect() -> None:  # by descriptor: the path passes a socket path's 107 bytes
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(f"/proc/self/fd/{os.open(sock, os.O_PATH)}")

        assert as_user(65532, AGENT_GID, connect) == 0  # the agent's group may

        assert as_user(2000, 2000, connect) == 13  # another pod's uid
        assert as_user(2000, 0, connect) == 13  # ... even in the root group

        assert ask(trainer, "last words").strip() == "ok"
        trainer.kill()  # as the kernel's OOM killer would
        trainer.wait()
        # mtime ticks coarsely: the reader trusts the file once it is IDLE_S old
        last_words = [[f"{POD_UID}/{ring.name}", POD_UID, "last words"]]
        until(
            "the reader returning the killed trainer's last words",
            lambda: True if json.loads(ask(agent, str(ring)))["records"] == last_words else None,
            10.0,
            interval_s=0.2,
        )
    finally:
        for proc in (trainer, agent):
            if proc is not None:
                proc.kill()
                proc.wait()
        shutil.rmtree(top)


def test_a_ring_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    ring = tmp_path / "trainer.ring"
    for umask in (0o077, 0o000):
        old = os.umask(umask)
        try:
            RingWriter(str(ring), {"pid": 1, "comm": "python3"}).close()
        finally:
            os.umask(old)
        assert stat.S_IMODE(ring.stat().st_mode) == 0o600
