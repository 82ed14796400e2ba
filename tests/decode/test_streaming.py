"""A log decoded in pieces (how `oomwatch report` streams a file) gives exactly what the
whole text gives, wherever the pieces are cut: mid-report, mid-line, mid-task-table.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.decode_corpus import assert_same_result, decoded_in_pieces, line_cuts

from oomwatch.decode import TextScanner, decode_lines, decode_text, parse_lines, scan
from oomwatch.decode.prefixes import LineParser

CORPUS = sorted((Path(__file__).resolve().parent.parent / "data" / "corpus").glob("*.log"))
CHATTER = (
    "[ 5000.000001] eth0: renamed from veth1234",
    "[ 5000.000002] IPv6: ADDRCONF(NETDEV_CHANGE): cali99: link becomes ready",
    "May 19 18:14:43 node kernel: EXT4-fs (sda1): mounted filesystem",
    "",
    "    indented continuation of something else",
)


def test_corpus_is_there() -> None:
    assert len(CORPUS) == 115


@pytest.mark.parametrize("path", CORPUS, ids=[p.name.split("-", 1)[0] for p in CORPUS])
def test_corpus_file_in_pieces(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    whole = decode_text(text)
    assert_same_result(whole, decode_lines(text.split("\n")))
    for every in (1, 2, 5):
        assert_same_result(decoded_in_pieces(text, line_cuts(text, every)), whole)
    for size in (1, 97, 4096):
        assert_same_result(decoded_in_pieces(text, list(range(size, len(text), size))), whole)
    # with their bytes: cut at lines (the carried lines and the piece searched apart), and
    # not (searched as one text)
    assert_same_result(decoded_in_pieces(text, line_cuts(text, 3), utf8=True), whole)
    assert_same_result(decoded_in_pieces(text, list(range(97, len(text), 97)), utf8=True), whole)


def _synthetic(seed: int) -> str:
    """Every corpus report between runs of chatter, plus an over-long line inside a report
    (its warning carries a line number) and a long task table (a fill across many pieces)."""
    rng = random.Random(seed)
    parts: list[str] = []
    for path in CORPUS:
        parts.extend(rng.choice(CHATTER) for _ in range(rng.randrange(0, 9)))
        lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
        if path.name.startswith("02"):
            lines.insert(3, "[ 1.0] " + "x" * 20_000)
        if path.name.startswith("20"):  # a global report: the task table of a whole node
            table = next(i for i, line in enumerate(lines) if "[  pid  ]" in line or "tgid" in line)
            lines[table + 1 : table + 1] = [lines[table + 1]] * 300
        parts.extend(lines)
    return "\n".join(parts) + "\n"


SYNTHETIC = _synthetic(5)


def test_synthetic_log_fast_scan_equals_line_by_line() -> None:
    whole = decode_text(SYNTHETIC)
    assert len(whole.incidents) >= 35
    assert any(w.startswith("line ") for w in whole.warnings)  # line numbers are compared
    assert_same_result(whole, decode_lines(SYNTHETIC.split("\n")))


# Chatter the scanner skips in runs (`scan._CHATTER_SHAPE`), and near misses it must feed:
# a key, a `$` end mark, a tmux marker, a trailing blank, `host kernel:`, a caller id.
INSIDE_CHATTER = (
    "[ 5000.000001] eth0: renamed from veth1234",
    "[ 5000.000002] cni0: port 3(veth9) entered forwarding state",
    "[ 5000.000003] audit: type=1400 apparmor=STATUS pid=77",
    "[ 5000.000004] EXT4-fs (sda1): 12 kB free",
    "[ 5000.000005] line that ends in a mark$",
    "[ 5000.000006] tmux scroll  [3/40]",
    "[ 5000.000007] trailing blank ",
    "[ 5000.000008] node kernel: relayed",
    "[ 5000.000009] [  T42] with a caller id",
    "[ 5000.000010] Node 0 active_anon:1kB",
)


@pytest.mark.parametrize("seed", range(4))
def test_chatter_inside_reports_decodes_as_line_by_line(seed: int) -> None:
    """Runs of chatter inside each corpus report (between its header, stats, task table
    and kill lines): the scan that skips such runs gives what every line parsed gives."""
    rng = random.Random(seed)
    parts: list[str] = []
    for path in CORPUS:
        lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
        if seed % 2:  # re-stamped as dmesg prints it: memcg stats lines become chatter-shaped
            records = parse_lines(lines)
            lines = [f"[{5000 + n / 1e4:12.6f}] {r.message}" for n, r in enumerate(records)]
        for line in lines:
            parts.append(line)
            if rng.random() < 0.3:
                parts.extend(rng.choice(INSIDE_CHATTER) for _ in range(rng.randrange(1, 12)))
    text = "\n".join(parts) + "\n"
    whole = decode_text(text)
    assert len(whole.incidents) >= 35
    assert_same_result(whole, decode_lines(text.split("\n")))
    assert_same_result(decoded_in_pieces(text, list(range(4096, len(text), 4096))), whole)


# The chatter patterns as written before their repeats were made possessive (`scan`).
_BACKTRACKING_BODY = scan._CHATTER_BODY.replace("{0,4000}+", "{0,4000}")
_BACKTRACKING_RUN = re.compile(rf"(?:{_BACKTRACKING_BODY}\n)*")
_CHATTER_LINES = st.builds(
    lambda stamp, first, middle, end: f"[{stamp}] {first}{middle}{end}",
    st.sampled_from(["    5.000001", "5.1", "12345678901234.1", " 5.x", "\u0665.1"]),
    st.sampled_from(["a", " ", "[", "]", "$", "\x85"]),
    st.one_of(st.text(max_size=8), st.sampled_from(["x" * 3998, "x" * 3999, "x" * 4000])),
    st.sampled_from(["", " ", "]", "$", "\t", "\u2028", "z"]),
)


@given(st.lists(_CHATTER_LINES, max_size=6), st.text(max_size=4))
def test_possessive_chatter_patterns_take_what_backtracking_took(
    lines: list[str], tail: str
) -> None:
    """A chatter line ends only where `[^\\n]` stops, so the possessive repeats find the same
    lines and runs as the backtracking ones (they only fail sooner)."""
    for line in [*lines, tail]:
        took = re.fullmatch(_BACKTRACKING_BODY, line) is not None
        assert (scan._CHATTER_SHAPE.fullmatch(line) is not None) == took
    text = "\n".join(lines) + "\n" + tail
    for start in (0, len(lines[0]) + 1 if lines else 0):
        run = scan._CHATTER_RUN.match(text, start)
        backtracking = _BACKTRACKING_RUN.match(text, start)
        assert run is not None and backtracking is not None
        assert run.end() == backtracking.end()


@settings(
    max_examples=int(os.environ.get("OOMWATCH_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(st.integers(0, len(SYNTHETIC)), max_size=60), st.integers(200, 5000), st.booleans())
def test_synthetic_log_in_random_pieces(cuts: list[int], step: int, utf8: bool) -> None:
    """Random cut points, plus a cut every `step` characters: reports straddle the cuts."""
    cuts += list(range(step, len(SYNTHETIC), step))
    assert_same_result(decoded_in_pieces(SYNTHETIC, cuts, utf8), decode_text(SYNTHETIC))


@pytest.mark.parametrize("utf8", [False, True])
@pytest.mark.parametrize("every", [10, 11, 12, 30, 200])
def test_pieces_of_many_lines_scanned_in_place_decode_like_the_whole_text(
    every: int, utf8: bool
) -> None:
    """A piece of more than `_LEAD_LINES` lines is scanned in two: its first lines joined to
    the lines carried over, then the rest in place, after what that scan carried (the same
    as two pieces); fewer (10) are joined whole."""
    assert_same_result(
        decoded_in_pieces(SYNTHETIC, line_cuts(SYNTHETIC, every), utf8), decode_text(SYNTHETIC)
    )


@pytest.mark.parametrize("every", [1, 7, 400])
def test_pieces_with_their_bytes_decode_like_the_whole_text(every: int) -> None:
    """Pieces cut at lines, each with its bytes (how `oomwatch report` feeds them): the
    anchors are searched in the bytes, apart from the lines carried over, and the ASCII
    windows' keys in views of them; lines of CJK and emoji make some pieces not ASCII."""
    lines = SYNTHETIC.split("\n")
    for at in range(0, len(lines), 997):
        lines[at] = f"[ 1.{at}] \u751f\u6210rpm\u65f6 \U0001f600 caf\xe9"
    text = "\n".join(lines)
    whole = decode_text(text)
    assert_same_result(decoded_in_pieces(text, line_cuts(text, every), utf8=True), whole)
    assert_same_result(decode_lines(text.split("\n")), whole)


def test_piece_with_no_settled_line_waits_for_more() -> None:
    text = CORPUS[1].read_text(encoding="utf-8")
    scanner = TextScanner()
    for line in text.splitlines(keepends=True):
        scanner.feed("")
        scanner.feed(line)
    assert_same_result(scanner.close(), decode_text(text))


# What may follow a chatter line: its terminal wrap, a continuation, a `$` mark, a blank,
# another record (the held chatter record must come out of each as `feed` left it).
_AFTER_CHATTER = (
    "wrapped rest of the line",
    "        indented continuation",
    "[ 5000.5] next$",
    "",
    "[ 5000.6] another line",
    "<4>[ 5000.7] Node 0 active_anon:1kB",
)


@given(_CHATTER_LINES, st.sampled_from(["[ 4999.1] before", "  cont", "x" * 90, ""]))
@example("[    5.000001] eth0: renamed from veth1234", "x" * 90)
@example("[ 5.1] Memory cgroup out of memory: Killed process 7 (a b) total-vm:1kB", "  cont")
def test_lean_chatter_feed_leaves_the_parser_as_feed_does(line: str, before: str) -> None:
    """`LineParser.feed_chatter` (what the scanner uses for a line of chatter's shape) gives
    the records, and leaves the state, that `feed` does: every line that may follow and the
    end of input get the same records from both."""
    shape = scan._CHATTER_SHAPE.fullmatch(line)
    if shape is None or "kernel: " in line or "login: " in line:
        return
    for after in _AFTER_CHATTER:
        general, lean = LineParser(), LineParser()
        assert general.feed(before, 2) == lean.feed(before, 2)
        released = lean.feed_chatter(line, 3, shape.end(1) + 2, float(shape.group(1)))
        assert general.feed(line, 3) == released
        assert general.held == lean.held
        assert general.feed(after, 4) == lean.feed(after, 4)
        assert general.finish() == lean.finish()


@pytest.mark.parametrize("group", [False, True])
def test_chatter_around_orphan_rows_and_kills_decodes_as_line_by_line(group: bool) -> None:
    """Chatter lines the scanner hands on as keyless records (`feed_keyless`): after orphan
    task rows (which they end), inside a group kill's members, and with a long one that a
    wrapped line continues (a new record, taken in full)."""
    rows = [
        "[ 6000.000001] [  101]     0   101    10000     2000   65536        0          0 app",
        "[ 6000.000002] [  102]     0   102    10000     2000   65536        0          0 app",
    ]
    chatter = "[ 6000.000003] eth0: renamed from veth1234 and a few more words to pass the wrap"
    kill = (
        "[ 6000.000010] Memory cgroup out of memory: Killed process {pid} (app)"
        " total-vm:40000kB, anon-rss:8000kB, file-rss:0kB, shmem-rss:0kB, UID:0"
        " pgtables:100kB oom_score_adj:{adj}"
    )
    lines = [
        *rows,
        chatter,
        "[ 6000.000004] cni0: port 3(veth9) entered forwarding state",
        *rows,
        chatter,
        "continued on the next line 0 active_anon:1kB",
        "[ 6000.000005] app invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0,"
        " oom_score_adj=0",
        chatter,
        "[ 6000.000006] memory: usage 8000kB, limit 8000kB, failcnt 3",
        chatter,
    ]
    group_line = (
        "[ 6000.000011] Tasks in /kubepods/pod1 are going to be killed due to memory.oom.group set"
    )
    for pid in (101, 102, 103):
        lines += [kill.format(pid=pid, adj=0), chatter, chatter, chatter]
        if group and pid == 101:
            lines.append(group_line)
    text = "\n".join(lines) + "\n"
    whole = decode_text(text)
    victims = [[v.pid for v in incident.victims] for incident in whole.incidents]
    assert victims == ([[101, 102, 103]] if group else [[101], [102], [103]])
    first = whole.incidents[0]
    assert first.memcg is not None and first.memcg.usage_bytes == 8000 * 1024
    assert not first.tasks  # the orphan rows were ended by the chatter after them
    assert_same_result(whole, decode_lines(text.split("\n")))
    for every in (1, 2, 3):
        assert_same_result(decoded_in_pieces(text, line_cuts(text, every)), whole)


def _stamped(messages: list[str]) -> str:
    return "".join(f"[{100 + n / 1e4:12.6f}] {m}\n" for n, m in enumerate(messages))


_LONG_CHATTER = [f"eth0: renamed from veth{n:06x}" for n in range(1000)]  # ~45,000 characters
# A report's fill reaching on through long chatter (a report cut short, or one whose lines
# come far apart) to a line that is its own: each decodes, whole or in pieces, as every line
# parsed does (a review of a rule that ended fills at 32 KiB of chatter found pieces and the
# whole text apart here, and both apart from the line path).
_HEADER = "a.out invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
_KILL = (
    "Memory cgroup out of memory: Killed process 4242 (a.out) total-vm:560000kB, "
    "anon-rss:520000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1100kB oom_score_adj:0"
)
_ROW = "[   7788]     0  7788   140000   130000  1100000        0           996 bash"
_FAR_APART = {
    "kill after a cut-short header": _stamped([_HEADER, *_LONG_CHATTER[:732], _KILL]),
    "task row after memcg stats": _stamped(
        ["Memory cgroup stats for /kubepods.slice:", "anon 532480000", *_LONG_CHATTER, _ROW]
    ),
    "row, then a v1 memcg line": _stamped(
        [
            _HEADER,
            *_LONG_CHATTER[:800],
            _ROW,
            *_LONG_CHATTER[:10],
            "Task in /kubepods/x killed as a result of limit of /kubepods/x",
        ]
    ),
}


# What each decodes to: (kind, victims, task rows) per incident.
_FAR_APART_DECODED = {
    "kill after a cut-short header": [("memcg", [4242], [])],
    "task row after memcg stats": [("memcg", [], [7788])],
    "row, then a v1 memcg line": [("unknown", [], [7788]), ("memcg", [], [])],
}


@pytest.mark.parametrize("name", sorted(_FAR_APART))
def test_lines_far_apart_decode_alike_whole_in_pieces_and_line_by_line(name: str) -> None:
    text = _FAR_APART[name]
    whole = decode_text(text)
    decoded = [
        (i.kind, [v.pid for v in i.victims], [r.pid for r in i.tasks]) for i in whole.incidents
    ]
    assert decoded == _FAR_APART_DECODED[name]
    assert_same_result(whole, decode_lines(text.split("\n")))
    last = text.rindex("\n", 0, len(text) - 1) + 1  # the far line
    for cuts in ([last], [last + 50], list(range(4096, len(text), 4096)), line_cuts(text, 21)):
        assert_same_result(decoded_in_pieces(text, cuts), whole)
        assert_same_result(decoded_in_pieces(text, cuts, utf8=True), whole)
