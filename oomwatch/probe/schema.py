"""What a flight-recorder file may contain, validated field by field.

The daemon reads these files from a directory every pod can write to, so each payload is
checked against a closed schema: known keys only, exact types, bounded numbers and strings.
One bad field refuses the whole file (`SchemaError`), never a half-trusted record.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args

# torch's device OOMs by the device the message names; "torch" when it names none we know.
Framework = Literal["torch-cuda", "torch-xpu", "torch-mps", "torch", "tensorflow"]
FRAMEWORKS: tuple[str, ...] = get_args(Framework)

MAX_TEXT = 128  # names, phases, devices
MAX_MESSAGE = 1200  # a framework OOM message, truncated by the writer
MAX_BYTES = 1 << 50  # 1 PiB: larger "byte counts" are lies
MAX_COUNT = 1 << 40

CUDA_KEYS = (
    "device",
    "allocated_bytes",
    "allocated_peak_bytes",
    "reserved_bytes",
    "reserved_peak_bytes",
    "active_bytes",
    "active_peak_bytes",
    "inactive_split_bytes",
    "num_alloc_retries",
    "num_ooms",
)
TF_KEYS = ("device", "current_bytes", "peak_bytes")
# The CUDA allocator's snapshot summary of a CUDA OOM (oomwatch.probe.snapshot).
SNAPSHOT_KEYS = {
    "device": "count",
    "segments": "count",
    "reserved_bytes": "int",
    "allocated_bytes": "int",
    "active_bytes": "int",
    "inactive_split_bytes": "int",
    "largest_free_block_bytes": "int",
    "fragmentation": "float",
    "largest_segments": "segments",
}
SEGMENT_KEYS = {
    "total_bytes": "int",
    "allocated_bytes": "int",
    "active_bytes": "int",
    "largest_free_block_bytes": "int",
    "blocks": "count",
    "segment_type": "text",
}
MAX_SEGMENTS = 8


class SchemaError(ValueError):
    """A payload does not match the schema; the message names the field."""


@dataclass(frozen=True, slots=True)
class ProbeMeta:
    """Who wrote the file: pod identity from the downward API, pid, memory cgroup, boot."""

    pid: int  # in the writer's pid namespace: a host pid only when `pid_ns` is the host's
    comm: str
    started_wall_s: float
    started_mono_s: float
    boot_id: str | None = None
    cgroup: str | None = None  # the memory cgroup as /proc/self/cgroup names it
    pod_uid: str | None = None
    pod_name: str | None = None
    namespace: str | None = None
    container: str | None = None
    pid_ns: int | None = None  # inode of /proc/self/ns/pid
    # Distributed training, as torchrun (and Kubeflow's, Slurm's launchers) set them.
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    job_id: str | None = None  # the launch: run id (or master address) and restart attempt
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """One sample of the process: memory, allocator stats, and where the trainer was."""

    wall_s: float
    mono_s: float  # CLOCK_MONOTONIC, the clock of kernel log timestamps (same boot)
    rss_bytes: int
    uss_bytes: int | None = None
    anon_bytes: int | None = None
    anon_huge_bytes: int | None = None
    shmem_bytes: int | None = None
    swap_bytes: int | None = None
    phase: str | None = None
    epoch: int | None = None
    step: int | None = None
    batch_size: int | None = None
    cuda: dict[str, int | str] | None = None  # `device` is "cuda:N", the rest counts
    tf: dict[str, int | str] | None = None
    seq: int = 0  # the slot's sequence number (not part of the payload)


@dataclass(frozen=True, slots=True)
class FrameworkOomEvent:
    """A CUDA or TensorFlow out-of-memory error the probe caught, with its message parsed."""

    wall_s: float
    mono_s: float
    framework: str
    message: str
    device: str | None = None
    requested_bytes: int | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    phase: str | None = None
    epoch: int | None = None
    step: int | None = None
    batch_size: int | None = None
    snapshot: dict[str, Any] | None = None  # CUDA OOMs: the allocator's segments, summarised
    seq: int = 0


def to_payload(record: ProbeMeta | ProbeSample | FrameworkOomEvent) -> dict[str, Any]:
    """The JSON payload: None fields and the slot-held `seq` are left out."""
    return {k: v for k, v in asdict(record).items() if v is not None and k != "seq"}


def _check(name: str, value: Any, kind: str) -> Any:
    if kind == "int" or kind == "count":
        if type(value) is not int or not 0 <= value <= (
            MAX_COUNT if kind == "count" else MAX_BYTES
        ):
            raise SchemaError(f"{name}: expected a non-negative integer in range")
        return value
    if kind == "float":
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            raise SchemaError(f"{name}: expected a finite non-negative number")
        return float(value)
    if kind == "text" or kind == "message":
        limit = MAX_MESSAGE if kind == "message" else MAX_TEXT
        if type(value) is not str or len(value) > limit:
            raise SchemaError(f"{name}: expected a string of at most {limit} characters")
        return value
    raise AssertionError(kind)


_KINDS: dict[str, str] = {
    "pid": "count",
    "pid_ns": "count",
    "rank": "count",
    "local_rank": "count",
    "world_size": "count",
    "job_id": "text",
    "visible_devices": "text",
    "comm": "text",
    "started_wall_s": "float",
    "started_mono_s": "float",
    "boot_id": "text",
    "cgroup": "message",
    "pod_uid": "text",
    "pod_name": "text",
    "namespace": "text",
    "container": "text",
    "wall_s": "float",
    "mono_s": "float",
    "phase": "text",
    "epoch": "count",
    "step": "count",
    "batch_size": "count",
    "framework": "text",
    "message": "message",
    "device": "text",
}


def _parse_keyed(
    name: str, value: Any, kinds: dict[str, str], nullable: bool = False
) -> dict[str, Any]:
    """A closed object whose values have the given kinds (None too, where `nullable`)."""
    if type(value) is not dict:
        raise SchemaError(f"{name}: expected an object")
    unknown = set(value) - set(kinds)
    if unknown:
        raise SchemaError(f"{name}: unknown keys {sorted(unknown)[:3]}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        kind = kinds[key]
        if item is None and nullable:
            out[key] = None
        elif kind == "segments":
            if type(item) is not list or len(item) > MAX_SEGMENTS:
                raise SchemaError(f"{name}.{key}: expected at most {MAX_SEGMENTS} segments")
            out[key] = [_parse_keyed(f"{name}.{key}", s, SEGMENT_KEYS) for s in item]
        else:
            out[key] = _check(f"{name}.{key}", item, kind)
    if out.get("fragmentation", 0.0) > 1.0:
        raise SchemaError(f"{name}.fragmentation: expected a share from 0 to 1")
    return out


def _from_payload(cls: type[Any], payload: dict[str, Any], seq: int | None) -> Any:
    names = {f.name for f in fields(cls)} - {"seq"}
    unknown = set(payload) - names
    if unknown:
        raise SchemaError(f"{cls.__name__}: unknown keys {sorted(unknown)[:3]}")
    kwargs: dict[str, Any] = {}
    for key, value in payload.items():
        if value is None:
            continue
        if key in ("cuda", "tf"):
            keys = CUDA_KEYS if key == "cuda" else TF_KEYS
            kinds = {k: "text" if k == "device" else "int" for k in keys}
            kwargs[key] = _parse_keyed(key, value, kinds)
        elif key == "snapshot":
            kwargs[key] = _parse_keyed(key, value, SNAPSHOT_KEYS, nullable=True)
        elif key.endswith("_bytes"):
            kwargs[key] = _check(key, value, "int")
        else:
            kwargs[key] = _check(key, value, _KINDS[key])
    try:
        record = cls(**kwargs) if seq is None else cls(**kwargs, seq=seq)
    except TypeError as exc:  # a required field is missing
        raise SchemaError(f"{cls.__name__}: {exc}") from None
    return record


def meta_from_payload(payload: dict[str, Any]) -> ProbeMeta:
    meta: ProbeMeta = _from_payload(ProbeMeta, payload, None)
    return meta


def sample_from_payload(payload: dict[str, Any], seq: int) -> ProbeSample:
    sample: ProbeSample = _from_payload(ProbeSample, payload, seq)
    return sample


def event_from_payload(payload: dict[str, Any], seq: int) -> FrameworkOomEvent:
    event: FrameworkOomEvent = _from_payload(FrameworkOomEvent, payload, seq)
    if event.framework not in FRAMEWORKS:
        raise SchemaError(f"framework: {event.framework!r} is not one of {FRAMEWORKS}")
    return event
