"""A container's memory timeline in memory: flat typed arrays, decimated past the last minute.

One `TimelineSample` object per sample would be ~150 bytes; nine 8-byte values are 72, and
past the last minute only each 10 s step's lowest and highest are kept.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oomwatch.incident import TimelineSample

_Timed = tuple[float, tuple[int, ...]]  # (time, row)


_WIDTH = 8  # byte counts per sample (usage, limit, anon, file, shmem, thp, kernel, inactive)


@dataclass(frozen=True, slots=True)
class FrozenRing:
    """A ring's samples at one moment, oldest first, as the two arrays' bytes: a value
    another thread may hold (nothing in it changes), 72 bytes a sample, decoded when read."""

    times: bytes = b""  # float64 each
    values: bytes = b""  # _WIDTH int64 each, -1 for None

    @classmethod
    def of(cls, samples: Iterable[TimelineSample]) -> FrozenRing:
        times, values = array("d"), array("q")
        for s in samples:
            times.append(s.t_seconds)
            values.extend(
                -1 if v is None else v
                for v in (
                    s.usage_bytes,
                    s.limit_bytes,
                    s.anon_bytes,
                    s.file_bytes,
                    s.shmem_bytes,
                    s.thp_bytes,
                    s.kernel_bytes,
                    s.inactive_file_bytes,
                )
            )
        return cls(times.tobytes(), values.tobytes())

    def samples(self) -> list[TimelineSample]:
        times, values = array("d"), array("q")
        times.frombytes(self.times)
        values.frombytes(self.values)
        return [
            SampleColumns.sample_of(t, values[i * _WIDTH : (i + 1) * _WIDTH])
            for i, t in enumerate(times)
        ]


class SampleColumns:
    """A circular buffer of samples in two flat typed arrays (the times, and the eight byte
    counts of each sample one after another): no object per sample, two arrays per buffer
    (nine were ~1 KiB of headers and slack per container).  `None` is stored as -1 (no byte
    count is negative).  With `grow` the arrays start empty and grow to `capacity` as
    samples come (a calm container, sampled every 10 s, never fills the last minute's 61
    slots, nor its decimated past's)."""

    __slots__ = ("_next", "_times", "_values", "capacity", "size")

    def __init__(self, capacity: int, *, grow: bool = False) -> None:
        self.capacity = capacity
        self.size = 0
        self._next = 0
        n = 0 if grow else capacity
        self._times = array("d", bytes(8 * n))
        self._values = array("q", bytes(8 * _WIDTH * n))

    def oldest(self) -> _Timed | None:
        """The sample the next append overwrites, while full."""
        if self.size < self.capacity:
            return None
        i = self._next
        return self._times[i], tuple(self._values[i * _WIDTH : (i + 1) * _WIDTH])

    def append(self, t_s: float, row: tuple[int, ...]) -> None:
        if len(row) != _WIDTH:
            raise ValueError(f"a sample has {_WIDTH} byte counts, not {len(row)}")
        i = self._next
        if i == len(self._times):  # still growing (only before the first wrap)
            self._times.append(t_s)
            self._values.extend(row)
        else:
            self._times[i] = t_s
            self._values[i * _WIDTH : (i + 1) * _WIDTH] = array("q", row)
        self._next = 0 if i + 1 == self.capacity else i + 1
        if self.size < self.capacity:
            self.size += 1

    def last_usage(self) -> int:
        return self._values[((self._next - 1) % self.capacity) * _WIDTH] if self.size else -1

    def last_time_s(self) -> float | None:
        return self._times[(self._next - 1) % self.capacity] if self.size else None

    def arrays(self) -> tuple[array[float], array[int]]:
        """Copies of the times and the rows, oldest first."""
        if not self.size:
            return array("d"), array("q")
        start = (self._next - self.size) % self.capacity
        end = start + self.size
        if end <= len(self._times):
            return self._times[start:end], self._values[start * _WIDTH : end * _WIDTH]
        end -= self.capacity
        times = self._times[start:] + self._times[:end]
        return times, self._values[start * _WIDTH :] + self._values[: end * _WIDTH]

    def samples(self) -> list[TimelineSample]:
        """Oldest first."""
        start = (self._next - self.size) % self.capacity
        out = []
        for k in range(self.size):
            i = (start + k) % self.capacity
            out.append(self.sample_of(self._times[i], self._values[i * _WIDTH : (i + 1) * _WIDTH]))
        return out

    @staticmethod
    def sample_of(t_s: float, row: Sequence[int]) -> TimelineSample:
        usage, *rest = row
        return TimelineSample(t_s, usage, *(None if v < 0 else v for v in rest))


class DecimatedRing:
    """The last `window_s` of one cgroup: every sample of the last `fine_s`, and before that
    the lowest- and the highest-usage sample of each `coarse_step_s` (in their order), so the
    peaks a forecast compares with (a sawtooth's, the one growth must pass again), the drops
    that start a cycle and the start of a rise all survive.  A 10-minute window at 1 Hz is
    then at most 173 samples (12 KiB), not 601 (43 KiB).
    """

    __slots__ = ("_bucket", "_coarse", "_coarse_step_s", "_fine")

    def __init__(self, interval_s: float, window_s: float, fine_s: float, coarse_step_s: float):
        fine_span_s = min(window_s, fine_s)
        self._fine = SampleColumns(max(1, int(fine_span_s / interval_s) + 1), grow=True)
        coarse_span_s = window_s - fine_span_s
        self._coarse_step_s = max(coarse_step_s, interval_s)
        self._coarse = (
            SampleColumns(2 * (int(coarse_span_s / self._coarse_step_s) + 1), grow=True)
            if coarse_span_s > 0
            else None
        )
        # (step start, (t, row) of its lowest usage, (t, row) of its highest) being filled
        self._bucket: tuple[float, _Timed, _Timed] | None = None

    @property
    def capacity(self) -> int:
        return self._fine.capacity + (self._coarse.capacity + 2 if self._coarse else 0)

    def append(self, t_s: float, row: tuple[int, ...]) -> None:
        """One sample: usage, limit, anon, file, shmem, thp, kernel, inactive file (-1: None)."""
        leaving = self._fine.oldest()
        if leaving is not None and self._coarse is not None:
            self._keep_coarse(leaving)
        self._fine.append(t_s, row)

    def _keep_coarse(self, sample: _Timed) -> None:
        assert self._coarse is not None
        bucket = self._bucket
        if bucket is not None and sample[0] - bucket[0] < self._coarse_step_s:
            start, low, high = bucket
            if sample[1][0] < low[1][0]:
                low = sample
            if sample[1][0] > high[1][0]:
                high = sample
            self._bucket = (start, low, high)
            return
        if bucket is not None:
            for t_s, row in self._kept(bucket):
                self._coarse.append(t_s, row)
        self._bucket = (sample[0], sample, sample)

    @staticmethod
    def _kept(bucket: tuple[float, _Timed, _Timed]) -> list[_Timed]:
        _, low, high = bucket
        if low[0] == high[0]:
            return [low]
        return [low, high] if low[0] < high[0] else [high, low]

    def last_usage(self) -> int:
        """The usage of the latest sample (-1: none yet)."""
        return self._fine.last_usage()

    def last_time_s(self) -> float | None:
        """When the latest sample was taken (None: none yet): a new one changes it."""
        return self._fine.last_time_s()

    def frozen(self) -> FrozenRing:
        """The samples as `samples()` gives them, copied as bytes (no object per sample)."""
        times, values = self._fine.arrays()
        if self._coarse is not None:
            older_times, older_values = self._coarse.arrays()
            if self._bucket is not None:
                for t_s, row in self._kept(self._bucket):
                    older_times.append(t_s)
                    older_values.extend(row)
            times, values = older_times + times, older_values + values
        return FrozenRing(times.tobytes(), values.tobytes())

    def samples(self) -> list[TimelineSample]:
        """Oldest first."""
        if self._coarse is None:
            return self._fine.samples()
        older = self._coarse.samples()
        if self._bucket is not None:
            older += [SampleColumns.sample_of(t_s, row) for t_s, row in self._kept(self._bucket)]
        return older + self._fine.samples()
