"""What the pod watch's changes tell the agent: evictions at once, and OOMKilled statuses
checked against the store after a grace delay (so the kernel kill that would explain one has
reached the store first); a status no kernel kill backs is a `false_oomkilled` incident.

Two threads, each with its own objects: `PodChanges` runs on the pod watcher's thread (its
seen-set is that thread's alone) and hands each claim to `ClaimVerifier` through a queue; the
verifier's thread keeps the claims not yet due in a list only it touches.  Neither holds the
`KubeIntegration` nor anything of the kernel log's loop: incidents go out through `submit`
(the loop's inbox) and kills are counted through the store's `kills_in`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime

from oomwatch.incident import Incident
from oomwatch.kube.pods import PodInfo
from oomwatch.kube.signals import (
    OomKilledClaim,
    eviction_incident,
    false_oomkilled_incident,
    new_oomkilled_claims,
    newly_evicted,
    parse_time_s,
)
from oomwatch.queue_drain import drain

log = logging.getLogger("oomwatch.kube.integration")  # the logger these records carry

KernelKillsFor = Callable[[str, float, float], int]
"""(container_id, since_s, until_s) -> kernel kills the store holds for that container,
times in seconds since the epoch."""

Submit = Callable[[Incident], None]

SEEN_MAX = 10_000
VERIFY_POLL_S = 0.25


def submit_safely(submit: Submit, incident: Incident) -> None:
    """(Any thread) hand `incident` to the loop; a refusal is logged, never raised."""
    try:
        submit(incident)
    except Exception:
        log.exception("pipeline_refused", extra={"kind": incident.kind})


class ClaimVerifier:
    """(Any thread) `offer`; (its own thread) `run`: a claim is counted against the store
    `verify_delay_s` after it was offered."""

    def __init__(self, submit: Submit, kernel_kills_for: KernelKillsFor, delay_s: float) -> None:
        self._submit = submit
        self._kernel_kills_for = kernel_kills_for
        self._delay_s = delay_s
        self._offered: queue.SimpleQueue[tuple[float, OomKilledClaim]] = queue.SimpleQueue()

    def offer(self, claim: OomKilledClaim) -> None:
        self._offered.put((time.monotonic() + self._delay_s, claim))

    def run(self, stop: threading.Event) -> None:
        waiting: list[tuple[float, OomKilledClaim]] = []  # this thread's alone
        while not stop.wait(VERIFY_POLL_S):
            waiting += drain(self._offered)
            now = time.monotonic()
            due = [claim for at, claim in waiting if at <= now]
            waiting = [(at, claim) for at, claim in waiting if at > now]
            for claim in due:
                self._verify(claim)

    def _verify(self, claim: OomKilledClaim) -> None:
        window = claim.window_s()
        container_id = claim.termination.container_id
        if window is None or container_id is None:
            return
        try:
            kills = self._kernel_kills_for(container_id, *window)
        except Exception:
            log.exception("kernel_kills_count_failed", extra={"container_id": container_id})
            return
        if kills == 0:
            submit_safely(self._submit, false_oomkilled_incident(claim, window))


class PodChanges:
    """The pod watcher's `on_change` (its thread): evictions, and OOMKilled claims since
    `since_wall_s` (set before that thread starts) offered once each."""

    def __init__(self, submit: Submit, verifier: ClaimVerifier) -> None:
        self._submit = submit
        self._verifier = verifier
        self._seen: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self.since_wall_s = time.time()

    def __call__(self, previous: PodInfo | None, pod: PodInfo, initial: bool) -> None:
        if not initial and newly_evicted(previous, pod) and self._first_time(("evicted", pod.uid)):
            submit_safely(self._submit, eviction_incident(pod, datetime.now(UTC)))
        for claim in new_oomkilled_claims(previous, pod):
            finished_s = parse_time_s(claim.termination.finished_at)
            # Only terminations since we started: earlier kills may predate what we saw.
            if finished_s is None or finished_s < self.since_wall_s - 1.0:
                continue
            if claim.termination.container_id and self._first_time(claim.key):
                self._verifier.offer(claim)

    def _first_time(self, key: tuple[str, ...]) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        while len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)
        return True
