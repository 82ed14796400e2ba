"""Join probe flight records to incidents: the daemon's two uses of the probe directory.

`ProbeEnricher` gives a kernel OOM kill of a probed process an `allocator` section: the last
sample before the kill and its age, the phase/step the trainer was in, the peak over the
recorded window.  `framework_incident` turns one CUDA/TensorFlow OOM the probe recorded into
an incident of kind `framework` (oomwatch.probe.framework polls for them).

Everything in a probe file is written by the pod, so a file only speaks for the process
that the kernel named: it matches by container id or exact memcg path of the kill, or by the
victim pid within the file's lifetime, or by pod UID and container name from the API, and a
stronger match beats a fresher one.  What the kernel vouches for is checked against what the
file claims: its owner against the victim's uid, its memcg against the victim's.  Strings
taken from it are escaped before they enter an incident.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from oomwatch.cgroup_identity import identify
from oomwatch.incident import Incident, Invoker, iso_epoch_s
from oomwatch.probe.identity import BY_POD_DIR, UNVERIFIED, claimed, dir_vouched_uid
from oomwatch.probe.oom_messages import parse_torch_oom
from oomwatch.probe.reader import FlightRecord, ProbeDirReader, ReaderLimits, RecordSource
from oomwatch.probe.schema import FrameworkOomEvent, ProbeSample, to_payload
from oomwatch.sanitize import escape_control

log = logging.getLogger("oomwatch.probe.join")

# Kernel log timestamps and CLOCK_MONOTONIC differ by a few milliseconds here; a sample
# stamped that little after the kill was still taken before it.
CLOCK_SLACK_S = 0.05

# A probed process still counts as alive this long after its last sample (a sampler can
# stall under memory pressure); later, its pid may belong to someone else.
PID_ALIVE_AFTER_LAST_SAMPLE_S = 120.0

# How much a match says, strongest first.  The file's own memcg being the killed task's
# names the container; the victim pid names one process but proves little (a claimed number);
# a pod UID and container name are names any pod can write.
MATCH_STRENGTH = {"memcg": 3, "container_id": 3, "pid": 2, "pod_container": 1}

# PROC_PID_INIT_INO (include/linux/proc_ns.h): the inode of the host's pid namespace, the
# namespace the kernel's `Killed process N` pids are in.
INIT_PID_NS_INO = 0xEFFFFFFC

_PEAK_FIELDS = ("rss_bytes", "uss_bytes", "anon_bytes", "anon_huge_bytes", "shmem_bytes")


def _iso(wall_s: float) -> str:
    return datetime.fromtimestamp(wall_s, tz=UTC).isoformat()


def _text(value: str | None) -> str | None:
    return None if value is None else escape_control(value)


def kill_clock(incident: Incident, record: FlightRecord) -> tuple[str, float] | None:
    """When the kill happened, on a clock the record's samples carry: (`mono_s`|`wall_s`, t)."""
    same_boot = None in (incident.boot_id, record.meta.boot_id) or (
        incident.boot_id == record.meta.boot_id
    )
    if incident.kernel_time_s is not None and same_boot:
        return "mono_s", incident.kernel_time_s
    wall = iso_epoch_s(incident.wall_time) or iso_epoch_s(incident.detected_at)
    return ("wall_s", wall) if wall is not None else None


def match_reason(incident: Incident, record: FlightRecord) -> str | None:
    """Why `record` belongs to the process or container the incident is about, if it does.

    The strongest reason is returned (see MATCH_STRENGTH).  A file whose memcg is known and
    is not the killed task's says it lived elsewhere: no weaker match overrules that.  A pid
    matches only if the file's pid namespace is the host's, where the kernel's pids are.
    """
    meta = record.meta
    # "/" is what a process in its own cgroup namespace sees: it names no one.
    own_memcg = meta.cgroup if meta.cgroup not in (None, "/") else None
    if own_memcg is not None and own_memcg in (incident.task_memcg, incident.group_cgroup):
        return "memcg"
    file_identity = identify(own_memcg) if own_memcg else None
    if (
        incident.container_id
        and file_identity is not None
        and file_identity.container_id == incident.container_id
    ):
        return "container_id"
    other_container = bool(
        incident.container_id and file_identity is not None and file_identity.container_id
    )
    if own_memcg is not None and (incident.task_memcg is not None or other_container):
        return None  # the file's process lived in another memcg than the killed task
    if (
        meta.pid_ns == INIT_PID_NS_INO
        and any(v.pid == meta.pid for v in incident.victims)
        and _within_lifetime(incident, record)
    ):
        return "pid"
    container = incident.k8s.container if incident.k8s else None
    if (
        incident.pod_uid
        and meta.pod_uid == incident.pod_uid
        and container is not None
        and meta.container == container
    ):
        return "pod_container"
    return None


def owner_is_victim(incident: Incident, record: FlightRecord) -> bool:
    """Whether the file's owner is a uid the kernel printed for a victim (`UID:N`).

    Required, not just preferred, whenever the kernel printed one: the owner is the one fact
    about a file that its writer cannot choose (without CAP_CHOWN), and a trainer's file is
    owned by the trainer's uid, which its killed workers share.  A file of another owner is
    then either another user's forgery or a process beside the victim running as another
    user; telling those apart is impossible, and a wrong allocator section misleads where a
    missing one only says less.  Both are host uids (a user namespace maps both the same way).
    Kernels that print no uid leave only the reader's `allowed_uids` between file and join.
    """
    uids = {v.uid for v in incident.victims if v.uid is not None}
    return not uids or record.owner_uid in uids


def _within_lifetime(incident: Incident, record: FlightRecord) -> bool:
    """A pid matches only while that process lived (pids are reused)."""
    clock = kill_clock(incident, record)
    if clock is None or not record.samples:
        return False
    key, at = clock
    started = record.meta.started_mono_s if key == "mono_s" else record.meta.started_wall_s
    last: float = getattr(record.samples[-1], key)
    return started - CLOCK_SLACK_S <= at <= last + PID_ALIVE_AFTER_LAST_SAMPLE_S


def allocator_section(
    incident: Incident, record: FlightRecord, reason: str, window_s: float
) -> dict[str, Any] | None:
    """The `allocator` section for a kill, or None if the record has no sample before it."""
    clock = kill_clock(incident, record)
    if clock is None:
        return None
    key, at = clock
    before = [s for s in record.samples if getattr(s, key) <= at + CLOCK_SLACK_S]
    if not before:
        return None
    last = before[-1]
    age = at - getattr(last, key)
    if age > window_s:
        return None
    window = [s for s in before if at - getattr(s, key) <= window_s]
    return {
        "source": "probe",
        "file": escape_control(record.name),
        "matched_by": reason,
        "pid": record.meta.pid,
        "comm": escape_control(record.meta.comm),
        "phase": _text(last.phase),
        "epoch": last.epoch,
        "step": last.step,
        "batch_size": last.batch_size,
        "age_seconds": round(max(age, 0.0), 3),
        "last_sample": _sample_dict(last),
        "peak": _peaks(window),
        "device_samples": device_samples(window),
        "window_seconds": round(getattr(last, key) - getattr(window[0], key), 3),
        "samples_in_window": len(window),
        "framework_ooms": sum(1 for e in record.events if getattr(e, key) <= at + CLOCK_SLACK_S),
    }


def _sample_dict(sample: ProbeSample) -> dict[str, Any]:
    out = to_payload(sample)
    out["seq"] = sample.seq
    if sample.phase is not None:
        out["phase"] = escape_control(sample.phase)
    if sample.tf is not None:
        out["tf"] = {
            k: escape_control(v) if isinstance(v, str) else v for k, v in sample.tf.items()
        }
    return out


def device_samples(samples: list[ProbeSample]) -> list[dict[str, Any]]:
    """The device's memory over the window, for the plot's GPU axis: the CUDA allocator's
    allocated and reserved bytes, or TensorFlow's current bytes (as allocated)."""
    out: list[dict[str, Any]] = []
    for s in samples:
        if s.cuda is not None:
            allocated, reserved = s.cuda.get("allocated_bytes"), s.cuda.get("reserved_bytes")
        elif s.tf is not None:
            allocated, reserved = s.tf.get("current_bytes"), None
        else:
            continue
        out.append({"wall_s": s.wall_s, "allocated_bytes": allocated, "reserved_bytes": reserved})
    return out


def _snapshot(snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
    """The validated snapshot summary, its one string escaped (the file is the pod's)."""
    if snapshot is None:
        return None
    segments = [
        {**s, "segment_type": _text(s.get("segment_type"))}
        for s in snapshot.get("largest_segments") or []
    ]
    return {**snapshot, "largest_segments": segments}


def _peaks(samples: list[ProbeSample]) -> dict[str, int]:
    peaks: dict[str, int] = {}
    for name in _PEAK_FIELDS:
        values = [v for s in samples if (v := getattr(s, name)) is not None]
        if values:
            peaks[name] = max(values)
    for name in ("reserved_bytes", "allocated_bytes"):
        values = [v for s in samples if s.cuda and isinstance(v := s.cuda.get(name), int)]
        if values:
            peaks[f"cuda_{name}"] = max(values)
    return peaks


class WarnOnce:
    """Logs a refusal once per file name (bounded), not once per poll."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, record: FlightRecord, reason: str) -> None:
        key = (record.name, reason)
        if key in self._seen:
            return
        if len(self._seen) > 4096:
            self._seen.clear()
        self._seen.add(key)
        log.warning(
            "probe_file_refused", extra={"file_name": escape_control(record.name), "reason": reason}
        )


class ProbeEnricher:
    """Enricher adding `incident.allocator` from the probe directory; it defers a kill until
    a walk begun after it has read what the trainer wrote up to its death.

    Of the files that match, the strongest match wins and, among equals, the freshest sample.
    """

    def __init__(
        self,
        probe_dir: Path,
        *,
        limits: ReaderLimits | None = None,
        window_s: float = 120.0,
        reader: RecordSource | None = None,
        pod_dirs: bool = False,
    ) -> None:
        # The agent hands the framework source's reader: one cache and one budget for both.
        self._reader = reader or ProbeDirReader(probe_dir, limits)
        self.window_s = window_s
        # Per-pod directories enforced (--probe-pod-dirs): a file joins only the kills of
        # the pod whose directory it lies in (the kernel names the pod by its cgroup path).
        self._pod_dirs = pod_dirs
        self._warn = WarnOnce()

    def enrich(self, incident: Incident) -> bool:
        if incident.kind == "framework" or incident.allocator is not None:
            return True
        # When the agent read the kill: the trainer was dead by then (its stamped wall time
        # is a conversion that can run ahead of this clock).
        seen_at_s = iso_epoch_s(incident.detected_at)
        if seen_at_s is None:
            return self._join(incident, self._reader.read_all())
        # Only a kill some file of the last walk may belong to waits for a walk begun after
        # it (a trainer's file is there from its start): any other kill is passed on now,
        # so a crowded probe directory, which makes every walk take its full time, delays
        # no kill but a trainer's.
        if not any(self._may_match(incident, r) for r in self._reader.read_all()):
            return True
        records = self._reader.read_after(seen_at_s)
        if records is None:
            return False  # a walk begun after the kill is on its way; asked again shortly
        return self._join(incident, records)

    def _may_match(self, incident: Incident, record: FlightRecord) -> bool:
        if self._pod_dirs and (record.pod_dir is None or record.pod_dir != incident.pod_uid):
            return False
        return match_reason(incident, record) is not None  # its owner is checked in the join

    def _join(self, incident: Incident, records: list[FlightRecord]) -> bool:
        best: tuple[tuple[int, float], dict[str, Any]] | None = None
        for record in records:
            if not claims_consistent(record):
                self._warn(record, CONTRADICTED)
                continue
            if self._pod_dirs and (record.pod_dir is None or record.pod_dir != incident.pod_uid):
                continue  # another pod's directory (or none): no evidence about this kill
            reason = match_reason(incident, record)
            if reason is None:
                continue
            if not owner_is_victim(incident, record):
                self._warn(record, f"owner uid {record.owner_uid} is not the victim's")
                continue
            section = allocator_section(incident, record, reason, self.window_s)
            if section is None:
                continue
            rank = (MATCH_STRENGTH[reason], -section["age_seconds"])
            if best is None or rank > best[0]:
                best = (rank, section)
        if best is not None:
            incident.allocator = best[1]
        return True

    def close(self) -> None:
        self._reader.close()


def framework_incident(
    record: FlightRecord, event: FrameworkOomEvent, now_wall_s: float, pod_dirs: bool = False
) -> Incident:
    """One framework OOM as an incident (kind `framework`).

    Its pod identity is only what `identity` vouches for: the file's claims stay text in
    `allocator.claimed` until the API backs them (oomwatch.kube.enrich)."""
    meta = record.meta
    window = [s for s in record.samples if s.mono_s <= event.mono_s + CLOCK_SLACK_S]
    last = window[-1] if window else None
    pod_uid = dir_vouched_uid(record.pod_dir, meta, pod_dirs)
    # The probe file holds the message; what it says of the device's other users is read
    # here (older probes did not parse it).
    parsed = parse_torch_oom(event.message) if event.framework.startswith("torch") else None
    allocator: dict[str, Any] = {
        "source": "probe",
        "file": escape_control(record.name),
        "framework": event.framework,
        "device": _text(event.device),
        "requested_bytes": event.requested_bytes,
        "free_bytes": event.free_bytes,
        "total_bytes": event.total_bytes,
        "allocated_bytes": event.allocated_bytes,
        "reserved_unallocated_bytes": event.reserved_unallocated_bytes,
        "process_bytes": parsed.process_bytes if parsed else None,
        "other_processes": [
            {"pid": pid, "bytes": size} for pid, size in (parsed.other_processes if parsed else ())
        ],
        "phase": _text(event.phase),
        "epoch": event.epoch,
        "step": event.step,
        "batch_size": event.batch_size,
        "message": escape_control(event.message),
        "snapshot": _snapshot(event.snapshot),
        "last_sample": _sample_dict(last) if last else None,
        "peak": _peaks(window[-120:]),
        "device_samples": device_samples(window[-120:]),
        "claimed": claimed(meta),
        "owner_uid": record.owner_uid,
        # Who wrote the event, as no later process can repeat it (oomwatch.store.keys).
        "pid": meta.pid,
        "pid_ns": meta.pid_ns,
        "process_started_mono_s": meta.started_mono_s,
        "event_seq": event.seq,
        # A distributed launch: which rank ran out (the file's claim, like the pod's).
        "rank": meta.rank,
        "local_rank": meta.local_rank,
        "world_size": meta.world_size,
        "job_id": _text(meta.job_id),
        "visible_devices": _text(meta.visible_devices),
        "identity": BY_POD_DIR if pod_uid else UNVERIFIED,
    }
    return Incident(
        kind="framework",
        kernel_time_s=round(event.mono_s, 6),
        wall_time=_iso(event.wall_s),
        boot_id=meta.boot_id,
        detected_at=_iso(now_wall_s),
        invoker=Invoker(comm=escape_control(meta.comm), pid=meta.pid),
        pod_uid=pod_uid,
        allocator=allocator,
    )


CONTRADICTED = "pod UID contradicts its memcg path"


def claims_consistent(record: FlightRecord) -> bool:
    """A file may not claim a pod UID that its own memcg path contradicts."""
    if not record.meta.cgroup or not record.meta.pod_uid:
        return True
    path_uid = identify(record.meta.cgroup).pod_uid
    return path_uid is None or path_uid == record.meta.pod_uid
