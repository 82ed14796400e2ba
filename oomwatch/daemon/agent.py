"""The node agent's event loop: one poll() over the kernel log, counter news and a timer.

This is the adapter layer: it opens the kernel log, the cgroup worker (which makes and runs
the cgroup watcher, the sampler and the forecast on its own thread), the store, the metrics
server and (unless standalone) Kubernetes, and feeds what they produce to the `Pipeline`.
The loop never dies on input: a bad record, a vanished cgroup or a failing sink is logged
and the loop goes on.  SIGTERM and SIGINT stop it cleanly (pending incidents stored,
checkpoint saved).  The checkpoint (kmsg cursor, the counter levels every recorded kill
explains, what reconciliation waits on) is saved together, so a restart on the same boot
records the kills counted while it was down and attributes replayed header-less kills by
their counters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import select
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

from oomwatch.cgroups import CgroupWatcher
from oomwatch.daemon import http_server as http
from oomwatch.daemon import wiring
from oomwatch.daemon.cgroup_channel import REPORT_FIRST_S
from oomwatch.daemon.cgroup_worker import CgroupWorker, attentive_sampler
from oomwatch.daemon.checkpoint import Checkpointer
from oomwatch.daemon.config import DaemonConfig
from oomwatch.daemon.forecast_stage import ForecastBook
from oomwatch.daemon.heartbeat import Heartbeat
from oomwatch.daemon.loop_inbox import LoopInbox
from oomwatch.daemon.pipeline import Pipeline
from oomwatch.enrichers import EnricherParts, discover, make_enrichers
from oomwatch.incident import Incident
from oomwatch.reconcile import CgroupNews, is_logged_kernel_kill
from oomwatch.sinks.log import LogSink, get_logger
from oomwatch.sinks.metrics import Metrics
from oomwatch.sources.kernel_log import KernelLog
from oomwatch.stages import FrameworkSource, KubeLink, Sink
from oomwatch.store import IncidentStore
from oomwatch.store.wal import WalCheckpoints

MAX_WAIT_S = 0.25  # while the pipeline waits on deadlines, they are checked this often
# While a report is open or due (`cgroup_channel.REPORT_FIRST_S`) the kernel log is looked at
# this often: the kernel wakes its readers only at the printing CPU's next tick.
OPEN_REPORT_POLL_S = 0.001
HEARTBEAT_STALE_S = 30.0
IDLE_WAIT_MAX_S = 5.0  # an idle loop still beats well inside HEARTBEAT_STALE_S
FORCED_RESCAN_MIN_S = 0.25
RESCANNED_FOR_MAX = 1024
PRUNE_INTERVAL_S = 3600.0  # age-based retention also on a node that records nothing


class Agent:
    """Wires the sources, the pipeline and the sinks, and runs the poll loop."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.log = get_logger()
        enricher_order = discover()  # a misplaced enricher module stops start-up, named
        self._stop = threading.Event()
        # What other threads are given of the loop: the inbox, the metrics, the store's
        # one locked read and gauges' labels; never a method of this object.
        self._inbox = LoopInbox()
        self._heartbeat = Heartbeat()
        self.store = IncidentStore(
            config.state_dir,
            max_incidents=config.max_incidents,
            max_age_s=config.max_age_days * 86400.0,
        )
        self.boot_id = wiring.boot_id(self.log)
        self.checkpoints = Checkpointer(self.store, self.boot_id, self.log)
        checkpoint = self.checkpoints.load()
        self.metrics = Metrics()
        gauges = wiring.MemoryGauges(self.metrics)
        self.kmsg = KernelLog(
            config.kmsg_path,
            self.store.load_cursor(),
            self.boot_id,
            self.log,
            on_lost=self.metrics.add_kmsg_lost,
        )
        self.cgroups = CgroupWorker(
            functools.partial(
                CgroupWatcher,
                list(config.cgroup_roots),
                poll_interval_s=1.0,
                prior_counters=checkpoint.counters if checkpoint is not None else None,
            ),
            attentive_sampler(config.sample_interval_s, config.timeline_window_s),
            on_samples=gauges,
            wake=self._inbox.wake,
            log=self.log,
            forecast_horizon_s=config.forecast_horizon_s,
        )
        self._view = self.cgroups.view  # (loop thread) the cgroups as last taken with news
        self._report_due_until_s = 0.0  # (loop thread) an OOM began: its report due until then
        self.kube: KubeLink | None = (
            None
            if config.standalone
            else wiring.connect_kube(config, self._inbox.submit, self.store.kills_in, self.log)
        )
        self._labels_for = wiring.labels_for(self.kube)
        gauges.labels_for = self._labels_for  # before the worker's thread starts
        # Metrics before the log line: once the line is out, the kill is stored and counted.
        sinks: list[Sink] = [self.metrics, LogSink(self.log)]
        if self.kube is not None:
            sinks.append(self.kube.sink)
        forecasts = ForecastBook(
            store=self.store,
            metrics=self.metrics,
            logger=self.log,
            labels_for=self._labels_for,
            warn_pod=self.kube.warnings.warn if self.kube is not None else None,
        )
        probe = wiring.open_probe(config, self.log)
        self.framework_source: FrameworkSource | None = probe[1] if probe else None
        parts = EnricherParts(config, self.kube, forecasts, probe[0] if probe else None, self.log)
        self.enrichers = make_enrichers(parts, enricher_order)
        history = wiring.history(self.store, self.log)
        node, wait_s = config.node_name, config.enrich_wait_s
        self.pipeline = Pipeline(
            self.store,
            sinks,
            self.enrichers,
            history,
            self.boot_id,
            node,
            forecasts=forecasts,
            enrich_wait_s=wait_s,
        )
        if checkpoint is not None:
            self.pipeline.restore(checkpoint)
            if self.pipeline.state.kernel_offset_s is not None:
                self.kmsg.clock.seed(self.pipeline.state.kernel_offset_s)
        self.metrics_address: tuple[str, int] | None = None
        self._health_server: http.LoopServer | None = None
        self._next_prune_mono = time.monotonic() + PRUNE_INTERVAL_S
        self._next_forced_rescan = 0.0
        self._rescanned_for: OrderedDict[str, None] = OrderedDict()
        self._rescan_pending = False
        self._wal: WalCheckpoints | None = None  # checkpoints off the loop's commits (run)

    # --- API for other threads ---

    def stop(self) -> None:
        """(Any thread) end the loop; it stores what is pending and saves the checkpoint."""
        self._stop.set()
        self._inbox.wake()

    # --- the loop ---

    def run(self) -> int:
        """Run until stopped; returns the process exit code (1: a port is taken)."""
        self.cgroups.start()
        self._wal = self.store.checkpoint_in_background()
        failed = self._serve()
        if failed is not None:
            self.log.error("startup_failed", error=failed)
            self._shutdown()
            return 1
        assert self.metrics_address is not None
        if self.kube is not None:
            self.kube.start()
        self.cgroups.request_pass()  # kills a restored checkpoint waits on take part after it
        self.log.info(
            "started",
            node=self.config.node_name,
            metrics_address=_host_port(*self.metrics_address),
            health_address=_host_port(*self.config.health_address)
            if self.config.health_address
            else None,
            state_dir=str(self.config.state_dir),
            cgroup_hierarchies=[h.mount_path for h in self._view.hierarchies],
            cgroup_versions=[h.version for h in self._view.hierarchies],
            cgroups_watched=len(self._view.watched),
            oom_notifications=self._view.oom_notify_failure or "watched",
            standalone=self.kube is None,
            boot_id=self.boot_id,
        )
        try:
            self._loop()
        finally:
            self._shutdown()
        return 0

    def _serve(self) -> str | None:
        """Start `/metrics` (+ `/healthz`) and the health-only port; None, or what failed."""
        config = self.config
        address = _host_port(config.metrics_host, config.metrics_port)
        healthy = wiring.health(
            self._heartbeat, HEARTBEAT_STALE_S, self.cgroups.liveness(), self.kube
        )
        try:
            self.metrics_address = self.metrics.serve(
                config.metrics_host, config.metrics_port, healthy
            )
            if config.health_address is not None:
                address = _host_port(*config.health_address)
                routes = {"/healthz": http.health_route(healthy)}
                self._health_server = http.serve(*config.health_address, routes, "oomwatch-health")
        except OSError as exc:
            return f"cannot serve on {address}: {exc}"
        return None

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self._inbox.fileno(), select.POLLIN)
        kmsg_fd = self.kmsg.fileno()
        if kmsg_fd is not None:
            poller.register(kmsg_fd, select.POLLIN)
        next_tick = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            timeout_s = min(IDLE_WAIT_MAX_S, max(0.0, next_tick - now))
            if self.pipeline.waiting or self._rescan_pending:
                timeout_s = min(timeout_s, MAX_WAIT_S)
            if self.kmsg.open or now < self._report_due_until_s:
                timeout_s = min(timeout_s, OPEN_REPORT_POLL_S)
            flush_at = self.kmsg.flush_at()
            if flush_at is not None:
                timeout_s = min(timeout_s, max(0.0, flush_at - now))
            polled_s = time.monotonic()
            ready = {fd for fd, _ in poller.poll(timeout_s * 1000.0)}
            if kmsg_fd is not None and kmsg_fd not in ready:
                self.kmsg.note_quiet(polled_s)  # nothing was unread then (or since)
            if self._inbox.fileno() in ready:
                self._inbox.clear()
            self._turn(ready)
            if not self.kmsg.open and time.monotonic() >= self._report_due_until_s:
                self.cgroups.turned()
            now = time.monotonic()
            if now >= next_tick and not self.kmsg.open:
                self._tick()
                next_tick = now + self.config.sample_interval_s
            self._heartbeat.beat()

    def _turn(self, ready: set[int]) -> None:
        """One loop turn: the kernel log first (latency), then counter news.  With news the
        log is read too: a kill the counters show has printed its line by then, and a kill
        is placed only once the lines of every kill its counters show are in."""
        news, self._view = self.cgroups.take_news()
        if self.cgroups.take_oom_begun():
            self._report_due_until_s = time.monotonic() + REPORT_FIRST_S
        incidents: list[Incident] = []
        try:
            readable = self.kmsg.fileno() in ready or news is not None
            read = self.kmsg.take(read=readable, groups=self._view)
            incidents += read.incidents
            if read.incidents:
                self._report_due_until_s = 0.0
            kernel = read.time
        except Exception:
            self.log.exception("kmsg_read_failed")
            kernel = self.kmsg.time(time.monotonic())
        incidents += self._inbox.take()
        self.pipeline.process(incidents, (), kernel, self._view)
        self._rescan_for(incidents)
        if news is not None:
            self.pipeline.process((), news, kernel, self._view)
        if self._levels_came():
            self._checkpoint()  # save them before the next batch makes them stale

    def _process(self, incidents: Sequence[Incident], news: CgroupNews | None = None) -> None:
        """The pipeline off the loop's turn, with the kernel log's clock as of now."""
        kernel = self.kmsg.time(time.monotonic())
        self.pipeline.process(incidents, () if news is None else news, kernel, self._view)

    def _rescan_for(self, incidents: list[Incident]) -> None:
        """Ask for a rescan now when a kill names a cgroup we do not watch yet, or a bare
        kill arrives that needs a counter: a memcg made just before its kill is then found
        (and its counter read from zero) at once instead of at the next periodic rescan.
        Each unwatched cgroup asks once (most are simply not ours to watch)."""
        wanted = self._rescan_pending
        watched = self._view.watched
        for incident in incidents:
            if not is_logged_kernel_kill(incident):
                continue
            self.cgroups.request_pass()  # its counter moved before the line was printed
            cgroup = incident.task_memcg or incident.oom_memcg
            if cgroup is None:
                wanted = True
            elif cgroup not in watched and cgroup not in self._rescanned_for:
                self._rescanned_for[cgroup] = None
                wanted = True
        while len(self._rescanned_for) > RESCANNED_FOR_MAX:
            self._rescanned_for.popitem(last=False)
        now = time.monotonic()
        self._rescan_pending = wanted and now < self._next_forced_rescan
        if wanted and not self._rescan_pending:
            self._next_forced_rescan = now + FORCED_RESCAN_MIN_S
            self.cgroups.request_rescan()

    def _tick(self) -> None:
        """Once a sample interval: framework OOMs from the probe, the checkpoint, retention."""
        if self.framework_source is not None:
            try:
                self._process(self.framework_source.poll())
            except Exception:
                self.log.exception("probe_poll_failed")
        self._checkpoint()
        if self._wal is not None:
            self._wal.ask_if_due()  # here, while no report is open: not in a kill's commit
        self._prune_if_due(time.monotonic())

    def _prune_if_due(self, now_mono: float) -> None:
        """Hourly, and after every 100 incidents stored (at the tick: not in a kill's store)."""
        if now_mono < self._next_prune_mono and not self.store.prune_due:
            return
        self._next_prune_mono = now_mono + PRUNE_INTERVAL_S
        try:
            removed = self.store.prune()
        except Exception:
            self.log.exception("store_prune_failed")
            return
        if removed:
            self.log.info("store_pruned", removed=removed)

    def _levels_came(self) -> bool:
        """The counter levels the checkpoint asked for came, and are not saved yet."""
        taken = self.cgroups.batches_taken
        return self._view.levels is not None and self.checkpoints.levels_due(taken)

    def _checkpoint(self) -> None:
        """Save how far the log is handled with the counter levels and the pending
        reconciliation, never past a report not yet stored: only while no report is open
        and no decoded kill waits (a replay is deduplicated).  When batches went through
        since the levels were saved, the worker is asked for them: they come as the last
        batch of a take, and the views carry them (`CgroupView.levels`) until another batch
        is taken, so they match the state exactly; the turn that took them saves them."""
        if self.kmsg.open or self.pipeline.holding:
            return
        levels = None
        if self.checkpoints.levels_due(self.cgroups.batches_taken):
            levels = self._view.levels
            if levels is None:
                self.cgroups.request_levels()
                return
        saved = None if levels is None else (levels.counters, levels.batches)
        self.checkpoints.save(self.kmsg.cursor, self.pipeline.state, saved)

    def _shutdown(self) -> None:
        self.cgroups.stop()
        try:
            if self.kmsg.open:
                self._process(self.kmsg.flush())
            news, self._view = self.cgroups.take_news()
            self._process((), news)
            holding = self.pipeline.holding
            self.pipeline.drain()
            if not holding:  # else the last checkpoint stays: the restart replays from it
                self._checkpoint()
        except Exception:
            self.log.exception("shutdown_flush_failed")
        if self.kube is not None and self.metrics_address is not None:
            self.kube.stop()
        if self._wal is not None:
            self._wal.stop()
        closers = [self.metrics.close]
        if self._health_server is not None:
            closers.append(self._health_server.stop_serving)
        closers.append(self.store.close)
        closers += [close for e in self.enrichers if (close := getattr(e, "close", None))]
        if self.framework_source is not None:
            closers.append(self.framework_source.close)
        for closer in closers:
            with contextlib.suppress(Exception):
                closer()
        self.kmsg.close()
        self._inbox.close()
        stats = dataclasses.asdict(self.pipeline.stats)
        self.log.info("stopped", kmsg_undecodable=self.kmsg.undecodable, **stats)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
