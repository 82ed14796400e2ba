"""support.kernel_tree: the findings a node's THP setting adds to any anonymous-memory kill."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.kernel_tree import node_findings


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("[always] madvise never\n", {"thp-hidden"}),
        ("always [madvise] never\n", set()),
        ("always madvise [never]\n", set()),
        (None, set()),  # no THP in the kernel
    ],
)
def test_thp_always_adds_thp_hidden_to_every_anonymous_kill(
    tmp_path: Path, content: str | None, expected: set[str]
) -> None:
    enabled = tmp_path / "enabled"
    if content is not None:
        enabled.write_text(content)
    assert node_findings(enabled) == expected
