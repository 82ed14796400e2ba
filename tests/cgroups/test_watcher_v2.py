"""Counter watching on cgroup v2 file trees: baselines, deltas, vanishing containers, inotify."""

from __future__ import annotations

import select
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.cgroupfs import CONTAINER, CONTAINER2, POD, POD_UID, CgroupV2Tree
from support.clock import FakeClock

from oomwatch.cgroups import CgroupWatcher, discovery, find_hierarchies
from oomwatch.cgroups.notify import Drained
from oomwatch.cgroups.walks import NEW_DIR_RECHECK_EVERY_S, NEW_DIR_RECHECK_S


def _watcher(tree: CgroupV2Tree, clock: FakeClock, *, inotify: bool) -> CgroupWatcher:
    return CgroupWatcher(
        [str(tree.root)],
        poll_interval_s=1.0,
        use_inotify=inotify,
        rescan_interval_s=3600.0,
        clock=clock,
    )


def _kill_in_container(tree: CgroupV2Tree, rel: str, kills: int = 1) -> None:
    """What the kernel does for `kills` memcg kills at the container's own limit."""
    tree.events(rel, oom=1, oom_kill=kills)
    for ancestor in (POD, "/kubepods/burstable", "/kubepods"):
        tree.events(ancestor, oom=1, oom_kill=kills)


def _wait_inotify(watcher: CgroupWatcher) -> None:
    fd = watcher.fileno()
    assert fd is not None
    readable, _, _ = select.select([fd], [], [], 2.0)
    assert readable, "no inotify event for memory.events"


def test_finds_the_v2_hierarchy_and_every_kubernetes_level(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    assert [(h.mount_path, h.version) for h in find_hierarchies(str(fake_v2.root))] == [
        (str(fake_v2.root), 2)
    ]
    watcher = _watcher(fake_v2, clock, inotify=False)
    levels = {cg.relpath: cg.identity.level for cg in watcher.cgroups()}
    assert levels == {
        "/kubepods": "node",
        "/kubepods/burstable": "qos",
        POD: "pod",
        CONTAINER: "container",
        CONTAINER2: "container",
    }
    container = next(cg for cg in watcher.cgroups() if cg.relpath == CONTAINER)
    assert container.identity.pod_uid == POD_UID
    assert container.fs_path == str(fake_v2.path(CONTAINER))
    assert container.version == 2
    watcher.close()


def test_does_not_descend_below_a_container_and_bounds_non_kubernetes_cgroups(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    fake_v2.make(f"{CONTAINER}/container")  # crun's sub-cgroup
    fake_v2.make("/system.slice/limited.service", limit=1 << 30)
    fake_v2.make("/system.slice/unlimited.service")
    watcher = _watcher(fake_v2, clock, inotify=False)
    rels = {cg.relpath for cg in watcher.cgroups()}
    assert f"{CONTAINER}/container" not in rels
    assert "/system.slice/limited.service" in rels
    assert "/system.slice/unlimited.service" not in rels
    assert "/system.slice" not in rels
    only_k8s = CgroupWatcher([str(fake_v2.root)], use_inotify=False, include_limited=False)
    assert "/system.slice/limited.service" not in {cg.relpath for cg in only_k8s.cgroups()}
    watcher.close()
    only_k8s.close()


def test_startup_counters_are_a_baseline_not_kills(fake_v2: CgroupV2Tree, clock: FakeClock) -> None:
    _kill_in_container(fake_v2, CONTAINER, kills=5)
    watcher = _watcher(fake_v2, clock, inotify=False)
    assert watcher.poll_changes() == []
    clock.advance(1.0)
    assert watcher.poll_changes() == []
    watcher.close()


@pytest.mark.parametrize("inotify", [False, True], ids=["polling", "inotify"])
def test_one_kill_is_one_delta_at_the_container(
    fake_v2: CgroupV2Tree, clock: FakeClock, inotify: bool
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=inotify)
    assert watcher.poll_changes() == []
    _kill_in_container(fake_v2, CONTAINER)
    if inotify:
        _wait_inotify(watcher)  # no clock advance: only the notification can trigger a read
    else:
        clock.advance(1.0)
    deltas = watcher.poll_changes()
    assert [
        (d.cgroup.relpath, d.oom, d.oom_kill, d.oom_group_kill, d.vanished) for d in deltas
    ] == [(CONTAINER, 1, 1, 0, False)]
    assert deltas[0].observed_at_s == clock.now
    clock.advance(1.0)
    assert watcher.poll_changes() == []  # re-reading unchanged counters reports nothing
    watcher.close()


def test_a_rise_is_dated_by_its_read_not_by_the_start_of_a_slow_poll(
    fake_v2: CgroupV2Tree, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rescan that takes 200 ms before the pass, and a kill in those 200 ms: the rise is
    dated after its read (by_s), so it is never "seen" before the kill it counts, and the
    counter is known unchanged only as of the pass's start (after_s)."""
    watcher = _watcher(fake_v2, clock, inotify=False)
    assert watcher.poll_changes() == []
    clock.advance(1.0)
    polled_at = clock.now
    rescan = watcher.rescan

    def slow_rescan(relpath: str | None = None) -> None:
        rescan(relpath)
        clock.advance(0.1)
        _kill_in_container(fake_v2, CONTAINER)  # the kill, at polled_at + 0.1
        clock.advance(0.1)

    monkeypatch.setattr(watcher, "rescan", slow_rescan)
    monkeypatch.setattr(watcher, "_next_rescan_s", 0.0)
    [delta] = watcher.poll_changes()
    assert delta.cgroup.relpath == CONTAINER
    assert delta.observed_at_s == polled_at + 0.2
    assert delta.since_s is not None and delta.since_s <= polled_at + 0.1
    watcher.close()


def test_merged_notifications_count_kills_not_wakeups(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=True)
    watcher.poll_changes()
    for kills in (1, 2, 3):  # three writes, possibly one merged wake-up
        _kill_in_container(fake_v2, CONTAINER, kills=kills)
    _wait_inotify(watcher)
    total = sum(d.oom_kill for d in watcher.poll_changes())
    clock.advance(1.0)
    total += sum(d.oom_kill for d in watcher.poll_changes())
    assert total == 3
    watcher.close()


def test_group_kill_counts_every_victim_and_one_group_kill(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    fake_v2.path(CONTAINER).joinpath("memory.oom.group").write_text("1\n")
    watcher = _watcher(fake_v2, clock, inotify=False)
    # Two processes, three kills counted (the primary twice) and oom_group_kill counted up
    # the tree like the others: as real 6.1 and 6.12 kernels do (test_watcher_v2_real.py).
    for rel in (CONTAINER, POD, "/kubepods/burstable", "/kubepods"):
        fake_v2.events(rel, oom=1, oom_kill=3, oom_group_kill=1)
    clock.advance(1.0)
    deltas = watcher.poll_changes()
    assert [(d.cgroup.relpath, d.oom_kill, d.oom_group_kill) for d in deltas] == [(CONTAINER, 3, 1)]
    assert watcher.oom_group(CONTAINER) is True
    assert watcher.oom_group(CONTAINER2) is False
    watcher.close()


def test_pod_limit_kill_shows_the_oom_at_the_pod_and_the_kill_at_the_container(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=False)
    fake_v2.events(CONTAINER, oom=0, oom_kill=1)  # the victim lived in the container ...
    fake_v2.events(POD, oom=1, oom_kill=1)  # ... but the pod hit its limit
    for ancestor in ("/kubepods/burstable", "/kubepods"):
        fake_v2.events(ancestor, oom=1, oom_kill=1)
    clock.advance(1.0)
    deltas = watcher.poll_changes()
    assert [(d.cgroup.relpath, d.oom, d.oom_kill) for d in deltas] == [
        (CONTAINER, 0, 1),
        (POD, 1, 0),
    ]
    watcher.close()


@pytest.mark.parametrize("inotify", [False, True], ids=["polling", "inotify"])
def test_container_vanished_after_kill_is_attributed_to_the_pod(
    fake_v2: CgroupV2Tree, clock: FakeClock, inotify: bool
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=inotify)
    watcher.poll_changes()
    shutil.rmtree(fake_v2.path(CONTAINER))  # killed and removed before we read it
    for ancestor in (POD, "/kubepods/burstable", "/kubepods"):
        fake_v2.events(ancestor, oom=1, oom_kill=1)
    if inotify:
        _wait_inotify(watcher)  # the pod's memory.events changed
        deltas = watcher.poll_changes()
    else:
        deltas = []
    watcher.rescan()  # the periodic rescan notices the directory is gone
    clock.advance(1.0)
    deltas += watcher.poll_changes()
    assert sorted((d.cgroup.relpath, d.oom_kill, d.vanished) for d in deltas) == [
        (POD, 1, False),
        (CONTAINER, 0, True),
    ]
    assert CONTAINER not in {cg.relpath for cg in watcher.cgroups()}
    assert watcher.oom_group(CONTAINER) is None
    clock.advance(1.0)
    assert watcher.poll_changes() == []
    watcher.close()


def test_container_killed_then_vanished_before_the_next_read_is_counted_once(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=False)
    _kill_in_container(fake_v2, CONTAINER)
    clock.advance(1.0)
    first = watcher.poll_changes()
    shutil.rmtree(fake_v2.path(CONTAINER))
    watcher.rescan()
    clock.advance(1.0)
    second = watcher.poll_changes()
    assert [(d.cgroup.relpath, d.oom_kill) for d in first] == [(CONTAINER, 1)]
    assert [(d.cgroup.relpath, d.oom_kill, d.vanished) for d in second] == [(CONTAINER, 0, True)]
    watcher.close()


def test_new_container_found_by_rescan(fake_v2: CgroupV2Tree, clock: FakeClock) -> None:
    watcher = _watcher(fake_v2, clock, inotify=False)
    late = f"{POD}/{'c' * 64}"
    fake_v2.make(late)
    watcher.rescan()
    assert late in {cg.relpath for cg in watcher.cgroups()}
    # A kill after discovery is the new container's.
    fake_v2.events(late, oom=1, oom_kill=1)
    for ancestor in (POD, "/kubepods/burstable", "/kubepods"):
        fake_v2.events(ancestor, oom=1, oom_kill=1)
    clock.advance(1.0)
    assert [(d.cgroup.relpath, d.oom_kill) for d in watcher.poll_changes()] == [(late, 1)]
    watcher.close()


def test_kill_before_a_container_was_found_is_counted_once_at_the_pod(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=False)
    late = f"{POD}/{'d' * 64}"
    fake_v2.make(late)
    fake_v2.events(late, oom=1, oom_kill=1)  # killed before any rescan saw it
    for ancestor in (POD, "/kubepods/burstable", "/kubepods"):
        fake_v2.events(ancestor, oom=1, oom_kill=1)
    clock.advance(1.0)
    first = watcher.poll_changes()  # the pod's counters tell first
    watcher.rescan()
    clock.advance(1.0)
    second = watcher.poll_changes()
    assert [(d.cgroup.relpath, d.oom_kill) for d in first + second] == [(POD, 1)]
    watcher.close()


def test_new_kubepods_tree_after_startup_reports_its_kills(
    tmp_path: Path, clock: FakeClock
) -> None:
    tree = CgroupV2Tree(tmp_path / "cg")
    watcher = _watcher(tree, clock, inotify=False)
    assert watcher.cgroups() == []
    tree.kubelet_tree()
    _kill_in_container(tree, CONTAINER)
    watcher.rescan()
    deltas = watcher.poll_changes()
    assert [(d.cgroup.relpath, d.oom_kill) for d in deltas] == [(CONTAINER, 1)]
    watcher.close()


def test_oom_group_of_unwatched_and_hostile_paths(fake_v2: CgroupV2Tree, clock: FakeClock) -> None:
    watcher = _watcher(fake_v2, clock, inotify=False)
    fake_v2.path(POD).joinpath("memory.oom.group").write_text("1\n")
    assert watcher.oom_group(POD) is True  # a watched pod cgroup
    assert watcher.oom_group("/kubepods/../../etc") is None
    assert watcher.oom_group("/no/such/cgroup") is None
    fake_v2.path(CONTAINER2).joinpath("memory.oom.group").unlink()
    assert watcher.oom_group(CONTAINER2) is False  # a kernel before 4.19 has no such file
    watcher.close()


def test_inotify_sees_new_and_removed_containers_without_a_rescan(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=True)
    late = f"{POD}/{'e' * 64}"
    fake_v2.make(late)
    _wait_inotify(watcher)
    assert watcher.poll_changes() == []
    assert late in {cg.relpath for cg in watcher.cgroups()}
    shutil.rmtree(fake_v2.path(CONTAINER2))
    _wait_inotify(watcher)
    deltas = watcher.poll_changes()
    assert [(d.cgroup.relpath, d.vanished) for d in deltas] == [(CONTAINER2, True)]
    watcher.close()


def test_a_container_made_before_its_new_pod_is_under_watch_is_found(
    fake_v2: CgroupV2Tree, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the lab VM's 6.12 storm hit: the pod was listed empty, its container was
    made before the pod's inotify watch was in place, and no event ever told of it."""
    watcher = _watcher(fake_v2, clock, inotify=True)
    pod = "/kubepods/burstable/pod99999999-2222-3333-4444-555555555555"
    container = f"{pod}/{'f' * 64}"
    watch_dir = watcher._notifier.watch_dir

    def container_made_first(hierarchy: Any, relpath: str) -> None:
        if relpath == pod:
            fake_v2.make(container)
        watch_dir(hierarchy, relpath)

    monkeypatch.setattr(watcher._notifier, "watch_dir", container_made_first)
    fake_v2.make(pod)
    _wait_inotify(watcher)
    watcher.poll_changes()
    assert container in {cg.relpath for cg in watcher.cgroups()}
    watcher.close()


def test_rescan_of_one_named_cgroup_walks_only_its_new_part(
    fake_v2: CgroupV2Tree, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=False)
    walked: list[str] = []
    real_scan = watcher._scan

    def scan(hierarchy: Any, under: str) -> Any:
        walked.append(under)
        return real_scan(hierarchy, under)

    monkeypatch.setattr(watcher, "_scan", scan)
    new_pod = "/kubepods/burstable/pod11111111-2222-3333-4444-555555555555"
    fake_v2.make(new_pod)
    fake_v2.make(f"{new_pod}/{'f' * 64}")
    watcher.rescan(f"{new_pod}/{'f' * 64}")
    assert walked == [new_pod]
    assert f"{new_pod}/{'f' * 64}" in {cg.relpath for cg in watcher.cgroups()}
    watcher.rescan(CONTAINER)  # already watched: nothing to walk
    assert walked == [new_pod]
    watcher.close()


def test_whole_pod_vanished_after_a_kill_is_attributed_to_the_qos_level_at_the_rescan(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    watcher = _watcher(fake_v2, clock, inotify=False)
    watcher.poll_changes()
    shutil.rmtree(fake_v2.path(POD))
    for ancestor in ("/kubepods/burstable", "/kubepods"):
        fake_v2.events(ancestor, oom=1, oom_kill=1)
    clock.advance(3600.0)  # the periodic rescan, which re-reads every counter
    deltas = watcher.poll_changes()
    assert sorted((d.cgroup.relpath, d.oom_kill, d.vanished) for d in deltas) == [
        ("/kubepods/burstable", 1, False),
        (POD, 0, True),
        (CONTAINER, 0, True),
        (CONTAINER2, 0, True),
    ]
    watcher.close()


def test_next_due_is_the_poll_timer_only_when_something_is_polled(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    """The daemon's cgroup thread sleeps until `next_due_s()`: with inotify on v2 nothing
    is timed but the periodic rescan; polled counters are due once a poll interval."""
    watched = _watcher(fake_v2, clock, inotify=True)
    watched.poll_changes()
    assert watched.next_due_s() == clock.now + 3600.0
    polled = _watcher(fake_v2, clock, inotify=False)
    assert polled.next_due_s() <= clock.now  # never polled yet: due now
    polled.poll_changes()
    assert polled.next_due_s() == clock.now + 1.0
    clock.advance(1.0)
    fake_v2.events(CONTAINER, oom=1, oom_kill=1)
    assert [(d.cgroup.relpath, d.oom_kill) for d in polled.poll_changes()] == [(CONTAINER, 1)]
    watched.close()
    polled.close()


def test_a_memcg_made_before_its_limit_is_set_is_found_when_it_is(
    fake_v2: CgroupV2Tree, clock: FakeClock
) -> None:
    """Outside kubepods a memcg is watched once limited; its maker writes the limit just
    after mkdir, and so for the memcg it makes inside (the forecast bench's scratch root and
    its leak): the walk that came too early is walked again, not left to the 60 s rescan."""
    watcher = _watcher(fake_v2, clock, inotify=True)
    scratch, leak = "/scratch", "/scratch/leak"
    fake_v2.make(scratch)  # no limit yet
    _wait_inotify(watcher)
    watcher.poll_changes()
    assert scratch not in {cg.relpath for cg in watcher.cgroups()}
    assert watcher.next_due_s() <= clock.now + NEW_DIR_RECHECK_EVERY_S
    (fake_v2.path(scratch) / "memory.max").write_text(f"{256 << 20}\n")
    fake_v2.make(leak)  # its limit comes after the next walk
    clock.advance(0.3)
    watcher.poll_changes()
    (fake_v2.path(leak) / "memory.max").write_text(f"{96 << 20}\n")
    clock.advance(0.3)
    watcher.poll_changes()
    assert {scratch, leak} <= {cg.relpath for cg in watcher.cgroups()}
    fake_v2.make("/scratch/never-limited")
    _wait_inotify(watcher)
    watcher.poll_changes()
    clock.advance(NEW_DIR_RECHECK_S + 0.1)
    watcher.poll_changes()  # the rechecks end
    assert "/scratch/never-limited" not in {cg.relpath for cg in watcher.cgroups()}
    assert watcher.next_due_s() > clock.now + NEW_DIR_RECHECK_EVERY_S
    watcher.close()


def test_the_periodic_rescan_lists_no_directory_inotify_tells_of(
    fake_v2: CgroupV2Tree, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing every pod's directory each minute was ~45 % of the agent's idle CPU at 1,000
    containers: below kubepods a watched directory's children are the ones inotify told of.
    After lost events (an overflow) every directory is listed again; a container removed
    unnoticed still goes, by its counter read."""
    watcher = _watcher(fake_v2, clock, inotify=True)
    listed: list[str] = []
    children = discovery._children

    def recorded(fs_dir: str, rel: str, depth: int, kube_depth: int) -> list[Any]:
        listed.append(rel)
        return children(fs_dir, rel, depth, kube_depth)

    monkeypatch.setattr(discovery, "_children", recorded)
    clock.advance(3601.0)
    watcher.poll_changes()
    assert listed == [""]  # the root: a kubepods tree may appear anywhere below it
    shutil.rmtree(fake_v2.path(CONTAINER2))
    drain = watcher._notifier.drain
    monkeypatch.setattr(watcher._notifier, "drain", lambda: Drained(overflow=True))
    listed.clear()
    watcher.poll_changes()
    assert {POD, "/kubepods", "/kubepods/burstable"} <= set(listed)
    monkeypatch.setattr(watcher._notifier, "drain", drain)
    assert CONTAINER2 not in {cg.relpath for cg in watcher.cgroups()}
    watcher.close()
