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
from oomwatch.decode.records import MAX_MESSAGE_CHARS, kmsg_record_from_text
from oomwatch.incident import Incident
from oomwatch.sources.kmsg import read_backlog

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
    from oomwatch.decode import windows

    for anchor in (*windows._OPENING, *windows._TABLE, *windows._CLOSING):
        assert any(needle in anchor for needle in windows._NEEDLE_SEARCH.needles), anchor


def _text_parse(raw: bytes) -> object:
    """The record as the text parser reads it once decoded (the bytes parser's reference)."""
    semicolon = raw.find(b";", 0, 256)
    if semicolon < 0 or not raw[:1].isdigit():
        return None
    return kmsg_record_from_text(
        raw[: MAX_MESSAGE_CHARS + semicolon + 1].decode("utf-8", "replace")
    )


_REAL_RECORDS = [
    raw
    for path in [REAL_KMSG, *sorted(REAL_KMSG.parents[1].glob("kernel-v2/*/*.kmsg"))]
    for raw in read_backlog(str(path))
]
_HOSTILE_HEADERS = [
    b"6,1,2,-;",
    b"6,1,2,-",
    b"6,1,2;x",
    b"6,1,2,x;x",
    b"6,1,2,-,caller=T1;m",
    b"6,1,2,c;m",
    b"6,1,2,+;m\r",
    b"14,1,2,-;user",
    b"1234,1,2,-;m",
    b"6,,2,-;m",
    b"6,1,,-;m",
    b",1,2,-;m",
    b"6,1,2,-" + b"x" * 200 + b";m",
    b"6,1,2,-" + b"x" * 199 + b";m",
    b"6,1,2,-" + "\u00e9".encode() * 150 + b";m",
    b"6,1,2,-\n;m",
    b"6,1,2,-;a\nb",
    b"6,1,2,-;" + b"\xff\xfe" + b"\\xc3\\xa9\\x0a",
    b"6,1,2,-;" + b"y" * 20000,
    b"6,1,2,-;" + "\u00e9".encode() * 9000,
    b"6,123456789012345678901,2,-;m",
    b"",
    b"x6,1,2,-;m",
    b"6,1,2,-;m\n SUBSYSTEM=memory\n DEVICE=+memory:x\n",
]


@pytest.mark.parametrize("raw", _REAL_RECORDS + _HOSTILE_HEADERS)
def test_kmsg_records_parse_on_the_bytes_as_their_text_parses(raw: bytes) -> None:
    """The agent's bytes parser gives every record the text parser gives it: real captures
    and hostile headers, escapes, invalid UTF-8, over-long records."""
    assert parse_kmsg_record(raw) == _text_parse(raw)
