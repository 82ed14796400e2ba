"""The THP capability check that real-kill tests skip on (with the reason printed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.lab import thp_unavailable_reason


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("always [madvise] never\n", None),
        ("[always] madvise never\n", None),
        ("always madvise [never]\n", "transparent hugepages are disabled ([never])"),
        (None, "no transparent hugepage support in this kernel"),
    ],
)
def test_thp_unavailable_reason(tmp_path: Path, content: str | None, reason: str | None) -> None:
    enabled = tmp_path / "enabled"
    if content is not None:
        enabled.write_text(content)
    assert thp_unavailable_reason(enabled) == reason
