"""`oomwatch run` over real kills, for the v1 and v2 suites: a container of a scratch tree,
bursts of kills, a kill -9 of the agent mid-burst and its restart, and reading back what it
stored and exported."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable
from pathlib import Path

from oomwatch.incident import Incident
from oomwatch.lab import (
    Memcg,
    ScratchMemcg,
    kubelet_layout,
    spawn_hog,
    wait_rate_limit_window,
)
from support import wait_for
from support.agent import DaemonProcess, seed_cursor_at_log_end
from support.store import settled_incidents, stored

MIB = 1 << 20


def container(
    scratch: ScratchMemcg, limit_mb: int | None = 32, pod_limit_mb: int | None = None
) -> tuple[Memcg, str, str]:
    """A kubelet-like container (systemd driver) of a new pod: (memcg, pod UID, container ID)."""
    uid, cid = str(uuid.uuid4()), uuid.uuid4().hex * 2
    memcg = kubelet_layout(
        scratch,
        uid,
        cid,
        driver="systemd",
        container_limit_bytes=limit_mb * MIB if limit_mb else None,
        pod_limit_bytes=pod_limit_mb * MIB if pod_limit_mb else None,
    )
    return memcg, uid, cid


def metric_value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def burst(memcgs: list[Memcg], per_memcg: int) -> dict[int, str]:
    """`per_memcg` children killed one after another in each memcg, memcgs in parallel:
    each killed child's pid -> the memcg it was killed in."""
    hogs = [
        spawn_hog(m, mode="child-worker", mb=96, comm=f"h4-b{i}", children=per_memcg, linger_s=0.5)
        for i, m in enumerate(memcgs)
    ]
    memcg_of: dict[int, str] = {}
    for hog in hogs:
        hog.wait_for_count("child-exit", per_memcg, timeout_s=60)
        memcg_of.update((pid, hog.memcg.relpath) for pid in hog.child_pids)
        hog.wait(30)
    return memcg_of


def incidents_for(state_dir: Path, pids: set[int], scratch: ScratchMemcg) -> list[Incident]:
    return [
        i
        for i in stored(state_dir)
        if (i.victim and i.victim.pid in pids)
        or (i.kmsg_missing and (i.task_memcg or "").startswith(scratch.relpath))
    ]


def assert_in_its_pod_or_ambiguous(
    incidents: list[Incident], memcg_of: dict[int, str], uid_of: dict[str, str]
) -> list[Incident]:
    """The product's promise for each kill: in the container and pod it happened in
    (`memcg_of`: victim pid -> true memcg; `uid_of`: memcg -> pod UID) where the kernel's
    evidence places it, else ambiguous -- no pod charged, its true container among the
    candidates -- and never in another pod.  Returns the ambiguous ones."""
    ambiguous: list[Incident] = []
    for incident in incidents:
        truth = memcg_of[incident.victim.pid] if incident.victim else incident.task_memcg
        attribution = incident.attribution
        assert attribution is not None, incident
        if attribution.ambiguous:
            assert incident.pod_uid is None and incident.task_memcg is None, incident
            assert truth in [c.cgroup for c in attribution.candidates], incident
            ambiguous.append(incident)
        else:
            assert truth is not None and incident.task_memcg == truth, incident
            assert incident.pod_uid == uid_of[truth], incident
    return ambiguous


def kill_9_mid_burst_and_restart(
    scratch: ScratchMemcg,
    start_daemon: Callable[..., DaemonProcess],
    state_dir: Path,
    make: Callable[[ScratchMemcg], tuple[Memcg, str, str]],
    *,
    memcgs: int = 4,
    children: int = 5,
    comm: str = "h4-r",
    settle_s: float = 15.0,
) -> None:
    """`children` kills in each of `memcgs` containers; the agent is killed with SIGKILL
    after the second and restarted when all are done: each kill recorded once, in its pod
    or ambiguous among candidates that include it."""
    seed_cursor_at_log_end(state_dir)
    daemon = start_daemon()
    made = [make(scratch) for _ in range(memcgs)]
    uid_of = {m.relpath: uid for m, uid, _ in made}
    total = memcgs * children
    wait_rate_limit_window()  # full reports (and the names they list) for the first kills
    hogs = [
        spawn_hog(m, mode="child-worker", mb=96, comm=f"{comm}{i}", children=children, linger_s=0.5)
        for i, (m, _, _) in enumerate(made)
    ]
    hogs[0].wait_for_count("child-exit", 2, timeout_s=60)
    daemon.signal(signal.SIGKILL)
    daemon.proc.wait(10)
    pids: list[int] = []
    for hog in hogs:
        hog.wait_for_count("child-exit", children, timeout_s=120)
        pids += hog.child_pids
        hog.wait(30)
    restarted = start_daemon()
    mine: list[Incident] = []

    def all_in() -> bool:
        mine[:] = incidents_for(restarted.state_dir, set(pids), scratch)
        return len(mine) >= total

    if not wait_for(all_in, settle_s):
        found = {i.victim.pid for i in mine if i.victim}
        raise AssertionError(
            f"{len(mine)} of {total} incidents; not recorded: {sorted(set(pids) - found)};"
            f" {restarted.state()}"
        )
    mine = settled_incidents(lambda: incidents_for(restarted.state_dir, set(pids), scratch))
    victims = [i.victim.pid for i in mine if i.victim]
    assert len(mine) == total and sorted(victims) == sorted(set(victims))
    # the counters of the kills made while no agent ran were first read all at once
    memcg_of = {pid: hog.memcg.relpath for hog in hogs for pid in hog.child_pids}
    ambiguous = len(assert_in_its_pod_or_ambiguous(mine, memcg_of, uid_of))
    assert not [i for i in mine if i.kmsg_missing]  # each counted kill explained once
    print(
        f"kill -9: {sum(i.header_suppressed for i in mine)} header-less, "
        f"{ambiguous} ambiguous, {sum(i.kmsg_missing for i in mine)} counter-only"
    )
