"""A gap of chatter ends a report's fill (`windows.GAP_CHARS`): a report cut short costs its
gap of chatter matching, not its whole fill; the gap never skips an anchor, the lines before
one, or a line the assembler needs; pieces decode as the whole text wherever they are cut.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from support.decode_corpus import SETTINGS, assert_same_result, decoded_in_pieces, line_cuts

from oomwatch.decode import decode_lines, decode_text
from oomwatch.decode.windows import GAP_CHARS
from oomwatch.incident import Incident

OPENING = (
    "a.out invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "CPU: 1 PID: 4242 Comm: a.out Not tainted 6.1.0 #1",  # a key line (`PID: `), no anchor
)
CHATTER = "eth0: renamed from veth{:06x}"
REPORT = [  # a whole cgroup v2 memcg report as dmesg prints it, shortened
    "bash invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "CPU: 0 PID: 7788 Comm: bash Not tainted 5.15.0-1064-azure #73-Ubuntu",
    "memory: usage 524288kB, limit 524288kB, failcnt 52",
    "Memory cgroup stats for /kubepods.slice/kubepods-burstable.slice:",
    "anon 532480000",
    "Tasks state (memory values in pages):",
    "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
    "[   7788]     0  7788   140000   130000  1100000        0           996 bash",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/kubepods.slice,task_memcg=/kubepods.slice,task=bash,pid=7788,uid=0",
    "Memory cgroup out of memory: Killed process 7788 (bash) total-vm:560000kB, "
    "anon-rss:520000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1100kB oom_score_adj:996",
]


class _Log:
    """A dmesg log written line by line, its stamps rising as a node's do."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.seconds = 100.0

    def add(self, *messages: str) -> _Log:
        for message in messages:
            self.seconds += 0.0007
            self.lines.append(f"[{self.seconds:12.6f}] {message}")
        return self

    def chatter(self, chars: int) -> _Log:
        """About `chars` characters of keyless chatter lines."""
        written = 0
        while written < chars:
            self.add(CHATTER.format(len(self.lines)))
            written += len(self.lines[-1]) + 1
        return self

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _invoker_pids(incidents: list[Incident]) -> list[int | None]:
    return [i.invoker.pid if i.invoker is not None else None for i in incidents]


def test_a_key_line_within_the_gap_is_taken_and_past_it_is_not() -> None:
    near = _Log().add(OPENING[0]).chatter(GAP_CHARS - 2000).add(OPENING[1]).text()
    far = _Log().add(OPENING[0]).chatter(GAP_CHARS + 2000).add(OPENING[1]).text()
    assert _invoker_pids(decode_text(near).incidents) == [4242]
    assert_same_result(decode_text(near), decode_lines(near.split("\n")))
    # Past a gap the fill has ended: the line is not the cut-short report's, though every
    # line parsed would give it to the report still open (the line path has no gap).
    assert _invoker_pids(decode_text(far).incidents) == [None]
    assert _invoker_pids(decode_lines(far.split("\n")).incidents) == [4242]


def test_gaps_skip_only_chatter_so_whole_reports_after_them_decode_as_every_line_parsed() -> None:
    log = _Log()
    for index in range(4):
        log.add(OPENING[0]).chatter(GAP_CHARS * (index + 1))  # cut short: its fill has gaps
        log.add(*REPORT).chatter(3000)
    text = log.text()
    whole = decode_text(text)
    assert [i.victims[0].pid for i in whole.incidents if i.victims] == [7788] * 4
    assert len(whole.incidents) == 8
    assert_same_result(whole, decode_lines(text.split("\n")))


def _gapped(seed: int) -> str:
    """Cut-short reports, key lines at several distances past them, whole reports."""
    log = _Log()
    for index, distance in enumerate((500, GAP_CHARS - 900, GAP_CHARS + 900, 150_000, 300_000)):
        log.add(OPENING[0]).chatter(distance + seed * 37).add(OPENING[1])
        log.chatter(index * 20_000).add(*REPORT).chatter(700)
    return log.text()


GAPPED = _gapped(0)
GAPPED_MORE = [GAPPED, _gapped(1), _gapped(2)]


def test_gapped_log_in_pieces_of_every_size_decodes_as_the_whole_text() -> None:
    whole = decode_text(GAPPED)
    assert _invoker_pids(whole.incidents)[:4] == [4242, 7788, 4242, 7788]
    for size in (997, 4096, 20_011, GAP_CHARS - 1, 70_001, 1 << 20):
        cuts = list(range(size, len(GAPPED), size))
        assert_same_result(decoded_in_pieces(GAPPED, cuts), whole)
        assert_same_result(decoded_in_pieces(GAPPED, cuts, utf8=True), whole)
    for every in (7, 500, 1700):
        assert_same_result(decoded_in_pieces(GAPPED, line_cuts(GAPPED, every), utf8=True), whole)


@SETTINGS
@given(st.lists(st.integers(1, len(GAPPED) - 1), max_size=40), st.sampled_from(GAPPED_MORE))
def test_gapped_log_in_random_pieces(cuts: list[int], text: str) -> None:
    assert_same_result(
        decoded_in_pieces(text, [c for c in cuts if c < len(text)]), decode_text(text)
    )
