"""The cgroup watcher, the sampler and the `CgroupView` the pipeline reads, on the real kernel.

What tests/cgroups proves on written file trees, proven against the counters as the kernel
keeps them.  The tests that take `kernel_tree` run on both cgroup versions (v1 on this
machine, v2 in the lab VM, tests/vm): the watcher's deltas are its own facts, and what the
pipeline asks at a kill (oom.group, who survived, the memory window, the limits) is asked of
the view a `CgroupWorker` publishes, as the pipeline does.  v1's OOM eventfd and usage
thresholds exist only there, memory.oom.group and hierarchical counters only on v2.  Other
tests provoke kills on this machine at the same time, so only our own scratch tree is looked
at; counters do not depend on the kernel's report rate limit.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from support import settled, until
from support.kernel_record import record, snapshot
from support.kernel_runs import container as kubelet_container
from support.kernel_tree import KernelTree

from oomwatch import lab
from oomwatch.cgroups import CgroupWatcher, CounterDelta, TimelineSampler, WatchedCgroup
from oomwatch.cgroups.attention import UsageThresholds
from oomwatch.daemon import cgroup_thread
from oomwatch.daemon.cgroup_view import CgroupView
from oomwatch.daemon.cgroup_worker import CgroupWorker
from oomwatch.incident import TimelineSample
from oomwatch.sinks.log import get_logger

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

MIB = 1 << 20
ROOT = "/sys/fs/cgroup"
Row = tuple[str, int, int, int, bool]
# Nothing more comes once the counters stayed this long unchanged (the watcher polls every
# 0.2 s here, and reads at once on inotify or the OOM eventfd).
QUIET_S = 1.0
POLL_S = 1.0  # the bracket test's timed poll, which the OOM eventfd must beat


class Watching:
    """Watchers and workers of one test over this machine's hierarchy, closed afterwards."""

    def __init__(self) -> None:
        self._close: list[Callable[[], None]] = []

    def watcher(self, **kwargs: object) -> CgroupWatcher:
        options: dict[str, object] = {"poll_interval_s": 0.2, "rescan_interval_s": 3600.0}
        watcher = CgroupWatcher([ROOT], **(options | kwargs))  # type: ignore[arg-type]
        self._close.append(watcher.close)
        return watcher

    def worker(
        self, watcher: CgroupWatcher, sampler: TimelineSampler | None = None
    ) -> CgroupWorker:
        """A worker on `watcher`, not started: its `view` is what the pipeline gets first."""
        worker = CgroupWorker(
            lambda: watcher,  # the test's: it reads the watcher too, and closes it last
            sampler or TimelineSampler(interval_s=0.25, window_s=60.0),
            on_samples=lambda samples, now, view: None,
            wake=lambda: None,
            log=get_logger(),
        )
        self._close[:0] = [worker.stop]  # closes its sampler (and the watcher) first
        return worker

    def view(self, watcher: CgroupWatcher) -> CgroupView:
        return self.worker(watcher).view

    def close(self) -> None:
        for close in self._close:
            close()


@pytest.fixture
def watching() -> Iterator[Watching]:
    made = Watching()
    yield made
    made.close()


def _rows(deltas: list[CounterDelta]) -> list[Row]:
    return [(d.cgroup.relpath, d.oom, d.oom_kill, d.oom_group_kill, d.vanished) for d in deltas]


def _ours(watcher: CgroupWatcher, scratch: lab.ScratchMemcg) -> Callable[[], list[CounterDelta]]:
    """Everything the watcher reported in our tree so far (each call polls it once more)."""
    seen: list[CounterDelta] = []
    prefix = scratch.relpath + "/"

    def poll() -> list[CounterDelta]:
        seen.extend(d for d in watcher.poll_changes() if d.cgroup.relpath.startswith(prefix))
        return list(seen)

    return poll


def _settled(poll: Callable[[], list[CounterDelta]], timeout_s: float = 30.0) -> list[CounterDelta]:
    """What the watcher reported once something came and then nothing more for `QUIET_S`."""
    until("a counter delta", lambda: poll() or None, timeout_s, interval_s=0.05)
    return settled("the counter deltas", poll, QUIET_S, timeout_s, interval_s=0.05)


def _kill(memcg: lab.Memcg, comm: str) -> int:
    hog = lab.spawn_hog(memcg, mode="anon", mb=200, comm=comm)
    assert hog.wait(timeout=60) == -9
    return hog.pid


def _ooms(kernel_tree: KernelTree) -> int:
    """The OOMs a kill's memcg counts beside the kill: v2's memory.events `oom`, v1 none."""
    return 1 if kernel_tree.counts_events else 0


def test_a_real_kill_wakes_the_watcher_and_is_one_delta_at_the_container(
    kernel_tree: KernelTree, watching: Watching
) -> None:
    scratch = kernel_tree.scratch
    container, pod_uid = kubelet_container(scratch, limit_mb=64)[:2]
    watcher = watching.watcher()
    view = watching.view(watcher)
    poll = _ours(watcher, scratch)
    assert settled("a baseline", poll, 0.3, 10.0) == []  # nothing more
    levels = {
        cg.relpath: cg.identity.level
        for cg in watcher.cgroups()
        if cg.relpath.startswith(scratch.relpath + "/")
    }
    assert levels[container.relpath] == "container"
    assert sorted(levels.values()) == ["container", "node", "pod", "qos"]
    assert container.relpath in view.watched
    _kill(container, "kt-watched")
    assert container.oom_kill_count() == 1
    # the kernel wakes the worker: inotify on v2's memory.events, the eventfd on v1's
    # memory.oom_control
    fds = [fd for fd in (watcher.fileno(), watcher.witness.fileno()) if fd is not None]
    assert select.select(fds, [], [], 5.0)[0], "neither inotify nor the OOM eventfd woke"
    deltas = _settled(poll)
    assert _rows(deltas) == [(container.relpath, _ooms(kernel_tree), 1, 0, False)]
    assert deltas[0].cgroup.identity.level == "container"
    assert deltas[0].cgroup.identity.pod_uid == pod_uid
    assert view.oom_group(container.relpath) is False
    assert view.survived(container.relpath, frozenset()) is False  # the hog was all of it


def test_pod_limit_shows_the_kill_at_the_container(
    kernel_tree: KernelTree, watching: Watching
) -> None:
    """On v2 the OOM shows at the pod, whose limit it was; v1 counts only the kill."""
    scratch = kernel_tree.scratch
    container, _ = kubelet_container(scratch, pod_limit_mb=64, limit_mb=None)[:2]
    pod = container.relpath.rsplit("/", 1)[0]
    watcher = watching.watcher()
    poll = _ours(watcher, scratch)
    assert settled("a baseline", poll, 0.3, 10.0) == []
    before = snapshot(scratch)
    _kill(container, "kt-podlimit")
    deltas = _settled(poll)
    if kernel_tree.records_fixtures:
        record(
            "watcher-pod-limit",
            [],
            scratch,
            before,
            container=container.relpath,
            pod=pod,
            deltas=_rows(deltas),
        )
    expected = [(container.relpath, 0, 1, 0, False)]
    if kernel_tree.counts_events:
        expected.append((pod, 1, 0, 0, False))
    assert sorted(_rows(deltas)) == sorted(expected)


def test_a_container_made_after_start_is_found_and_its_kill_counted_once(
    kernel_tree: KernelTree, watching: Watching
) -> None:
    scratch = kernel_tree.scratch
    first, _ = kubelet_container(scratch, limit_mb=64)[:2]
    watcher = watching.watcher()
    poll = _ours(watcher, scratch)
    assert settled("a baseline", poll, 0.3, 10.0) == []
    pod = next(m for m in scratch.memcgs() if m.relpath == first.relpath.rsplit("/", 1)[0])
    late = pod.create_child(f"cri-containerd-{'e' * 64}.scope", 48 * MIB)

    def found() -> bool | None:
        poll()  # the pod's directory watch reports it
        return True if late.relpath in {cg.relpath for cg in watcher.cgroups()} else None

    until("the new container watched", found, 10.0, interval_s=0.05)
    _kill(late, "kt-late")
    assert _rows(_settled(poll)) == [(late.relpath, _ooms(kernel_tree), 1, 0, False)]


def test_a_child_worker_killed_while_the_container_lives(
    kernel_tree: KernelTree, watching: Watching
) -> None:
    scratch = kernel_tree.scratch
    container, _ = kubelet_container(scratch, limit_mb=64)[:2]
    watcher = watching.watcher()
    view = watching.view(watcher)
    poll = _ours(watcher, scratch)
    hog = lab.spawn_hog(container, mode="child-worker", mb=200, comm="kt-worker", linger_s=60.0)
    hog.wait_for("child-exit", timeout_s=60)
    [child] = hog.child_pids
    deltas = _settled(poll)
    assert [(d.cgroup.relpath, d.oom_kill) for d in deltas] == [(container.relpath, 1)]
    assert hog.poll() is None  # the parent (the container's "PID 1") lives on
    assert view.survived(container.relpath, frozenset({child})) is True
    hog.kill()
    hog.wait(timeout=10)
    survived = lambda: view.survived(container.relpath, frozenset({child})) is False or None  # noqa: E731
    until("the container empty", survived, 10.0, interval_s=0.05)


def test_the_view_holds_the_limit_and_freezes_a_growing_window(
    kernel_tree: KernelTree, watching: Watching
) -> None:
    """The worker samples; the pipeline reads the limits and, at a kill, the memory window
    before it from the view (memory.current and `anon` on v2, usage and `rss` on v1)."""
    scratch = kernel_tree.scratch
    container, _ = kubelet_container(scratch, limit_mb=200)[:2]
    watcher = watching.watcher(use_inotify=False, include_limited=False)
    worker = watching.worker(watcher, TimelineSampler(interval_s=0.25, window_s=60.0))
    worker.start()
    # 8 MiB every 0.25 s, up to 96 MiB (well under the limit)
    hog = lab.spawn_hog(
        container, mode="anon", mb=96, step_mb=8, step_interval_s=0.25, comm="kt-leak"
    )

    def limit_known() -> int | None:
        return worker.take_news()[1].limits_bytes.get(container.relpath)

    assert until("the container's limit in the view", limit_known, 30.0) == 200 * MIB
    assert hog.wait_for("holding", timeout_s=60) == "holding"

    def window() -> tuple[int, int] | None:
        timeline = worker.take_news()[1].timeline(container.relpath, time.time())
        if timeline is None or not timeline.samples:
            return None
        last = timeline.samples[-1]
        return (len(timeline.samples), last.usage_bytes) if last.usage_bytes >= 96 * MIB else None

    until("a sample of the grown container", window, 30.0)
    timeline = worker.view.timeline(container.relpath, time.time())
    assert timeline is not None and len(timeline.samples) >= 2
    assert timeline.samples[0].limit_bytes == 200 * MIB
    assert timeline.growth_bytes_per_second is not None and timeline.growth_bytes_per_second > 0
    assert timeline.peak_bytes is not None and timeline.peak_bytes >= 96 * MIB
    last = timeline.samples[-1]
    assert last.anon_bytes is not None and last.anon_bytes >= 90 * MIB


def test_group_kill_counts_every_kill_line_and_one_group_kill(
    scratch_v2: lab.ScratchMemcg, watching: Watching
) -> None:
    container, _ = kubelet_container(scratch_v2, limit_mb=64)[:2]
    container.set_oom_group()
    peer = lab.spawn_hog(container, "idle", mb=4, comm="kt-peer")
    assert peer.wait_for("holding") == "holding"
    watcher = watching.watcher()
    view = watching.view(watcher)
    poll = _ours(watcher, scratch_v2)
    assert settled("a baseline", poll, 0.3, 10.0) == []
    _kill(container, "kt-group")
    assert peer.wait(10) == -9
    # two processes, three kills counted: the primary once as victim, once as member
    assert _rows(_settled(poll)) == [(container.relpath, 1, 3, 1, False)]
    assert view.oom_group(container.relpath) is True
    assert view.survived(container.relpath, frozenset()) is False


def test_container_removed_after_its_kill_is_attributed_to_the_pod_once(
    scratch_v2: lab.ScratchMemcg, watching: Watching
) -> None:
    """Kubelet removes a dead container's cgroup quickly: the pod's hierarchical counters
    still show the kill, and the container shows as vanished (inotify IN_IGNORED)."""
    container, _ = kubelet_container(scratch_v2, limit_mb=64)[:2]
    pod = container.relpath.rsplit("/", 1)[0]
    watcher = watching.watcher(use_inotify=False)  # read only after the removal
    view = watching.view(watcher)
    poll = _ours(watcher, scratch_v2)
    assert settled("a baseline", poll, 0.3, 10.0) == []
    _kill(container, "kt-removed")
    container.fs_path.rmdir()
    watcher.rescan()
    assert sorted(_rows(_settled(poll))) == sorted(
        [(pod, 1, 1, 0, False), (container.relpath, 0, 0, 0, True)]
    )
    # the pipeline asks the view about a gone container: unknown, not "nobody survived"
    assert view.oom_group(container.relpath) is None
    assert view.survived(container.relpath, frozenset()) is None


def test_the_oom_notification_and_the_counter_bracket_the_kill_to_milliseconds(
    scratch: lab.ScratchMemcg, watching: Watching
) -> None:
    """The eventfd on v1's memory.oom_control fires when the OOM begins, before the kill
    line; the watcher then reads the counter every 2 ms, so the rise it reports brackets the
    kill's own kernel timestamp; the hog's pid was seen in the cgroup meanwhile."""
    container, _ = kubelet_container(scratch, limit_mb=32)[:2]
    watcher = watching.watcher(poll_interval_s=POLL_S, include_limited=False)
    assert watcher.witness.failure is None, watcher.witness.failure
    assert container.relpath in watcher.witness.watched_since()
    poll = _ours(watcher, scratch)
    poll()
    with lab.KmsgTail() as tail:
        hog = lab.spawn_hog(container, mode="anon", mb=200, comm="kt-notify", step_mb=1)
        deltas: list[CounterDelta] = []
        deadline = time.monotonic() + 10
        while not deltas and time.monotonic() < deadline:
            due = max(0.0, watcher.next_due_s() - time.monotonic())
            witness_fd = watcher.witness.fileno()
            assert witness_fd is not None  # v1 eventfds are registered here
            select.select([witness_fd], [], [], min(due, 0.05))  # as the worker
            deltas = poll()
        assert hog.wait(timeout=30) == -9
        records = tail.collect(lambda r: f"Killed process {hog.pid} ".encode() in r, 5.0)
    [delta] = deltas
    [killed] = [r for r in records if f"Killed process {hog.pid} ".encode() in r]
    kill_s = int(killed.split(b";", 1)[0].split(b",")[2]) / 1e6  # kmsg µs, local_clock
    signals = [s for s in watcher.witness.signals if s.cgroup == container.relpath]
    assert signals
    signal = signals[0]
    # The eventfd fires when the OOM begins, so the drain that still found it quiet came
    # before the kill line's stamp (50 ms: how late a busy machine may let the thread read
    # the clock after a drain).  The rise is dated between two reads around the stamp, and by
    # the close watch, not the 1 s poll: the bound is half that poll, what it distinguishes,
    # not a speed (bench/RESULTS.md has the widths measured).
    assert signal.after_s is not None and signal.after_s <= kill_s + 0.05
    print(f"notification drained {1000 * (signal.by_s - kill_s):+.1f} ms from the kill")
    assert signal.by_s - kill_s < POLL_S / 2
    assert delta.since_s is not None
    assert delta.since_s - 0.05 <= kill_s <= delta.observed_at_s + 0.05
    width_s = delta.observed_at_s - delta.since_s
    print(f"kill dated within {width_s * 1000:.1f} ms")
    assert width_s < POLL_S / 2
    assert hog.pid in {s.pid for s in watcher.witness.sightings}


@pytest.mark.parametrize("release", ["turned", "request_pass"])
def test_an_oom_notification_rings_the_loop_for_its_report_before_the_counter_pass(
    scratch: lab.ScratchMemcg, monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    """The kernel wakes /dev/kmsg readers only at the printing CPU's next tick, while v1's
    OOM eventfd wakes the worker at once: so the worker, once it has read the notification's
    pids, rings the loop for the report (`take_oom_begun`) and its counter pass waits until
    the loop says it has read it (`turned`) or asks for the pass (`request_pass`: a bare
    kill line waits on it), or `REPORT_FIRST_S` (widened here, so this thread's reading the
    queue is surely inside it)."""
    monkeypatch.setattr(cgroup_thread, "REPORT_FIRST_S", 30.0)
    container, _ = kubelet_container(scratch, limit_mb=32)[:2]
    rung, sampled = threading.Event(), threading.Event()

    def on_samples(samples: list[tuple[WatchedCgroup, TimelineSample]], *_: object) -> None:
        if any(cg.relpath == container.relpath for cg, _ in samples):
            sampled.set()  # the container has a window to publish

    worker = CgroupWorker(
        lambda: CgroupWatcher([ROOT], poll_interval_s=0.2, rescan_interval_s=3600.0),
        TimelineSampler(interval_s=0.25, window_s=60.0),
        on_samples=on_samples,
        wake=rung.set,
        log=get_logger(),
    )
    worker.start()

    def signalled() -> bool:
        news, _ = worker.take_news()
        return news is not None and any(s.cgroup == container.relpath for s in news.signals)

    try:
        assert sampled.wait(10.0), "the worker's first sample pass"
        assert container.relpath in worker.view.watched
        signalled()
        hog = lab.spawn_hog(container, mode="anon", mb=200, comm="kt-ring", step_mb=1)
        assert hog.wait(timeout=30) == -9
        until("the bell for the report", lambda: worker.take_oom_begun() or None, 10.0)
        assert not signalled()  # the counter pass waits for the loop
        assert container.relpath in worker.view.timelines  # its window is published first
        getattr(worker, release)()
        until("the notification's batch", lambda: signalled() or None, 5.0)
    finally:
        worker.stop()


def test_a_usage_threshold_wakes_the_sampler_when_a_calm_container_nears_its_limit(
    scratch: lab.ScratchMemcg, watching: Watching
) -> None:
    """The attentive sampler reads a calm container every 10 s; the kernel's threshold at
    half its limit (cgroup.event_control on v1's memory.usage_in_bytes) tells it at once
    that the container rose, and from then on it is sampled every interval."""
    container, _ = kubelet_container(scratch, limit_mb=64)[:2]
    watcher = watching.watcher(use_inotify=False, include_limited=False)
    sampler = TimelineSampler(interval_s=1.0, cold_interval_s=10.0, thresholds=UsageThresholds())
    try:
        [cg] = [c for c in watcher.cgroups() if c.relpath == container.relpath]
        assert len(sampler.sample([cg], time.time())) == 1
        assert sampler.arm_thresholds(16) == 1  # armed with its limit
        assert sampler.thresholds is not None
        assert sampler.thresholds.failure is None, sampler.thresholds.failure
        assert len(sampler.thresholds) == 1
        lab.spawn_hog(container, mode="anon", mb=40, step_mb=8, comm="kt-rise", linger_s=5.0)
        ready, _, _ = select.select([sampler.thresholds.fileno()], [], [], 30.0)
        assert ready, "no threshold notification"
        assert sampler.thresholds.crossed() == [container.relpath]
        sampler.attend(container.relpath, time.time(), 60.0)
        [(_, sample)] = sampler.sample([cg], time.time())  # due at once, not in 10 s
        assert sample.usage_bytes >= 32 * MIB
        assert sampler.hot(time.time()) == 1
    finally:
        sampler.close()
