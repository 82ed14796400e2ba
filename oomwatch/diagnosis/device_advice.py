"""Advice for a framework (device) OOM: a container memory limit does not govern device
memory, so the advice follows the cause finding (fragmentation, a shared device, a request
larger than the device, the job's own footprint).
"""

from __future__ import annotations

from collections.abc import Sequence

from oomwatch.diagnosis_codes import FindingCode, Recommendation, RecommendationAction
from oomwatch.incident import Finding

__all__ = ["device_advice"]

_DEVICE_ACTIONS: dict[FindingCode, RecommendationAction] = {  # cause finding -> action
    "device-fragmentation": "fix-fragmentation",
    "device-shared": "free-shared-device",
    "device-too-large": "reduce-device-memory",
    "device-footprint": "reduce-device-memory",
}


def device_advice(findings: Sequence[Finding]) -> Recommendation:
    """A framework OOM's advice: the cause finding's, else the general one."""
    cause = next((f for f in findings if f.code in _DEVICE_ACTIONS), None)
    if cause is None:
        message = (
            "A container memory limit does not govern device memory: lower the batch size or"
            " model footprint, or fix fragmentation (expandable_segments) if it shows."
        )
        return {"action": "reduce-device-memory", "limit_will_not_help": True, "message": message}
    if cause.code == "device-fragmentation":
        message = (
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the container's"
            " environment: the caching allocator then grows segments instead of leaving"
            " reserved memory it cannot reuse; the batch size can stay."
        )
    elif cause.code == "device-shared":
        message = cause.message
    elif cause.code == "device-too-large":
        message = (
            "The request alone is larger than the device: only a smaller request helps (a"
            " smaller batch, a sharded model, activation checkpointing); no allocator setting"
            " or memory limit fits it."
        )
    else:
        message = (
            "Lower the batch size or the model's footprint (mixed precision, activation"
            " checkpointing, sharding): this job's own memory fills the device."
        )
    return {
        "action": _DEVICE_ACTIONS[cause.code],
        "limit_will_not_help": True,
        "based_on": cause.evidence,
        "message": message,
    }
