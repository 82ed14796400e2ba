"""The daemon's /dev/kmsg path finds the same kills as decoding the text of the same log."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.decode import (
    ReportAssembler,
    decode_kmsg_records,
    decode_text,
    parse_kmsg_record,
    parse_lines,
)
from oomwatch.incident import Incident

CORPUS = sorted((Path(__file__).resolve().parent.parent / "data" / "corpus").glob("*.log"))
REAL_KMSG = Path(__file__).parent / "data" / "real-6.18-memcg-v1-hostile-comm.kmsg"


def _escape(message: str) -> str:
    """How /dev/kmsg writes a message: `\\`, control bytes and non-ASCII as `\\xNN`."""
    out = []
    for byte in message.encode():
        out.append(f"\\x{byte:02x}" if byte < 32 or byte >= 127 or byte == 92 else chr(byte))
    return "".join(out)


def _as_kmsg(path: Path) -> list[bytes]:
    records = parse_lines(path.read_text(encoding="utf-8").split("\n"))
    return [
        f"{6 if r.level is None else r.level},{seq},{seq * 1000},-;{_escape(r.message)}".encode()
        for seq, r in enumerate(records, 1)
    ]


def _summary(incidents: list[Incident]) -> list[tuple[object, ...]]:
    return [
        (i.kind, i.oom_memcg, i.task_memcg, i.group_kill, [(v.pid, v.comm) for v in i.victims])
        for i in incidents
    ]


# 18 is a terminal paste with repeated lines; as records they would get distinct sequence
# numbers, which a real /dev/kmsg never repeats, so it has no kmsg equivalent.  115 has a
# kill line pasted before its report's header: /dev/kmsg is always in the kernel's order.
KMSG_LIKE = [p for p in CORPUS if not p.name.startswith(("18-", "115-"))]


@pytest.mark.parametrize("path", KMSG_LIKE, ids=[p.name.split("-", 1)[0] for p in KMSG_LIKE])
def test_corpus_as_kmsg_records(path: Path) -> None:
    from_text = decode_text(path.read_bytes()).incidents
    from_kmsg = decode_kmsg_records(_as_kmsg(path)).incidents
    assert _summary(from_kmsg) == _summary(from_text)


def test_feed_kmsg_equals_feed_of_parsed_records() -> None:
    raws = REAL_KMSG.read_bytes().splitlines()
    slow = ReportAssembler()
    slow_incidents: list[Incident] = []
    for raw in raws:
        record = parse_kmsg_record(raw)
        if record is not None:
            slow_incidents += slow.feed(record)
    slow_incidents += slow.flush()
    fast = decode_kmsg_records(raws).incidents
    assert [i.to_dict() for i in fast] == [i.to_dict() for i in slow_incidents]
    assert len(fast) == 1 and fast[0].victims[0].comm == "hog x) total-vm"


def test_scan_needles_cover_every_anchor() -> None:
    """decode_text searches only for the needles; every anchor must contain one."""
    from oomwatch.decode import scan

    for anchor in (*scan._OPENING, *scan._TABLE, *scan._CLOSING):
        assert any(needle in anchor for needle in scan._NEEDLE_SEARCH.needles), anchor
