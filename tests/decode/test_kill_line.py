"""The kill line's fast reading (`killed_now`, 4.19+ kernels) is a shortcut, not a second
reading: wherever it reads a line, the general `_KILLED` matches it with the same fields,
whatever the (hostile) name holds.  Every kill line of the test data is checked, and
generated ones."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomwatch.decode.kill_lines import _KILLED, killed_now

DATA = Path(__file__).resolve().parent.parent / "data"
_KILL_AT = re.compile(r"(?:Memory cgroup out of memory: |Out of memory: |Killed process )")
FIELDS = ("msg", "pid", "comm", "vm", "anon", "file", "shmem", "uid", "pgt", "adj")


def agree(message: str) -> bool:
    """False only where the fast pattern reads the line and the general one reads it otherwise;
    True when the fast one matched (the general then matched alike)."""
    fast = killed_now(message)
    if fast is None:
        return False
    general = _KILLED.match(message)
    assert general is not None, message
    assert general.group("uid_old") is None and general.group("uid_rh7") is None, message
    assert fast == general.group(*FIELDS), message
    return True


def data_kill_lines() -> list[str]:
    out = []
    for path in DATA.rglob("*"):
        if not path.is_file() or path.stat().st_size > 4 << 20:
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        for line in text.splitlines():
            if "Killed process " not in line:
                continue
            found = _KILL_AT.search(line)
            if found is not None:
                out.append(line[found.start() :].replace("\\n", "\n").rstrip('",'))
    return out


def test_every_kill_line_of_the_test_data_reads_the_same_either_way() -> None:
    lines = data_kill_lines()
    fast = [line for line in lines if agree(line)]
    assert len(lines) > 100 and len(fast) > 50, (len(lines), len(fast))


NAME = st.text(alphabet=st.sampled_from(list("ab() ,:.\n-kBUID_vmanorsty0123456789")), max_size=60)
NUMBER = st.integers(0, 10**21).map(str)


@settings(
    max_examples=int(os.environ.get("OOMWATCH_HYPOTHESIS_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    prefix=st.sampled_from(
        [
            "",
            "Memory cgroup out of memory: ",
            "Out of memory: ",
            "out of memory: ",
            "Out of memory (oom_kill_allocating_task): ",
        ]
    ),
    name=NAME,
    numbers=st.lists(NUMBER, min_size=9, max_size=9),
    tail=st.sampled_from(["", " ", ".", "\n", ") total-vm:1kB"]),
)
def test_a_generated_kill_line_reads_the_same_either_way(
    prefix: str, name: str, numbers: list[str], tail: str
) -> None:
    pid, vm, anon, file, shmem, uid, pgt, adj, _ = numbers
    line = (
        f"{prefix}Killed process {pid} ({name}) total-vm:{vm}kB, anon-rss:{anon}kB, "
        f"file-rss:{file}kB, shmem-rss:{shmem}kB, UID:{uid} pgtables:{pgt}kB "
        f"oom_score_adj:-{adj}{tail}"
    )
    agree(line)
