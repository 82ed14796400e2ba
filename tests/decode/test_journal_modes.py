"""One real report in every `journalctl` text format and month locale decodes to the same kill.

The fixtures are journalctl's own output of a journal file holding a real report
(tests/data/journal-modes/build.py): `short-delta`'s padded first stamp, `--no-hostname`'s
`kernel: memory: usage ...`, month names as eight locales print them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from oomwatch.decode import Reference, decode_lines, decode_text

MODES = Path(__file__).resolve().parent.parent / "data" / "journal-modes"
FILES = sorted(MODES.glob("*.txt"))
# The kill line's entry: __REALTIME_TIMESTAMP 150 us after its printk time (build.py).
KILL_WALL = datetime(2026, 11, 23, 21, 6, 4, 978595)
REFERENCE = Reference(datetime(2026, 11, 24, tzinfo=UTC).timestamp(), "the file's mtime")


def _wall(name: str) -> str | None:
    form = name.split("-", 1)[1].removesuffix(".txt")
    if name.startswith("Asia-Tokyo"):
        return "2026-11-24T06:06:04+09:00"
    return {
        "short-iso": "2026-11-23T21:06:04+00:00",
        "short-full": "2026-11-23T21:06:04+00:00",
        "with-unit": "2026-11-23T21:06:04+00:00",
        "short-iso-precise": KILL_WALL.isoformat() + "+00:00",
        "short-unix": KILL_WALL.isoformat() + "+00:00",
        "short": "2026-11-23T21:06:04",
        "short-no-hostname-k": "2026-11-23T21:06:04",
        "short-precise": KILL_WALL.isoformat(),
    }.get(form)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_format_gives_the_whole_report(path: Path) -> None:
    result = decode_text(path.read_bytes(), REFERENCE)
    assert result.warnings == []
    (incident,) = result.incidents
    assert (incident.kind, incident.constraint) == ("memcg", "CONSTRAINT_MEMCG")
    assert incident.memcg is not None and incident.memcg.limit_bytes == 65536 * 1024
    assert incident.invoker is not None and incident.invoker.comm == "grower"
    assert incident.invoker.pid == 17782
    assert [(v.pid, v.comm, v.anon_rss_bytes) for v in incident.victims] == [
        (17782, "grower", 71808 * 1024)
    ]
    assert [t.name for t in incident.tasks] == ["grower"]
    assert incident.memcg_stats is not None and incident.memcg_stats["rss"] == 66969600
    assert incident.wall_time == _wall(path.name)
    monotonic = "monotonic" in path.name or "delta" in path.name
    assert incident.kernel_time_s == (5175.978445 if monotonic else None)
    text = path.read_text(encoding="utf-8")
    assert [i.to_dict() for i in decode_lines(text.split("\n"), REFERENCE).incidents] == [
        incident.to_dict()
    ]
