"""What one walk of the probe directory may cost the agent: bytes, entries, files, seconds
and descriptors, whatever the pods put there (oomwatch.probe.reader enforces them)."""

from __future__ import annotations

from dataclasses import dataclass

# Flight records read from one pod's directory: each rank writes its own file and keeps its
# previous run's (`.prev`), so one 8-GPU pod of two containers holds 32.
FILES_PER_POD_DIR = 32
POD_DIR_ENTRIES = 256  # entries looked at in one per-pod directory per walk
CLOCK_EVERY_ENTRIES = 128  # a listing looks at the clock this often


@dataclass(frozen=True, slots=True)
class ReaderLimits:
    """What the daemon accepts; `allowed_uids` are uid ranges, None accepts any owner."""

    max_file_bytes: int = 1 << 20
    max_files: int = 1024  # flight records read per walk, and kept at once
    max_entries: int = 4096  # directory entries looked at per walk
    max_age_s: float = 3600.0
    # ~3.6 ms to read and check one changed 128-sample file (bench/RESULTS.md): a walk reads
    # ~70 of them at most, and never holds the agent's loop for long.
    max_walk_s: float = 0.25
    keep_samples: int = 128  # the newest samples of a file (two minutes at 1 Hz)
    keep_events: int = 16  # the newest framework OOMs of a file
    budget_bytes: int = 16 << 20  # what all kept records may cost together
    max_held_fds: int = 256  # ring descriptors received from probes' sockets, held at once
    allowed_uids: tuple[range, ...] | None = None
