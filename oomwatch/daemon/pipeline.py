"""The daemon's pipeline from decoded incidents to stored, published ones.

the forecast's changes -> recorded (`forecast_stage`: warnings stored, logged, shown);
decoded kills + counter deltas -> reconcile -> identity -> the cgroup at the kill (timeline,
sampled usage, oom.group, survival) -> enrichers (deferred, bounded) -> diagnosis (with the
workload's earlier kills) -> store (once per kill) -> sinks.  Every sink speaks from the one
diagnosis (`findings`, `recommendation`, `verdict`) that is stored and that `oomwatch
report` shows.  It does no I/O of its own: what it knows of the host comes in as values with
each call (`KernelTime` from the kernel log, `CgroupView` from the cgroup worker) and through
the adapters it is given, so it runs the same on the real kernel, in the demo and in tests.
Nothing here raises on input or on a sink error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from time import monotonic
from time import time as epoch_time

from oomwatch.cgroup_identity import annotate, container_cgroup
from oomwatch.daemon.cgroup_view import CgroupView
from oomwatch.daemon.checkpoint import restore_reconcile
from oomwatch.daemon.forecast_stage import ForecastBook
from oomwatch.daemon.observe import SurvivalRecheck, TimelineWait, fill_sampled_usage
from oomwatch.diagnosis.history import History
from oomwatch.incident import Incident, iso_epoch_s, iso_time
from oomwatch.reconcile import (
    CgroupNews,
    CounterKills,
    KernelTime,
    ReconcileState,
    is_logged_kernel_kill,
    reconcile,
)
from oomwatch.stages import Enricher, Sink
from oomwatch.store import Checkpoint, IncidentStore
from oomwatch.store.limits import capped

log = logging.getLogger("oomwatch.pipeline")


@dataclass(slots=True)
class PipelineStats:
    stored: int = 0
    duplicates: int = 0
    deferred: int = 0
    attributed: int = 0
    ambiguous: int = 0
    kmsg_missing: int = 0
    errors: int = 0


@dataclass(slots=True)
class _Deferred:
    incident: Incident
    deadline_s: float
    waiting_on: list[Enricher] = field(default_factory=list)


class Pipeline:
    """Turns kernel-log incidents and counter deltas into stored, published incidents."""

    def __init__(
        self,
        store: IncidentStore,
        sinks: Sequence[Sink],
        enrichers: Sequence[Enricher] = (),
        history: History | None = None,
        boot_id: str | None = None,
        node: str | None = None,
        *,
        forecasts: ForecastBook | None = None,
        enrich_wait_s: float = 5.0,
        wall_clock: Callable[[], float] = epoch_time,
        mono_clock: Callable[[], float] = monotonic,
    ) -> None:
        """What it writes to and what it stamps; what it learns of the host comes with each
        `process()` call.  `history`: the workload's earlier kills (None: none known);
        `forecasts`: records the forecast's changes each view brings (its `ForecastJoin`
        is one of the `enrichers`)."""
        self.store = store
        self.forecasts = forecasts
        self.sinks = list(sinks)
        self.enrichers = list(enrichers)
        self.boot_id = boot_id
        self.node = node
        self._enrich_wait_s = enrich_wait_s
        self._wall = wall_clock
        self._mono = mono_clock
        self._view = CgroupView()
        self.history = history if history is not None else History()
        self.state = ReconcileState()
        self._deferred: list[_Deferred] = []
        self.stats = PipelineStats()

    def restore(self, checkpoint: Checkpoint) -> None:
        """Resume what an earlier run of this boot still waited on (rises owed a report,
        claims, sightings, the kernel clock's offset); an unreadable part starts afresh."""
        try:
            self.state = restore_reconcile(checkpoint.reconcile, self._mono())
        except ValueError as exc:
            path = str(self.store.path)
            log.error("checkpoint_unreadable", extra={"path": path, "error": str(exc)})
            self.state = ReconcileState()
        resumed = {"cgroups": len(checkpoint.counters), "owed": len(self.state.rises)}
        log.info("checkpoint_resumed", extra={**resumed, "claims": len(self.state.claims)})

    @property
    def holding(self) -> bool:
        """Whether decoded kernel-log incidents are still waiting (not yet stored)."""
        deferred = self._deferred
        return bool(self.state.bare) or any(is_logged_kernel_kill(d.incident) for d in deferred)

    @property
    def waiting(self) -> bool:
        """Whether anything has a deadline that `process()` must be called for: held or
        deferred incidents, counter kills owed a report, log kills expecting a counter."""
        return bool(self._deferred) or not self.state.quiet

    def process(
        self,
        incidents: Sequence[Incident] = (),
        news: CgroupNews | Sequence[CounterKills] = (),
        time: KernelTime | None = None,
        view: CgroupView | None = None,
    ) -> None:
        """Take new incidents and cgroup news (counter rises, OOM notifications, pids seen)
        with the kernel log's clock as of now (`KernelLog.time`; None: stamps on
        CLOCK_MONOTONIC, read through now) and the cgroups as the worker last published
        them (`CgroupWorker.take_news`; None: the view given last); store and publish
        what is ready.

        Call it on every turn of the loop, even with nothing new: deadlines advance here.
        """
        now_mono = self._mono()
        now_wall = self._wall()
        if view is not None:
            self._view = view
            if self.forecasts is not None:  # first: a kill taken now sees its warning
                self.forecasts.take(view.forecast)
        # A kill just read, or one waiting for its counter, goes before the deferred ones.
        urgent = bool(self.state.bare) or any(is_logged_kernel_kill(i) for i in incidents)
        self._retry_deferred(now_mono, urgent)
        for incident in incidents:
            self._stamp(incident, now_wall, now_mono)
        try:
            result = reconcile(
                self.state,
                incidents,
                news,
                now_mono,
                facts=self._view.facts,
                kernel_time=time,
                wall_offset_s=now_wall - now_mono,
            )
        except Exception:  # a bug here must not lose the incidents: pass them on unmatched
            log.exception(
                "reconcile_failed", extra={"consequence": "incidents passed on unmatched"}
            )
            self.stats.errors += 1
            ready = list(incidents)
        else:
            self.state = result.state
            self.stats.attributed += result.attributed
            self.stats.ambiguous += result.ambiguous
            self.stats.kmsg_missing += result.missing
            if result.repeats:
                log.info(
                    "group_kill_line_after_its_report",
                    extra={"lines": result.repeats, "consequence": "counted with its group kill"},
                )
            if result.late_lines:
                log.info(
                    "kill_line_after_its_report",
                    extra={"lines": result.late_lines, "consequence": "counted with its report"},
                )
            ready = result.ready
        for incident in ready:
            self._stamp(incident, now_wall, now_mono)
            self._prepare(incident, now_mono)

    def drain(self) -> None:
        """At shutdown: store everything still waiting with what is known now.

        What the reconciliation still expects (counters, reports) stays in `state` for the
        checkpoint a restart resumes from."""
        for waiting in self.state.waiting_incidents:
            self._prepare(waiting, self._mono(), defer=False)
        self.state = replace(self.state, bare=())
        deferred, self._deferred = self._deferred, []
        for item in deferred:
            self._commit(item.incident)

    # --- stages ---

    def _stamp(self, incident: Incident, now_wall: float, now_mono: float) -> None:
        """Daemon facts: boot, node, when we saw it, and the kill's wall time from its stamp."""
        incident.boot_id = incident.boot_id or self.boot_id
        incident.node = incident.node or self.node
        incident.detected_at = incident.detected_at or iso_time(now_wall)
        if incident.wall_time is None and incident.kernel_time_s is not None:
            # kmsg stamps are CLOCK_MONOTONIC; servers do not suspend, so the offset holds.
            incident.wall_time = iso_time(now_wall - (now_mono - incident.kernel_time_s))

    def _prepare(self, incident: Incident, now_mono: float, defer: bool = True) -> None:
        looks: list[Enricher] = []
        try:
            incident = annotate(incident)
            if is_logged_kernel_kill(incident) or incident.kmsg_missing:
                looks = self._observe_cgroup(incident, now_mono)
        except Exception:
            log.exception("annotate_failed", extra={"consequence": "stored as decoded"})
            self.stats.errors += 1
        waiting = self._enrich(incident, self.enrichers) + looks
        if waiting and defer:
            self.stats.deferred += 1
            self._deferred.append(_Deferred(incident, now_mono + self._enrich_wait_s, waiting))
        else:
            self._commit(incident)

    def _observe_cgroup(self, incident: Incident, now_mono: float) -> list[Enricher]:
        """Freeze the memory timeline (at the kill), read oom.group and check whether the
        container outlived the kill; returns the later looks it needs: the timeline of a
        container the view has not snapshotted yet, the second look at a survivor."""
        cgroup = incident.task_memcg or incident.group_cgroup
        if cgroup is None:
            return []
        container = container_cgroup(cgroup)
        view = self._view
        looks: list[Enricher] = []
        if incident.timeline is None:
            at_s = iso_epoch_s(incident.wall_time) or self._wall()
            if view.timeline_due(container):
                view.request_timeline(container)
                looks.append(TimelineWait(lambda: self._view, container, at_s))
            else:
                incident.timeline = view.timeline(container, at_s)
        fill_sampled_usage(incident)
        if incident.oom_group_enabled is None:
            incident.oom_group_enabled = view.oom_group(container)
        if incident.container_survived is None:
            victims = frozenset(v.pid for v in incident.victims)
            incident.container_survived = view.survived(container, victims)
            if incident.container_survived:
                looks.append(
                    SurvivalRecheck(view.survived, container, victims, now_mono, self._mono)
                )
        return looks

    def _enrich(self, incident: Incident, enrichers: Sequence[Enricher]) -> list[Enricher]:
        """Run enrichers; return those that asked to be asked again later."""
        waiting: list[Enricher] = []
        for enricher in enrichers:
            try:
                if not enricher.enrich(incident):
                    waiting.append(enricher)
            except Exception:
                log.exception("enricher_failed", extra={"enricher": type(enricher).__name__})
                self.stats.errors += 1
        return waiting

    def _retry_deferred(self, now_mono: float, urgent: bool = False) -> None:
        """Commit the deferred incidents that are complete or out of time.  `urgent` (a kill
        is being read or waits for its counter): only those out of time.  That kill's record
        is the latency the agent promises; these wait for enrichers by design, and a burst of
        them committed in its turn (seven kills' survival rechecks ending together) put about
        10 ms into it (bench/RESULTS.md, issue 26)."""
        still: list[_Deferred] = []
        for item in self._deferred:
            if urgent and now_mono < item.deadline_s:
                still.append(item)
                continue
            item.waiting_on = self._enrich(item.incident, item.waiting_on)
            if item.waiting_on and now_mono < item.deadline_s:
                still.append(item)
            else:
                self._commit(item.incident)
        self._deferred = still

    def _commit(self, incident: Incident) -> None:
        """Diagnose (from the whole report), then hold only the capped form: store it once,
        then publish; a store failure still publishes (better than silence), and so does a
        failed diagnosis (the facts without a verdict)."""
        try:
            incident = self.history.diagnose(incident)
        except Exception:
            log.exception("diagnose_failed", extra={"consequence": "stored undiagnosed"})
            self.stats.errors += 1
        incident = capped(incident)
        try:
            if not self.store.add(incident):
                self.stats.duplicates += 1
                return
        except Exception:
            log.exception("store_failed", extra={"consequence": "published anyway"})
            self.stats.errors += 1
        self.stats.stored += 1
        self.history.remember(incident)
        for sink in self.sinks:
            try:
                sink.emit(incident)
            except Exception:
                log.exception("sink_failed", extra={"sink": type(sink).__name__})
                self.stats.errors += 1
