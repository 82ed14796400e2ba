"""Issue 22's hour soak: the agent, in a 192 MiB memcg, against a pod that tries every row of
the attack table again and again; at the end it must still record a trainer's OOM and a real
kernel kill.

    sudo nice -n 19 .venv/bin/python bench/soak_hostile.py --duration-s 3600 \
        --table /tmp/soak22.tsv

The agent runs `oomwatch run --standalone --probe-pod-dirs` from a snapshot of HEAD (`git
archive`, so edits to the tree meanwhile do not reach it) over the fake host of
tests/support/fifo_agent.py (a kubelet-like cgroup tree, the relay's FIFO), started inside
a scratch v1 memcg whose limit is 192 MiB, the DaemonSet's.  As the DaemonSet runs it
(`--agent-uid`, default 65532; 0: as root): the agent as 65532:65532 with no supplementary
groups, no capabilities (inheritable, bounding and ambient sets empty) and no_new_privs
(`setpriv`), on the system `python3` (the venv's interpreter lives under /root, which 65532
cannot search); its state directory 65532:65532 0750 and the probe directory root:65532
3777, as `prepare-dirs` makes them; the kernel records reach it through the real
`oomwatch.kmsg_relay`, as root, which reads a FIFO this driver writes (in place of
/dev/kmsg: replayed records cannot be written to the kernel's log) and writes the agent's.
Each cycle (`--cycle-s`):

- replayed through the FIFO (kernel records as the relay forwards them, renumbered and stamped
  now; a real 30,000-process kill every minute would take the node): a kill with a 30,000-row
  task table, a memory.oom.group kill of 20,000 victims (in a container of its own with
  `memory.oom.group` 1, its counters bumped as the kernel bumps them: the agent must count
  it, in its metrics and log), a storm of 10 small kills in 5 s;
- real files: 100 one-event probe files rewritten under 100 owner uids, 1,000 garbage
  `.ring` files touched every second, 5 pod directories of 100,000 hard links each (made once);
- real cgroup files: 20 containers whose memory climbs to their limit and falls back
  (pre-OOM warnings cycling);
- `oomwatch report` run inside the same memcg as the agent's uid (as `kubectl exec` would)
  over, in turn: a store of 20 uncapped 20,000-victim kills (text, --json, --html), a 600 KB
  nested journal JSON line, a 68 KB gzip of invalid UTF-8, the live store.

Each cycle appends a row (agent RSS, memcg usage / peak / failcnt / OOM kills, rows tried,
incidents logged, counter-only ones among them, /healthz status and how long it took, load,
the agent's `oomwatch_oom_kills_total` and `oomwatch_group_oom_kills_total`, group victims
logged)
to `--table`; the agent's and the relay's credentials (from /proc) head it.  At the end: a
trainer's framework OOM (a ring file written by the probe's own RingWriter into its per-pod
directory: a real probe, run as uid 1000, whose 0600 file the agent gets over its socket) and
a real kernel kill (a hog OOM-killed in a second scratch
memcg; its /dev/kmsg records forwarded through the relay with their sequence numbers shifted
past the replayed ones) must both be recorded.  Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from support.cgroupfs import memory_events  # noqa: E402
from support.fifo_agent import CONTAINER, kill_records, running_agent  # noqa: E402
from support.store_versions import uncapped_group_kill_store  # noqa: E402

from oomwatch.lab import ScratchMemcg, spawn_hog  # noqa: E402
from oomwatch.probe.ring import RingWriter  # noqa: E402
from oomwatch.probe.schema import FrameworkOomEvent, ProbeMeta, to_payload  # noqa: E402
from oomwatch.store import IncidentStore  # noqa: E402

MiB = 1 << 20
AGENT_GID = 65532
# The venv's interpreter resolves under /root (mode 0700 here), so the agent's uid runs the
# system python3 of the same minor version with the venv's site-packages on its path.
SITE_PACKAGES = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
SITE_PACKAGES = SITE_PACKAGES / "site-packages"
LIMIT_BYTES = 192 * MiB
TRAINER_UID = "7a1e0000-0000-4000-8000-00000000c0de"
FORECAST_CONTAINERS = 20
GROUP_MEMBERS = 20_000


class Feeder:
    """Writes kernel records into the agent's FIFO with sequence numbers that only go up."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.seq = 1_000_000
        self.lock = threading.Lock()

    def write(self, records: list[bytes]) -> None:
        """Each `text` (`prio;message` without the header) gets the next seq and now's stamp."""
        with self.lock:
            now_us = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
            out = []
            for i, record in enumerate(records):
                prio, _, text = record.partition(b";")
                out.append(b"%s,%d,%d,-;%s\n" % (prio, self.seq, now_us + i, text))
                self.seq += 1
            view = memoryview(b"".join(out))
            while view:
                try:
                    view = view[os.write(self.fd, view) :]
                except BlockingIOError:
                    time.sleep(0.002)


def kill(pid: int, extra_tasks: int = 0) -> list[bytes]:
    """The test report (kill of `pid`), `extra_tasks` more task rows; prio;text records."""
    raw = kill_records(0, 0, pid, extra_tasks)
    return [line.split(b",", 1)[0] + b";" + line.partition(b";")[2] for line in raw.splitlines()]


def in_kernel_order(feeder: Feeder, records: list[bytes], count: Any) -> None:
    """Write a report as the kernel makes it: the header and task table, then the counter
    (`count()`: memcg_memory_event_mm, just before the kill line is printed), then the kill
    line stamped after it.  Counting after the whole report would stamp the kill line
    before the counter moved and let the agent read it first: an order no kernel makes,
    which the agent rightly refuses to match (a counter-only duplicate)."""
    at = next(i for i, r in enumerate(records) if b"Killed process " in r)
    feeder.write(records[:at])
    count()
    feeder.write(records[at:])


def group_kill(first_pid: int, members: int, cgroup: str = CONTAINER) -> list[bytes]:
    """A memory.oom.group kill of `members` processes of `cgroup` (the primary victim, then
    every member, the primary again among them: `members + 1` kill lines)."""
    tail = "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:84kB oom_score_adj:0"
    line = (
        "Memory cgroup out of memory: Killed process {p} (w{p}) total-vm:21104kB, anon-rss:{r}kB, "
    )
    out = [
        f"6;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        f"oom_memcg={cgroup},task_memcg={cgroup},task=w{first_pid},pid={first_pid},uid=1000",
        "3;" + line.format(p=first_pid, r=1) + tail,
        f"6;Tasks in {cgroup} are going to be killed due to memory.oom.group set",
    ]
    out += ["3;" + line.format(p=first_pid + i, r=i % 5000) + tail for i in range(members)]
    return [r.encode() for r in out]


def probe_meta(pod_uid: str | None, pid: int) -> dict[str, Any]:
    return to_payload(
        ProbeMeta(
            pid=pid,
            comm="python3",
            started_wall_s=time.time() - 60,
            started_mono_s=max(0.0, time.monotonic() - 60),
            boot_id="b",
            cgroup=None,
            pod_uid=pod_uid,
            pod_name="trainer-0",
            namespace="ml",
            container="trainer",
        )
    )


def one_event(path: Path, owner: int, pod_uid: str | None, pid: int) -> None:
    """A ring file with one framework OOM, written as the trainer-side probe writes it, then
    made readable by anyone (as a pod that wants it read by path would)."""
    writer = RingWriter(str(path), probe_meta(pod_uid, pid))
    writer.write_event(
        to_payload(
            FrameworkOomEvent(
                wall_s=time.time(),
                mono_s=time.monotonic(),
                framework="torch-cuda",
                message="CUDA out of memory. Tried to allocate 2.00 GiB",
            )
        )
    )
    writer.close()
    os.chown(path, owner, -1)  # the group stays the directory's (setgid), as a pod's file's
    os.chmod(path, 0o644)  # a hostile pod's own file need not be 0600: readable by path


def make_link_dirs(probe: Path, scratch: Path, dirs: int, entries: int) -> None:
    for d in range(dirs):
        pod = probe / f"1b2c0000-{d:04d}-4000-8000-000000000000"
        pod.mkdir(exist_ok=True)
        junk = scratch / f"junk{d}"
        for i in range(entries):
            if i % 50_000 == 0:  # ext4 allows 65,000 links to an inode
                source = junk.with_suffix(f".{i}")
                source.write_bytes(b"x")
            os.link(source, pod / f"j{i}")


class Background(threading.Thread):
    """Every second: touch the 1,000 garbage files; ramp the forecast containers."""

    def __init__(self, probe: Path, cgroup_dirs: list[Path]) -> None:
        super().__init__(daemon=True)
        self.probe, self.cgroup_dirs = probe, cgroup_dirs
        self.stop = threading.Event()
        self.ticks = 0
        for i in range(1_000):
            (probe / f"junk{i}.trainer.ring").write_bytes(os.urandom(64))

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(1.0):
            self.ticks += 1
            for i in range(1_000):
                with contextlib.suppress(OSError):
                    os.utime(self.probe / f"junk{i}.trainer.ring")
            elapsed = time.monotonic() - started
            for i, path in enumerate(self.cgroup_dirs):
                # 180 s up from 4 to 32 MiB (steady growth: a warning), then 60 s down.
                phase = (elapsed + 12 * i) % 240
                used = 4 * MiB + int(min(phase, 180) / 180 * 28 * MiB) if phase < 180 else 4 * MiB
                (path / "memory.current").write_text(f"{used}\n")
                (path / "memory.stat").write_text(f"anon {used}\nfile 0\nshmem 0\n")


class GroupContainer:
    """A container of the pod with `memory.oom.group` 1 (the kernel kills its whole group only
    there): its own counters, bumped as the kernel bumps them for a group kill of `members`:
    `oom` and `oom_group_kill` once, `oom_kill` once per kill line (members + 1)."""

    def __init__(self, container_dir: Path, agent_cgroup: str) -> None:
        self.path = container_dir.parent / f"cri-containerd-{'9' * 64}.scope"
        self.path.mkdir(exist_ok=True)
        for name in os.listdir(container_dir):
            if (container_dir / name).is_file():
                shutil.copy(container_dir / name, self.path / name)
        (self.path / "cgroup.procs").write_text("")
        (self.path / "memory.oom.group").write_text("1\n")
        (self.path / "memory.events").write_text(memory_events())
        self.cgroup = agent_cgroup.rsplit("/", 1)[0] + "/" + self.path.name
        self.ooms = self.oom_kills = 0

    def count(self, members: int) -> None:
        self.ooms += 1
        self.oom_kills += members + 1
        events = memory_events(self.ooms, self.oom_kills, self.ooms)
        (self.path / "memory.events").write_text(events)


def metric_sum(body: str, name: str) -> float:
    """The sum of a counter's series in a Prometheus text body."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def forecast_containers(container_dir: Path) -> list[Path]:
    pod = container_dir.parent
    out = []
    for i in range(FORECAST_CONTAINERS):
        path = pod / f"cri-containerd-{i:064x}.scope"
        path.mkdir(exist_ok=True)
        for name in os.listdir(container_dir):
            if (container_dir / name).is_file():
                shutil.copy(container_dir / name, path / name)
        (path / "cgroup.procs").write_text("")
        out.append(path)
    return out


class HealthProbe(threading.Thread):
    """`/healthz` every `period_s` as the kubelet asks it (one at a time), with its time: a
    kubelet probe's default timeout is 1 s, the soak's table counts answers over 1 s and 5 s."""

    def __init__(self, agent: Any, period_s: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.agent, self.period_s = agent, period_s
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.window: list[tuple[int, float]] = []

    def run(self) -> None:
        while not self.stop.wait(self.period_s):
            started = time.monotonic()
            status = self.agent.get("/healthz", timeout_s=5.0)[0]
            with self.lock:
                self.window.append((status, time.monotonic() - started))

    def take(self) -> dict[str, Any]:
        """The probes since the last call: how many, not 200, over 1 s, slowest (s)."""
        with self.lock:
            window, self.window = self.window, []
        return {
            "n": len(window),
            "bad": sum(s != 200 for s, _ in window),
            "over_1s": sum(t > 1.0 for _, t in window),
            "max_s": round(max((t for _, t in window), default=0.0), 2),
        }


def launcher(uid: int, src: Path) -> list[str]:
    """The interpreter command for the agent's uid: `setpriv` as the DaemonSet's
    securityContext has it (runAsUser/runAsGroup, drop ALL, allowPrivilegeEscalation false)."""
    if uid == 0:
        return [sys.executable]
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={AGENT_GID}",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "env",
        f"PYTHONPATH={src}:{SITE_PACKAGES}",
        "/usr/bin/python3",
    ]


def prepare_dirs(work: Path, uid: int) -> None:
    """The directories as the chart's prepare-dirs leaves them, before the agent starts."""
    os.chmod(work, 0o755)  # mkdtemp's 0700 would keep the agent's uid out of everything
    gid = AGENT_GID if uid else 0
    for name, owner, mode in (("state", uid, 0o750), ("probe", 0, 0o3777), ("out", uid, 0o750)):
        path = work / name
        path.mkdir(exist_ok=True)
        os.chown(path, owner, gid)
        os.chmod(path, mode)


def credentials(pid: int) -> dict[str, str]:
    """Who a process runs as, from /proc: uids, gids, groups, capability sets, no_new_privs."""
    keys = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in keys:
                out[key] = " ".join(value.split())
    return out


def start_relay(work: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """The relay as root from the driver's FIFO (its /dev/kmsg) to the agent's; the driver's
    write end (held read-write, as the relay holds its own)."""
    source = work / "kmsg.source"
    os.mkfifo(source, 0o600)
    fd = os.open(source, os.O_RDWR | os.O_NONBLOCK)
    relay = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oomwatch.kmsg_relay",
            "--kmsg",
            str(source),
            "--fifo",
            str(work / "kmsg.fifo"),
        ],
        env=env,
        cwd=env["PYTHONPATH"],
        stdin=subprocess.DEVNULL,
        stderr=open(work / "relay.stderr", "wb"),  # noqa: SIM115
    )
    deadline = time.monotonic() + 30
    while not (work / "kmsg.fifo").exists():  # the relay makes it (ensure_fifo), 0666
        if relay.poll() is not None or time.monotonic() > deadline:
            why = (work / "relay.stderr").read_text()
            sys.exit(f"soak_hostile: the relay did not start: {why}")
        time.sleep(0.05)
    return relay, fd


def memcg_v1(memcg: ScratchMemcg, name: str) -> int:
    try:
        return int((memcg.fs_path / name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


def oom_kills(memcg: ScratchMemcg) -> int:
    try:
        return memcg.oom_kill_count()
    except (OSError, ValueError, KeyError):
        return -1


def in_memcg(
    memcg: ScratchMemcg, command: list[str], env: dict[str, str], cwd: Path, timeout_s: float
) -> dict[str, Any]:
    """Run `command` inside the agent's memcg (as `kubectl exec` into its container would);
    the shell joins the memcg as root, then execs `command` (which may drop privilege)."""
    procs = memcg.fs_path / "cgroup.procs"
    wrapped = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *command]
    started = time.monotonic()
    try:
        run = subprocess.run(
            wrapped,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
        )
        rc, err = run.returncode, run.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, err = -999, "timeout"
    return {"rc": rc, "s": round(time.monotonic() - started, 1), "traceback": "Traceback" in err}


def report_inputs(work: Path, uid: int) -> list[tuple[str, list[str]]]:
    store = work / "oldstore"
    uncapped_group_kill_store(store, 20)
    for path in (store, *store.iterdir()):
        os.chown(path, uid, AGENT_GID if uid else 0)
    nested = work / "nested.json"
    nested.write_text('{"MESSAGE":' + "[" * 300_000 + "]" * 300_000 + "}\n")
    bad = work / "bad.gz"
    bad.write_bytes(gzip.compress((b"x\x80" * 100 + b"\n") * 15_000, 9))
    return [
        ("store-text", ["--store", str(store)]),
        ("store-json", ["--store", str(store), "--json"]),
        ("store-html", ["--store", str(store), "--html", str(work / "out" / "r.html")]),
        ("nested-json", [str(nested)]),
        ("bad-utf8-gz", [str(bad)]),
        ("live-store-json", ["--store", str(work / "state"), "--json"]),
    ]


def real_kernel_kill(feeder: Feeder) -> int | None:
    """OOM-kill a hog in a scratch memcg; forward the kernel's records of it to the FIFO."""
    comm = f"soak22-{os.getpid() % 100_000}"  # its own: soaks side by side see each other's hogs
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    os.lseek(fd, 0, os.SEEK_END)
    records: list[bytes] = []
    victim = None
    try:
        with ScratchMemcg(32 * MiB) as memcg:
            spawn_hog(memcg, mb=96, comm=comm)
            deadline = time.monotonic() + 30
            while victim is None and time.monotonic() < deadline:
                try:
                    raw = os.read(fd, 8192)
                except BlockingIOError:
                    time.sleep(0.1)
                    continue
                except OSError:  # EPIPE: records overwritten meanwhile
                    continue
                prio, _, rest = raw.partition(b",")
                text = rest.partition(b";")[2].split(b"\n", 1)[0]
                records.append(prio + b";" + text)
                if b"Killed process " in text and f"({comm})".encode() in text:
                    victim = int(text.split(b"Killed process ", 1)[1].split(b" ", 1)[0])
            time.sleep(0.5)
            while True:  # the rest of the report (group-kill or reaper lines)
                try:
                    raw = os.read(fd, 8192)
                except (BlockingIOError, OSError):
                    break
                prio, _, rest = raw.partition(b",")
                records.append(prio + b";" + rest.partition(b";")[2].split(b"\n", 1)[0])
    finally:
        os.close(fd)
    if victim is not None:
        feeder.write(records)
    return victim


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration-s", type=float, default=3600)
    parser.add_argument("--cycle-s", type=float, default=60)
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--link-entries", type=int, default=100_000)
    parser.add_argument("--agent-uid", type=int, default=65532, help="0: the agent as root")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("soak_hostile: needs root (memcg, chown to 100 owners, /dev/kmsg)")
    # SIGTERM unwinds (the agent and the relay stopped, the memcg removed); a background
    # job ignores SIGINT.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="oomwatch-soak22-"))
    src = work / "src"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OOMWATCH_", "KUBE"))}
    env["PYTHONPATH"] = str(src)
    prepare_dirs(work, args.agent_uid)
    relay, source_fd = start_relay(work, env)
    table = open(args.table, "w", buffering=1)  # noqa: SIM115
    head = (
        "t_s",
        "alive",
        "healthz",
        "rss_mib",
        "hwm_mib",
        "memcg_mib",
        "memcg_peak_mib",
        "failcnt",
        "memcg_oom_kills",
        "big_kills",
        "group_kills",
        "storm_kills",
        "probe_files_rewritten",
        "report",
        "report_rc",
        "report_s",
        "report_tb",
        "oom_kill_lines",
        "replayed_logged",
        "counter_only",
        "healthz_probes",
        "healthz_bad",
        "healthz_over_1s",
        "healthz_max_s",
        "load1",
        "metric_oom_kills",
        "metric_group_kills",
        "group_victims_counted",
    )
    table.write("\t".join(head) + "\n")
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"soak_hostile: work {work}, commit {commit}", flush=True)
    inputs = report_inputs(work, args.agent_uid)
    run_as = launcher(args.agent_uid, src)
    counts = {"big": 0, "group": 0, "storm": 0, "rewritten": 0, "reports": 0, "report_fail": 0}
    with ScratchMemcg(LIMIT_BYTES, exclusive=False) as memcg:
        own = Path("/proc/self/cgroup").read_text()
        home = next(line.split(":", 2)[2] for line in own.splitlines() if ":memory:" in line)
        (memcg.fs_path / "cgroup.procs").write_text(str(os.getpid()))  # the agent forks here
        try:
            ctx = running_agent(src, work, "--probe-pod-dirs", launcher=run_as)
            agent = ctx.__enter__()
        finally:
            (memcg.mount / home.strip("/") / "cgroup.procs").write_text(str(os.getpid()))
        try:
            who = {"agent": credentials(agent.proc.pid), "relay": credentials(relay.pid)}
            print(f"soak_hostile: {json.dumps(who)}", flush=True)
            table.write("# " + json.dumps(who) + "\n")
            feeder = Feeder(source_fd)
            health = HealthProbe(agent)
            health.start()

            def count() -> None:
                events = memory_events(agent.kills, agent.kills)
                (agent.container_dir / "memory.events").write_text(events)

            probe = agent.probe_dir
            group = GroupContainer(agent.container_dir, CONTAINER)
            make_link_dirs(probe, work, 5, args.link_entries)
            background = Background(probe, forecast_containers(agent.container_dir))
            background.start()
            started = time.monotonic()
            pid = 100_000
            sent: set[int] = set()  # the primary victims replayed
            cycle = 0
            while time.monotonic() - started < args.duration_s:
                cycle_start = time.monotonic()
                agent.kills += 1
                in_kernel_order(feeder, kill(pid, extra_tasks=30_000), count)
                sent.add(pid)
                pid += 40_000
                counts["big"] += 1
                time.sleep(2)
                in_kernel_order(
                    feeder,
                    group_kill(pid, GROUP_MEMBERS, group.cgroup),
                    lambda: group.count(GROUP_MEMBERS),
                )
                sent.add(pid)
                pid += 40_000
                counts["group"] += 1
                time.sleep(2)
                for _ in range(10):
                    agent.kills += 1
                    in_kernel_order(feeder, kill(pid), count)
                    sent.add(pid)
                    pid += 10
                    counts["storm"] += 1
                    time.sleep(0.5)
                for uid in range(100):
                    one_event(probe / f"f{uid}.ring", 20_000 + uid, None, 5000 + uid)
                counts["rewritten"] += 100
                name, report_args = inputs[cycle % len(inputs)]
                report = in_memcg(
                    memcg, [*run_as, "-m", "oomwatch.cli", "report", *report_args], env, src, 300
                )
                counts["reports"] += 1
                counts["report_fail"] += report["rc"] not in (0, 1) or report["traceback"]
                while time.monotonic() - cycle_start < args.cycle_s - 1:
                    time.sleep(0.5)
                alive = agent.proc.poll() is None
                status = agent.status() if alive else {}
                healthz = agent.get("/healthz")[0] if alive else -1
                logged = agent.events(lambda e: e.get("event") == "oom_kill")
                oom_lines = len(logged)
                replayed_logged = len(sent & {e.get("process.pid") for _, e in logged})
                counter_only = sum(bool(e.get("kmsg_missing")) for _, e in logged)
                probes = health.take()
                metrics = agent.get("/metrics")[1] if alive else ""
                group_victims = sum(
                    int(e.get("victims") or 0)
                    for _, e in logged
                    if e.get("group_kill") and not e.get("kmsg_missing")
                )
                row = (
                    round(time.monotonic() - started),
                    alive,
                    healthz,
                    round(status.get("VmRSS", 0) / 1024, 1),
                    round(status.get("VmHWM", 0) / 1024, 1),
                    round(memcg_v1(memcg, "memory.usage_in_bytes") / MiB, 1),
                    round(memcg_v1(memcg, "memory.max_usage_in_bytes") / MiB, 1),
                    memcg_v1(memcg, "memory.failcnt"),
                    oom_kills(memcg),
                    counts["big"],
                    counts["group"],
                    counts["storm"],
                    counts["rewritten"],
                    name,
                    report["rc"],
                    report["s"],
                    report["traceback"],
                    oom_lines,
                    replayed_logged,
                    counter_only,
                    probes["n"],
                    probes["bad"],
                    probes["over_1s"],
                    probes["max_s"],
                    round(os.getloadavg()[0], 2),
                    metric_sum(metrics, "oomwatch_oom_kills_total"),
                    metric_sum(metrics, "oomwatch_group_oom_kills_total"),
                    group_victims,
                )
                table.write("\t".join(map(str, row)) + "\n")
                cycle += 1
                if not alive:
                    break
            background.stop.set()
            background.join(5)
            health.stop.set()
            verdict = final_checks(agent, feeder, work)
        finally:
            ctx.__exit__(None, None, None)
            relay.terminate()
            relay.wait(10)
    # Every group kill counted where the agent counts kills: one group kill each in
    # oomwatch_group_oom_kills_total, its kill lines in oomwatch_oom_kills_total.
    groups = counts["group"]
    group_kills_counted = row[-2] == groups and row[-1] == groups * GROUP_MEMBERS
    verdict.update(
        group_kills_counted=group_kills_counted,
        metric_group_kills=row[-2],
        metric_oom_kills=row[-3],
        group_victims_logged=row[-1],
    )
    verdict["survived"] = verdict["survived"] and group_kills_counted and row[19] == 0
    verdict.update(
        counts=counts,
        peak_memcg_mib=row[6],
        peak_rss_mib=row[4],
        counter_only=row[19],
        memcg_oom_kills=row[8],
        cycles=cycle,
        agent_uid=args.agent_uid,
        relay_exit=relay.returncode,
    )
    table.write("# " + json.dumps(verdict) + "\n")
    table.close()
    print(json.dumps(verdict), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if verdict["survived"] else 1


TRAINER = """
import sys, time, types
torch = types.ModuleType("torch")
class OutOfMemoryError(RuntimeError):
    pass
torch.OutOfMemoryError = OutOfMemoryError
torch.cuda = types.SimpleNamespace(is_available=lambda: False, is_initialized=lambda: False)
sys.modules["torch"] = torch
import oomwatch.probe
probe = oomwatch.probe.start(excepthooks=False)
probe.set_phase("train", step=7)
probe.record_oom(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
time.sleep(float(sys.argv[1]))  # its socket answers the agent meanwhile
"""


def start_trainer(trainer_dir: Path, src: Path, hold_s: float) -> subprocess.Popen[bytes]:
    """A trainer as uid 1000 whose probe records a framework OOM in its pod directory (a 0600
    ring file, handed to the agent over its socket), as a pod's would."""
    trainer_dir.mkdir(exist_ok=True)  # the kubelet's per-pod directory: the parent's mode
    trainer_dir.chmod(0o3777)
    env = {
        "PYTHONPATH": str(src),
        "PATH": "/usr/bin:/bin",
        "OOMWATCH_PROBE_DIR": str(trainer_dir),
        "OOMWATCH_POD_UID": TRAINER_UID,
        "OOMWATCH_POD_NAME": "trainer-0",
        "OOMWATCH_POD_NAMESPACE": "ml",
        "OOMWATCH_CONTAINER_NAME": "trainer",
    }
    return subprocess.Popen(
        [
            "setpriv",
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "/usr/bin/python3",
            "-c",
            TRAINER,
            str(hold_s),
        ],
        env=env,
        stdin=subprocess.DEVNULL,
    )


def final_checks(agent: Any, feeder: Feeder, work: Path) -> dict[str, Any]:
    """The agent alive, a trainer's OOM and a real kernel kill recorded after an hour of it."""
    alive = agent.proc.poll() is None
    trainer = start_trainer(agent.probe_dir / TRAINER_UID, work / "src", 120)
    real_pid = real_kernel_kill(feeder) if alive else None
    kernel_logged = (
        real_pid is not None
        and agent.arrival(
            lambda e: e.get("event") == "oom_kill" and e.get("process.pid") == real_pid, 60
        )
        is not None
    )
    trainer_recorded = False
    deadline = time.monotonic() + 90
    while alive and time.monotonic() < deadline and not trainer_recorded:
        time.sleep(5)
        store = IncidentStore.open_readonly(work / "state")
        try:
            trainer_recorded = any(
                i.kind == "framework" and i.pod_uid == TRAINER_UID for i in store.iter_query()
            )
        finally:
            store.close()
    alive = agent.proc.poll() is None
    trainer.kill()
    trainer.wait()
    return {
        "survived": alive and kernel_logged and trainer_recorded,
        "alive": alive,
        "real_kernel_kill_pid": real_pid,
        "real_kernel_kill_logged": kernel_logged,
        "trainer_oom_recorded": trainer_recorded,
    }


if __name__ == "__main__":
    sys.exit(main())
