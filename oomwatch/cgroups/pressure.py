"""Reclaim pressure of the containers a forecast looks at, as the kernel reports it.

- cgroup v1: `memory.pressure_level` eventfds, registered through `cgroup.event_control` as
  the OOM ones are (`MemcgEventfds`): one at `medium`, one at `critical`, both `local`, so a
  container hears of its own reclaim only.  `mm/vmpressure.c` rates each 512 scanned pages
  by the share reclaim failed to free: medium from 60 %, critical from 95 % (or when reclaim
  priority runs low), the state just before the OOM killer.
- cgroup v2: the container's `memory.pressure` (PSI): a trigger where the agent may create
  one (the file opens for writing), else its `avg10` figures read when asked.
- the node: `/proc/pressure/memory`, its `avg10` figures.

Triggers use a 2 s window: without CAP_SYS_RESOURCE the kernel accepts only multiples of
2 s (`psi_trigger_create`), and so one form works for every agent.  Only the containers a
forecast asks for are watched (`watch`/`forget`), so eventfds and triggers stay few.
Not thread-safe: one thread owns it.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections import deque
from typing import Literal

from oomwatch.cgroups.files import CgroupFile, CgroupGone
from oomwatch.cgroups.oom_events import MemcgEventfds
from oomwatch.forecast.model import Pressure

NODE_PSI = "/proc/pressure/memory"
PSI_TRIGGER = b"some 300000 2000000\0"  # 300 ms of memory stall within 2 s (15 %)
RECENT_S = 60.0  # notifications count this long


def parse_psi(text: bytes) -> dict[str, float]:
    """`some avg10=1.00 ...` / `full avg10=...` -> {"some": 1.0, "full": ...} (avg10, %)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(b" ")
        for field in rest.split():
            name, _, value = field.partition(b"=")
            if name == b"avg10":
                with contextlib.suppress(ValueError):
                    out[kind.decode("ascii", "replace")] = float(value)
    return out


class _Watched:
    __slots__ = ("events", "psi_file", "trigger_fd")

    def __init__(self) -> None:
        self.events: deque[tuple[float, str]] = deque()  # (when, "medium"|"critical"|"psi")
        self.psi_file: CgroupFile | None = None
        self.trigger_fd: int | None = None


class PressureWatch:
    """Pressure notifications and PSI figures per watched container, and the node's."""

    def __init__(self, node_psi: str | None = NODE_PSI, *, eventfds: bool = True) -> None:
        self._medium = MemcgEventfds("memory.pressure_level", "medium,local") if eventfds else None
        self._critical = (
            MemcgEventfds("memory.pressure_level", "critical,local") if eventfds else None
        )
        self._triggers = select.epoll()
        self._trigger_rel: dict[int, str] = {}
        self._watched: dict[str, _Watched] = {}
        self._node = CgroupFile(node_psi, 256) if node_psi else None
        self.trigger_failure: str | None = None

    @property
    def failure(self) -> str | None:
        """Why v1 notifications are off (no write access to `cgroup.event_control`)."""
        for events in (self._medium, self._critical):
            if events is not None and events.failure is not None:
                return events.failure
        return None

    def __contains__(self, relpath: str) -> bool:
        return relpath in self._watched

    def watched(self) -> list[str]:
        return list(self._watched)

    def watch(self, relpath: str, fs_path: str, version: Literal[1, 2], now_s: float) -> None:
        if relpath in self._watched:
            return
        watched = self._watched[relpath] = _Watched()
        if version == 1:
            for events in (self._medium, self._critical):
                if events is not None:
                    events.register(relpath, fs_path, now_s)
            return
        path = os.path.join(fs_path, "memory.pressure")
        watched.psi_file = CgroupFile(fs_path, 256, name="memory.pressure")
        if self.trigger_failure is None:
            try:
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                self.trigger_failure = f"{path}: {exc.strerror}"
                return
            try:
                os.write(fd, PSI_TRIGGER)
                self._triggers.register(fd, select.EPOLLPRI)
            except OSError as exc:
                os.close(fd)
                self.trigger_failure = f"{path}: PSI trigger refused: {exc.strerror}"
                return
            watched.trigger_fd = fd
            self._trigger_rel[fd] = relpath

    def forget(self, relpath: str) -> None:
        watched = self._watched.pop(relpath, None)
        if watched is None:
            return
        for events in (self._medium, self._critical):
            if events is not None:
                events.unregister(relpath)
        if watched.psi_file is not None:
            watched.psi_file.close()
        if watched.trigger_fd is not None:
            self._trigger_rel.pop(watched.trigger_fd, None)
            with contextlib.suppress(OSError):
                self._triggers.unregister(watched.trigger_fd)
            os.close(watched.trigger_fd)

    def poll(self, now_s: float) -> None:
        """Take the notifications that came since the last call (call about once a second)."""
        for name, events in (("medium", self._medium), ("critical", self._critical)):
            if events is None:
                continue
            for relpath in events.fired():
                watched = self._watched.get(relpath)
                if watched is not None:
                    watched.events.append((now_s, name))
        for fd, _ in self._triggers.poll(0):  # polling consumes a PSI trigger's event
            watched = self._watched.get(self._trigger_rel.get(fd, ""))
            if watched is not None:
                watched.events.append((now_s, "psi"))
        for watched in self._watched.values():
            while watched.events and watched.events[0][0] < now_s - RECENT_S:
                watched.events.popleft()

    def pressure(self, relpath: str) -> Pressure:
        """What the kernel said of this container in the last minute, and the node's PSI."""
        node = self._read(self._node)
        watched = self._watched.get(relpath)
        if watched is None:
            return Pressure(node_some_avg10=node.get("some"), node_full_avg10=node.get("full"))
        kinds = [kind for _, kind in watched.events]
        critical = kinds.count("critical")
        own = self._read(watched.psi_file)
        return Pressure(
            medium=kinds.count("medium"),  # the medium eventfd fires at critical too
            critical=critical,
            psi_events=kinds.count("psi"),
            some_avg10=own.get("some"),
            full_avg10=own.get("full"),
            node_some_avg10=node.get("some"),
            node_full_avg10=node.get("full"),
        )

    def _read(self, source: CgroupFile | None) -> dict[str, float]:
        if source is None:
            return {}
        try:
            return parse_psi(source.read())
        except (CgroupGone, OSError):
            return {}

    def close(self) -> None:
        for relpath in list(self._watched):
            self.forget(relpath)
        for events in (self._medium, self._critical):
            if events is not None:
                events.close()
        self._triggers.close()
        if self._node is not None:
            self._node.close()
