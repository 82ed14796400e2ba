"""The forecaster over synthetic timelines: leaks are called early enough, with the right
time; what a kernel or a garbage collector gives back, a spike, a steady container at its
limit with page cache are never called."""

from __future__ import annotations

import re

import pytest

from oomwatch.forecast import Pressure, outlook, unreclaimable_bytes
from oomwatch.forecast.text import describe
from oomwatch.incident import TimelineSample

from .traces import (
    LIMIT,
    MIB,
    T0,
    after,
    first_warning,
    flat,
    linear,
    replay,
    sawtooth,
    spike,
    steps,
    timeline,
)


@pytest.mark.parametrize(
    ("name", "shape", "seconds"),
    [
        ("linear 0.5 MiB/s", linear(60, 0.5), 1000),
        ("linear 0.1 MiB/s", linear(180, 0.1), 2000),
        ("16 MiB every 30 s", steps(60, 16, 30), 2000),
        ("32 MiB every 90 s", steps(40, 32, 90), 2000),
        ("flat for 400 s, then 0.5 MiB/s", after(400, flat(80), linear(80, 0.5)), 1500),
    ],
)
def test_a_leak_is_called_at_least_a_minute_ahead(name: str, shape: object, seconds: int) -> None:
    samples = timeline(shape, seconds)  # type: ignore[arg-type]
    assert len(samples) < seconds, "the leak must reach the limit"
    warned = first_warning(replay(samples))
    assert warned is not None, name
    lead_s = len(samples) - warned
    assert 60 <= lead_s <= 450, f"{name}: warned {lead_s} s before the kill"  # steps: lumpy


def test_the_time_to_the_limit_is_right_for_a_linear_leak() -> None:
    samples = timeline(linear(60, 0.5), 1000)
    seen = outlook(samples[:200])
    assert seen.forecast is not None
    actual_s = len(samples) - 200
    assert abs(seen.forecast.seconds_to_oom - actual_s) < 10
    assert seen.forecast.earliest_s <= seen.forecast.seconds_to_oom
    assert seen.forecast.latest_s is not None
    assert seen.forecast.latest_s >= seen.forecast.seconds_to_oom
    assert seen.forecast.growing[0].part == "anon"


def test_a_fast_leak_is_called_once_90_s_of_growth_are_seen() -> None:
    """2 MiB/s from 60 MiB fills 256 MiB in ~100 s: a warning after 90 s of growth, so less
    than a minute ahead (the price of never calling the rise of a sawtooth or a batch)."""
    samples = timeline(linear(60, 2.0), 1000)
    warned = first_warning(replay(samples))
    assert warned is not None and 80 <= warned <= 95 and len(samples) - warned < 60


@pytest.mark.parametrize(
    ("name", "shape", "kwargs"),
    [
        ("GC sawtooth, 40 s rises to 90 % of the limit", sawtooth(100, 230, 40), {}),
        ("batch sawtooth, 80 s rises", sawtooth(60, 200, 80), {}),
        ("spike to 94 % for 20 s", spike(150, 90, 600, 20), {}),
        (
            "steady at 90 % with page cache filling the rest",
            flat(230),
            {"cache_mib": 100, "noise_mib": 2},
        ),
        ("a step up that stays", after(300, flat(60), flat(200)), {}),
    ],
)
def test_no_warning_for_what_is_not_a_leak(
    name: str, shape: object, kwargs: dict[str, float]
) -> None:
    samples = timeline(shape, 3600, **kwargs)  # type: ignore[arg-type]
    assert len(samples) == 3600, f"{name} must not reach the limit"
    outlooks = replay(samples)
    assert first_warning(outlooks) is None, (name, [o.reason for o in outlooks if o.warns()][:3])


def test_a_long_sawtooth_is_told_apart_from_its_second_cycle() -> None:
    """A 120 s rise looks like a leak the first time; once it has come back from a peak, a
    rise to the same peak is not called again."""
    outlooks = replay(timeline(sawtooth(80, 200, 120), 1800))
    warned_at = [i for i, o in enumerate(outlooks) if o.warns()]
    assert warned_at and max(warned_at) < 120
    assert "peak it came back from" in outlooks[-1].reason


def test_growth_past_the_earlier_peak_is_called() -> None:
    """A leak under a sawtooth: each cycle peaks higher; once past the earlier peak with a
    steady rise, the kill is predicted before it comes."""
    leak = linear(0, 0.12)
    saw = sawtooth(60, 100, 30)
    samples = timeline(lambda t: leak(t) + saw(t), 3000)
    assert len(samples) < 3000
    warned = first_warning(replay(samples))
    assert warned is not None and len(samples) - warned >= 20


def test_cache_is_not_counted_and_usage_at_the_limit_is_no_danger() -> None:
    sample = TimelineSample(
        T0, LIMIT, LIMIT, anon_bytes=100 * MIB, file_bytes=156 * MIB, shmem_bytes=6 * MIB
    )
    assert unreclaimable_bytes(sample) == 106 * MIB
    assert outlook([sample] * 5).forecast is None


def test_failing_reclaim_counts_the_cache_as_held() -> None:
    """With the kernel saying reclaim fails (critical), the cache is not given back either:
    the time left is counted from total usage, and the confidence rises."""
    samples = timeline(linear(60, 0.5), 200, cache_mib=60)
    calm = outlook(samples).forecast
    pressed = outlook(samples, Pressure(medium=3, critical=2)).forecast
    assert calm is not None and pressed is not None
    assert pressed.seconds_to_oom < calm.seconds_to_oom - 60
    assert pressed.confidence > calm.confidence


def test_no_limit_no_forecast() -> None:
    samples = [TimelineSample(T0 + t, t * MIB, None, anon_bytes=t * MIB) for t in range(300)]
    assert outlook(samples).reason == "no memory limit"


def test_the_description_states_time_range_confidence_and_parts() -> None:
    forecast = outlook(timeline(linear(60, 0.5), 200)).forecast
    assert forecast is not None
    text = describe(forecast, "container app of pod shop/web")
    assert text.startswith("container app of pod shop/web will reach its 256 MiB memory limit")
    assert "confidence high (0." in text and "(between " in text
    # one unit style: human sizes and rates (0.5 MiB/s reads as KiB/s), no bare `MiB` figures
    assert re.search(r"steadily at 51\d KiB/s for \d+ s", text), text
    assert re.search(r"growing: anon \d+ MiB \+51\d KiB/s;", text), text
