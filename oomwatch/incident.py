"""The one record that flows through oomwatch: an OOM incident and its parts.

Data flows one way (source -> decode -> incident -> enrich -> diagnose -> store -> sinks);
each stage fills in more of the same `Incident`.  Field names are the JSON contract of
`oomwatch report --json` (schemas/report.schema.json, `JSON_SCHEMA_VERSION`) and of the
store, so renaming one is a breaking change.  One unit per kind of quantity: sizes in bytes
(`_bytes`), times in seconds (`_s`, `_seconds`); only the kernel's task table stays in its
pages (`_pages`, of `page_size_bytes`).  `None` means "the evidence did not say", never zero;
a limit is `None` also where the kernel printed "no limit" (its maximum), never a sentinel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from oomwatch.dataclass_dict import known_fields as _known
from oomwatch.dataclass_dict import optional_from_dict as _opt
from oomwatch.dataclass_dict import plain_dataclass
from oomwatch.diagnosis_codes import FindingCode, Recommendation, VerdictCode

# `name as name`: re-exported from its home; importers of incidents find it here too.
from oomwatch.incident_attribution import Attribution as Attribution
from oomwatch.incident_attribution import AttributionCandidate as AttributionCandidate
from oomwatch.incident_attribution import AttributionConfidence as AttributionConfidence
from oomwatch.incident_attribution import AttributionMethod as AttributionMethod
from oomwatch.incident_kinds import CONSTRAINED_KILL_KINDS as CONSTRAINED_KILL_KINDS
from oomwatch.incident_kinds import INCIDENT_KINDS as INCIDENT_KINDS
from oomwatch.incident_kinds import KERNEL_KILL_KINDS as KERNEL_KILL_KINDS
from oomwatch.incident_kinds import IncidentKind as IncidentKind
from oomwatch.incident_kinds import KernelKillKind as KernelKillKind
from oomwatch.incident_kinds import is_constrained_kill as is_constrained_kill
from oomwatch.incident_kinds import is_kernel_kill as is_kernel_kill
from oomwatch.incident_v1 import upgrade_v1
from oomwatch.kernel_limits import UNLIMITED_BYTES as UNLIMITED_BYTES
from oomwatch.wall_time import iso_epoch_s as iso_epoch_s
from oomwatch.wall_time import iso_time as iso_time
from oomwatch.wall_time import parse_iso as parse_iso

LimitScope = Literal["container", "pod", "qos", "node", "cgroup", "global"]
QosClass = Literal["guaranteed", "burstable", "besteffort"]
CgroupDriver = Literal["cgroupfs", "systemd"]
Runtime = Literal["containerd", "cri-o", "docker"]

# The version of the JSON shape (`--json`'s top-level `schema_version`).  2: sizes in bytes
# everywhere (1 had `_kb` fields and the kernel's "no limit" as a number).
JSON_SCHEMA_VERSION = 2
LIMIT_SCOPES: tuple[str, ...] = get_args(LimitScope)


@dataclass(slots=True)
class Invoker:
    """The task whose allocation invoked the OOM killer (not necessarily the victim)."""

    comm: str | None = None
    pid: int | None = None
    gfp_mask: str | None = None  # as printed, e.g. "0xcc0(GFP_KERNEL)"
    order: int | None = None
    oom_score_adj: int | None = None


@dataclass(slots=True)
class MemcgUsage:
    """The `memory:` / `swap:` / `memory+swap:` / `kmem:` lines of a memcg OOM report.

    A limit is None where the kernel printed its maximum (no limit) or no such line; the
    usage beside it says which (the kernel prints both on one line)."""

    usage_bytes: int | None = None
    limit_bytes: int | None = None
    failcnt: int | None = None
    swap_usage_bytes: int | None = None
    swap_limit_bytes: int | None = None
    kmem_usage_bytes: int | None = None


@dataclass(slots=True)
class Breakdown:
    """What the charged memory was made of, in bytes (hierarchical values where printed)."""

    anon: int | None = None
    file: int | None = None
    shmem: int | None = None
    thp: int | None = None  # rss_huge (v1) or anon_thp (v2)
    kernel: int | None = None


@dataclass(slots=True)
class TaskRow:
    """One row of the kernel's task table (`dump_tasks`); memory in pages as printed."""

    pid: int
    name: str
    uid: int | None = None
    tgid: int | None = None
    total_vm_pages: int | None = None
    rss_pages: int | None = None
    rss_anon_pages: int | None = None
    rss_file_pages: int | None = None
    rss_shmem_pages: int | None = None
    pgtables_bytes: int | None = None
    swapents_pages: int | None = None
    oom_score_adj: int | None = None


@dataclass(slots=True)
class Victim:
    """A process the kernel killed, from its `Killed process` line (kB as printed -> bytes)."""

    pid: int
    comm: str
    total_vm_bytes: int | None = None
    anon_rss_bytes: int | None = None
    file_rss_bytes: int | None = None
    shmem_rss_bytes: int | None = None
    uid: int | None = None
    pgtables_bytes: int | None = None
    oom_score_adj: int | None = None
    # Filled from a later `oom_reaper: reaped process` line when one arrives.
    reaped_anon_rss_bytes: int | None = None


@dataclass(slots=True)
class PodContext:
    """What the Kubernetes API knows of the pod and container (filled by enrichment)."""

    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    node: str | None = None
    owner_kind: str | None = None
    owner_name: str | None = None
    qos_class: str | None = None
    container_memory_request_bytes: int | None = None
    container_memory_limit_bytes: int | None = None
    pod_memory_request_bytes: int | None = None
    pod_memory_limit_bytes: int | None = None
    restart_count: int | None = None
    last_termination_reason: str | None = None
    last_termination_exit_code: int | None = None


@dataclass(slots=True)
class TimelineSample:
    """One sample of a cgroup's memory, taken by the daemon's sampler."""

    t_seconds: float  # wall clock, seconds since the epoch
    usage_bytes: int
    limit_bytes: int | None = None
    anon_bytes: int | None = None
    file_bytes: int | None = None
    shmem_bytes: int | None = None
    thp_bytes: int | None = None
    kernel_bytes: int | None = None
    # Page cache the kernel reclaims first; usage minus it is the working set (what
    # kubelet and cAdvisor call container_memory_working_set_bytes).
    inactive_file_bytes: int | None = None

    @property
    def working_set_bytes(self) -> int:
        return max(self.usage_bytes - (self.inactive_file_bytes or 0), 0)


@dataclass(slots=True)
class Timeline:
    """The sampled window before a kill, frozen into the incident."""

    samples: list[TimelineSample] = field(default_factory=list)
    interval_seconds: float | None = None
    peak_bytes: int | None = None
    usage_at_kill_bytes: int | None = None
    growth_bytes_per_second: float | None = None


@dataclass(slots=True)
class Finding:
    """A diagnosis: stable code, severity, one sentence with the numbers, and its evidence."""

    code: FindingCode
    severity: Literal["critical", "warning", "info"]
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ForecastRecord:
    """Whether oomwatch warned of this kill before it came (`MemoryLimitApproaching`), how
    early, and what it said; or, unwarned, why the forecast held back."""

    predicted: bool
    warned_at: str | None = None  # ISO-8601 wall clock of the warning
    lead_time_seconds: float | None = None  # from the warning to the kill
    seconds_to_oom_at_warning: float | None = None  # what the warning predicted
    confidence: float | None = None
    confidence_level: str | None = None  # high, medium
    growing: str | None = None  # what grew, in words
    reason: str | None = None  # unwarned: the forecaster's last word on this container


@dataclass(slots=True)
class Incident:
    """Everything known about one OOM kill (or one group kill, or one framework OOM)."""

    # --- decoded from the kernel log (issue: foundation) ---
    kind: IncidentKind = "unknown"
    constraint: str | None = None
    kernel_time_s: float | None = None
    wall_time: str | None = None
    kmsg_seq: int | None = None
    source_format: str | None = None
    invoker: Invoker | None = None
    oom_memcg: str | None = None
    task_memcg: str | None = None
    memcg: MemcgUsage | None = None
    memcg_stats: dict[str, int] | None = None  # stat name as printed -> bytes
    breakdown_bytes: Breakdown | None = None
    tasks: list[TaskRow] = field(default_factory=list)
    victims: list[Victim] = field(default_factory=list)
    group_kill: bool = False
    group_cgroup: str | None = None
    # Kills the kernel counted for this incident in `oom_kill` (memory.events, /proc/vmstat):
    # one per `Killed process` line.  A memory.oom.group kill prints (and counts) its primary
    # victim twice, as victim and as group member (mm/oom_kill.c oom_kill_process), so this
    # is len(victims) + 1 there; members "already exiting" are skipped and not counted.  (A
    # text log stamped to the second shows the repeat as a duplicate line, counted once.)
    kills_counted: int | None = None
    # Victims of a group kill not kept in `victims` (which holds the first and the largest
    # by anon rss: a pod decides how many processes its group kill takes).
    victims_omitted: int = 0
    # The kernel time of the last `Killed process` line: a group kill's lines (one per
    # member, each after its count) span 5-10 ms on an idle VM, more on a busy node.
    last_kill_kernel_time_s: float | None = None
    # The kernel time of the memory.oom.group kill whose members this incident continues:
    # its report was closed at a pause in the log (a starved relay or agent) and these
    # members' records came right after its last one.  The same kill: counted once as a
    # group kill (`oomwatch_group_oom_kills_total`), its members' kills counted here.
    continues_group_kill_s: float | None = None
    header_suppressed: bool = False
    # How `task_memcg` was established; None for incidents that did not need attributing
    # (framework OOMs, evictions) and for records from before attribution existed.
    attribution: Attribution | None = None
    # The size of the task table's pages as the report shows it (4096 on x86, 8192 on
    # sparc64, often 65536 on arm64/ppc64); None: the report does not say.
    page_size_bytes: int | None = None
    # `wall_time`'s year was not printed: "journal banner", "earlier log stamp" or
    # "reference time" (e.g. the file's mtime) gave it; None when the stamp had its year.
    year_inferred_from: str | None = None
    # Pre-5.1 `Kill process N (comm) score S or sacrifice child`: the process the kernel
    # selected; the victim may be a child of it.
    selected_pid: int | None = None
    # --- from the cgroup path (pure identity mapping) ---
    pod_uid: str | None = None
    container_id: str | None = None
    qos_class: str | None = None
    limit_scope: LimitScope | None = None
    cgroup_driver: str | None = None
    runtime: str | None = None
    # --- added by the daemon ---
    node: str | None = None
    boot_id: str | None = None
    detected_at: str | None = None  # ISO-8601 wall clock when oomwatch recorded it
    kmsg_missing: bool = False
    container_survived: bool | None = None
    # `memory.oom.group` of the container's cgroup at the kill (v1 has none: False).
    oom_group_enabled: bool | None = None
    # `memcg` usage/limit and `breakdown_bytes` are the daemon's last sample before the kill,
    # not lines of the kernel report (which never arrived, or printed no header).
    memcg_sampled: bool = False
    timeline: Timeline | None = None
    # Joined from the pre-OOM warnings; None where no container was forecast.
    forecast: ForecastRecord | None = None
    # --- added by Kubernetes enrichment ---
    k8s: PodContext | None = None
    # --- added by the probe join (allocator state of the trainer) ---
    allocator: dict[str, Any] | None = None
    # --- added by diagnosis ---
    findings: list[Finding] = field(default_factory=list)
    recommendation: Recommendation | None = None
    # The sentence every output leads with, and its code for tables
    # (oomwatch.diagnosis.verdict); None until diagnosed.
    verdict: str | None = None
    verdict_code: VerdictCode | None = None
    # Lines of the report the decoder could not place; kept for the post-mortem.
    notes: list[str] = field(default_factory=list)

    @property
    def victim(self) -> Victim | None:
        """The primary victim (first `Killed process`), if any line named one."""
        return self.victims[0] if self.victims else None

    @property
    def victim_count(self) -> int:
        """How many processes the kernel killed by name (kept or not in `victims`)."""
        return len(self.victims) + self.victims_omitted

    def identity_key(self) -> str:
        """A stable key that is the same however often the same kill is decoded.

        Used by the store to record each kill once across restarts and re-reads.
        """
        victim = self.victim
        parts = [
            self.boot_id or "",
            self.kind,
            f"{self.kernel_time_s:.6f}" if self.kernel_time_s is not None else "",
            str(victim.pid) if victim else "",
            victim.comm if victim else "",
            self.task_memcg or self.oom_memcg or "",
        ]
        import hashlib  # its OpenSSL binding costs a report's start-up 3 ms; rarely needed

        return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (the `--json` contract), as `dataclasses.asdict` would give."""
        return plain_dataclass(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Incident:
        """Rebuild from `to_dict` output (the store keeps incidents as JSON), or from the
        version-1 shape (`_kb` fields) older agents stored.  Keys this version does not know
        (a newer agent's) are left out, so a store written by a newer agent still reads."""
        data = upgrade_v1(data)
        kwargs = _known(cls, data)
        kwargs["invoker"] = _opt(Invoker, data.get("invoker"))
        kwargs["memcg"] = _opt(MemcgUsage, data.get("memcg"))
        kwargs["breakdown_bytes"] = _opt(Breakdown, data.get("breakdown_bytes"))
        kwargs["k8s"] = _opt(PodContext, data.get("k8s"))
        kwargs["forecast"] = _opt(ForecastRecord, data.get("forecast"))
        attribution = data.get("attribution")
        if attribution is not None:
            candidates = [
                AttributionCandidate(**_known(AttributionCandidate, c))
                for c in attribution.get("candidates") or []
            ]
            kwargs["attribution"] = Attribution(
                **{**_known(Attribution, attribution), "candidates": candidates}
            )
        kwargs["tasks"] = [TaskRow(**_known(TaskRow, row)) for row in data.get("tasks") or []]
        kwargs["victims"] = [Victim(**_known(Victim, v)) for v in data.get("victims") or []]
        kwargs["findings"] = [Finding(**_known(Finding, f)) for f in data.get("findings") or []]
        timeline = data.get("timeline")
        if timeline is not None:
            samples = [
                TimelineSample(**_known(TimelineSample, s)) for s in timeline.get("samples") or []
            ]
            kwargs["timeline"] = Timeline(**{**_known(Timeline, timeline), "samples": samples})
        return cls(**kwargs)


def kill_epoch_s(incident: Incident) -> float | None:
    """When the kill happened, in epoch seconds: the record's wall time, else when it was
    detected; None if neither is known."""
    for stamp in (incident.wall_time, incident.detected_at):
        if (epoch_s := iso_epoch_s(stamp)) is not None:
            return epoch_s
    return None
