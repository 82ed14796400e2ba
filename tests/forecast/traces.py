"""Synthetic memory timelines of the shapes the forecaster must tell apart, one sample a
second, with jitter; and a replay that asks the forecaster each second, as the agent does."""

from __future__ import annotations

import random
from collections.abc import Callable

from oomwatch.forecast import Outlook, Pressure, outlook
from oomwatch.incident import TimelineSample

MIB = 1 << 20
LIMIT = 256 * MIB
T0 = 1_700_000_000.0

Shape = Callable[[float], float]  # seconds since start -> unreclaimable bytes


def linear(base_mib: float, rate_mib_s: float) -> Shape:
    return lambda t: (base_mib + rate_mib_s * t) * MIB


def steps(base_mib: float, step_mib: float, period_s: float) -> Shape:
    return lambda t: (base_mib + step_mib * (t // period_s)) * MIB


def sawtooth(low_mib: float, high_mib: float, rise_s: float) -> Shape:
    return lambda t: (low_mib + (high_mib - low_mib) * ((t % rise_s) / rise_s)) * MIB


def spike(base_mib: float, jump_mib: float, at_s: float, hold_s: float) -> Shape:
    return lambda t: (base_mib + (jump_mib if at_s <= t < at_s + hold_s else 0.0)) * MIB


def flat(base_mib: float) -> Shape:
    return lambda t: base_mib * MIB


def after(delay_s: float, before: Shape, then: Shape) -> Shape:
    return lambda t: before(t) if t < delay_s else then(t - delay_s)


def timeline(
    shape: Shape,
    seconds: int,
    *,
    cache_mib: float = 0.0,
    noise_mib: float = 0.5,
    limit: int = LIMIT,
    seed: int = 1,
) -> list[TimelineSample]:
    """Samples until `seconds` or the kill (unreclaimable memory at the limit); page cache
    fills what the limit leaves, up to `cache_mib`, as the kernel lets it."""
    rng = random.Random(seed)
    out: list[TimelineSample] = []
    for t in range(seconds):
        nr = max(0, int(shape(float(t)) + rng.gauss(0.0, noise_mib * MIB)))
        if nr >= limit:
            break
        cache = min(int(cache_mib * MIB), limit - nr)
        out.append(
            TimelineSample(
                T0 + t,
                nr + cache,
                limit,
                anon_bytes=nr,
                file_bytes=cache,
                shmem_bytes=0,
                thp_bytes=0,
                kernel_bytes=None,
            )
        )
    return out


def replay(
    samples: list[TimelineSample],
    window: int = 600,
    pressure: Callable[[int], Pressure | None] = lambda i: None,
) -> list[Outlook]:
    """The outlook after each sample, over the last `window` samples."""
    return [
        outlook(samples[max(0, i + 1 - window) : i + 1], pressure(i)) for i in range(len(samples))
    ]


def first_warning(outlooks: list[Outlook], horizon_s: float = 300.0) -> int | None:
    return next((i for i, o in enumerate(outlooks) if o.warns(horizon_s)), None)
