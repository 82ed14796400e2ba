"""What the kernel prints for "no limit", apart from the incident model so that readers of
older record shapes (`incident_v1`) and the model itself share it without importing each other."""

from __future__ import annotations

# A limit at or above this is the kernel's "no limit" (v1 prints PAGE_COUNTER_MAX pages in kB,
# 9007199254740988kB; v2 a similar huge value): 4 PiB is not a limit anyone set.
UNLIMITED_BYTES = 1 << 52
