"""Provoke one real kill (or a burst) and capture exactly what the kernel printed for it.

Shared by the decoder tests, the daemon and diagnosis tests and the demo: start a hog, read
/dev/kmsg until the kernel's `Killed process <pid>` line for our victim, and say whether the
full report (header and `oom-kill:` line) came or the rate limit ate it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oomwatch.decode import ReportAssembler, parse_kmsg_record
from oomwatch.incident import Incident
from oomwatch.lab.kmsg import KmsgTail, wait_rate_limit_window
from oomwatch.lab.memcg import Memcg
from oomwatch.lab.spawn import HogProcess, spawn_hog

_KILL_TIMEOUT_S = 15.0
# After the `Killed process` line the kernel may still print `oom_reaper: reaped process`.
_SETTLE_S = 0.3


@dataclass
class KillCapture:
    """Raw /dev/kmsg records read while a scenario ran, and who we expected to die."""

    hog: HogProcess
    victim_pids: list[int]
    records: list[bytes] = field(default_factory=list)
    attempts: int = 1

    def killed_line(self, pid: int) -> bytes | None:
        """The kernel's `Killed process <pid> (` record, if it arrived."""
        needle = b"Killed process %d (" % pid
        return next((record for record in self.records if needle in record), None)

    def incidents(self) -> list[Incident]:
        """Decode the records (as the daemon would, record by record) and keep the incidents
        that killed one of our victims; other people's kills in the same window are dropped."""
        assembler = ReportAssembler()
        decoded: list[Incident] = []
        for raw in self.records:
            record = parse_kmsg_record(raw)
            if record is not None:
                decoded.extend(assembler.feed(record))
        decoded.extend(assembler.flush())
        ours = set(self.victim_pids)
        return [
            incident
            for incident in decoded
            if any(victim.pid in ours for victim in incident.victims)
        ]

    def full_incident(self) -> Incident:
        """The one incident of our victims, with its whole report (tests assert on it).

        AssertionError, with the records, when there is not exactly one or the report
        header was rate-limited (others' kills used the window even after a retry).
        """
        incidents = self.incidents()
        if len(incidents) != 1:
            raise AssertionError(
                f"{len(incidents)} incidents of our victims: {incidents}; records {self.records}"
            )
        if incidents[0].header_suppressed:
            raise AssertionError(
                "the kernel rate-limited the report twice (others' kills in the window)"
            )
        return incidents[0]

    def has_full_report(self, pid: int) -> bool:
        """Whether the rate limit let the `oom-kill:` line (and so the header) through."""
        needle = b",pid=%d,uid=" % pid
        return any(b"oom-kill:" in record and needle in record for record in self.records)


def _victim_line(pids: set[int]) -> Callable[[bytes], bool]:
    needles = [b"Killed process %d (" % pid for pid in pids]
    return lambda record: any(needle in record for needle in needles)


def _capture(
    memcg: Memcg, hog_kwargs: dict[str, Any], children: int, timeout_s: float
) -> KillCapture:
    with KmsgTail() as tail:
        hog = spawn_hog(memcg, **hog_kwargs)
        if hog.mode == "child-worker":
            for index in range(children):
                hog.wait_for_count("child-exit", index + 1, timeout_s)
            victims = hog.child_pids
        else:
            try:
                hog.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(TimeoutError):  # collect what it said
                    hog.wait_for_count("", len(hog.lines) + 100, 0.2)
                raise TimeoutError(
                    f"hog {hog.pid} ({hog.mode}) in {memcg.relpath} was not killed within "
                    f"{timeout_s} s (does it outgrow the limit?); it said {hog.lines}"
                ) from None
            victims = [hog.pid]
        capture = KillCapture(hog, victims)
        last = {victims[-1]}
        capture.records = tail.collect(
            until=_victim_line(last), timeout_s=timeout_s, settle_s=_SETTLE_S
        )
    return capture


def provoke_kill(
    memcg: Memcg, *, retries: int = 1, timeout_s: float = _KILL_TIMEOUT_S, **hog_kwargs: Any
) -> KillCapture:
    """Run `spawn_hog(memcg, **hog_kwargs)` until the kernel kills it; capture the report.

    The hog (in child-worker mode: its child) must outgrow the memcg's limit.  Waits for
    the rate-limit window first; when the header was still suppressed (someone else's kills
    used the window) it waits and tries again, `retries` times.
    """
    children = int(hog_kwargs.get("children", 1))
    for attempt in range(1, retries + 2):
        wait_rate_limit_window(needed=children)
        capture = _capture(memcg, hog_kwargs, children, timeout_s)
        capture.attempts = attempt
        if children > 1 or all(capture.has_full_report(p) for p in capture.victim_pids):
            return capture
        if capture.hog.tmpfs_dir is not None:  # shmem stays charged until the files go
            shutil.rmtree(capture.hog.tmpfs_dir, ignore_errors=True)
    return capture
