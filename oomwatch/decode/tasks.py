"""The kernel's task table (`dump_tasks`), columns read from its header in every layout,
and the page size its page counts are in.

Layouts: 3.10 (`nr_ptes`), 4.4-4.14 (`nr_ptes nr_pmds`), 4.19-6.6 (`pgtables_bytes`),
6.8+ (`rss_anon rss_file rss_shmem`), RHEL 6's 2.6.32 (`cpu oom_adj`).  A row is split into
exactly as many numbers as the header has columns, so the name (last column) keeps its inner
spaces.  A grep-filtered fragment may carry rows without their header; the layout is then
inferred from the count of leading numbers.

Page size: the table counts pages, which are 4 KiB on x86 but 8 KiB on sparc64 and often
64 KiB on arm64 and ppc64.  The size is read from the report itself, never assumed
(`page_size_bytes`): the buddy allocator's order-0 block (`Normal: 12*8kB`), show_mem's page
counts against the same fields in kB (`active_file:23` / `Node 0 active_file:184kB`), or the
victim's kill line in kB against its own row in pages.
"""

from __future__ import annotations

import re

from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.incident import TaskRow

_HEADER = lazy_compile(r"\[\s*pid\s*\]\s+(?P<cols>.*\bname)\s*$")
_ROW = lazy_compile(r"\[\s*(?P<pid>\d{1,20})\]\s+(?P<rest>.*)$", re.S)

_FIELD = {
    "uid": "uid",
    "tgid": "tgid",
    "total_vm": "total_vm_pages",
    "rss": "rss_pages",
    "rss_anon": "rss_anon_pages",
    "rss_file": "rss_file_pages",
    "rss_shmem": "rss_shmem_pages",
    "pgtables_bytes": "pgtables_bytes",
    "swapents": "swapents_pages",
    "oom_score_adj": "oom_score_adj",
}

_COMMON = ["uid", "tgid", "total_vm", "rss"]
_TAIL = ["swapents", "oom_score_adj", "name"]
LAYOUT_6_8 = [*_COMMON, "rss_anon", "rss_file", "rss_shmem", "pgtables_bytes", *_TAIL]
LAYOUT_4_19 = [*_COMMON, "pgtables_bytes", *_TAIL]
LAYOUT_4_4 = [*_COMMON, "nr_ptes", "nr_pmds", *_TAIL]
LAYOUT_3_10 = [*_COMMON, "nr_ptes", *_TAIL]


def parse_header(message: str) -> list[str] | None:
    """Column names after `[ pid ]` (ending in `name`), or None if this is not the header."""
    match = _HEADER.match(message)
    return match.group("cols").split() if match else None


def _is_int(token: str) -> bool:
    """A kernel integer: at most 20 digits (64 bits), so int() stays cheap and bounded."""
    digits = token[1:] if token.startswith("-") else token
    return digits.isascii() and digits.isdigit() and len(digits) <= 20  # not ² (isdigit)


def infer_layout(message: str) -> list[str] | None:
    """The layout of a row seen without its header, from how many numbers lead it."""
    match = _ROW.match(message)
    if match is None:
        return None
    tokens = match.group("rest").split(None, 11)
    numbers = 0
    for token in tokens:
        if not _is_int(token):
            break
        numbers += 1
    for layout in (LAYOUT_6_8, LAYOUT_4_4, LAYOUT_4_19):
        width = len(layout) - 1
        if numbers >= width and len(tokens) > width:
            if width == 7:
                # 4.19+ prints page-table bytes (whole pages); 3.10 a small page count.
                pgtables = int(tokens[4])
                return LAYOUT_4_19 if pgtables >= 4096 and pgtables % 1024 == 0 else LAYOUT_3_10
            return layout
    return None


# grep -A/-B prints `--` between groups; a paste may have glued it to the row before.
_GREP_SEPARATOR = lazy_compile(r"\s*--$")
PAGE_SIZES_BYTES = (4096, 8192, 16384, 65536)
# A row this small cannot tell 4 KiB from 8 KiB pages against a kB figure (rounding, and
# the few pages a process may map between the table and the kill line).
_MIN_PAGES = 16
_RATIO_TOLERANCE = 0.03


def row_for(tasks: list[TaskRow], pid: int) -> TaskRow | None:
    """A process's row: by pid, else by tgid (the kill line names the process, while a row
    may be that process's thread: dump_tasks prints the thread find_lock_task_mm chose)."""
    rows = [t for t in tasks if t.pid == pid] or [t for t in tasks if t.tgid == pid]
    return rows[0] if rows else None


def page_bytes_from(kb: int, pages: int) -> int | None:
    """The page size that makes `pages` pages `kb` kB, if one does (within rounding)."""
    if pages < _MIN_PAGES or kb <= 0:
        return None
    ratio = kb * 1024 / pages
    for size in PAGE_SIZES_BYTES:
        if abs(ratio - size) <= _RATIO_TOLERANCE * size:
            return size
    return None


def row_pages(row: TaskRow) -> int | None:
    """The row's resident pages (`rss`, or 6.8+'s anon+file+shmem)."""
    if row.rss_pages is not None:
        return row.rss_pages
    parts = [row.rss_anon_pages, row.rss_file_pages, row.rss_shmem_pages]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def _row_pattern(width: int) -> re.Pattern[str]:
    """`_ROW` and `width` integers (`_is_int`'s) before the name, in one match: what
    `rest.split(None, width)` and a test per token gave, without the tokens."""
    pattern = _ROW_PATTERNS.get(width)
    if pattern is None:
        ints = r"(-?[0-9]{1,20})\s+" * width
        pattern = _ROW_PATTERNS[width] = re.compile(rf"\[\s*(\d{{1,20}})\]\s+{ints}(\S.*)", re.S)
    return pattern


_ROW_PATTERNS: dict[int, re.Pattern[str]] = {}


def parse_row(message: str, columns: list[str]) -> TaskRow | None:
    """One `[pid] uid tgid ... name` row under `columns`; None if it does not fit them."""
    if not columns or columns[-1] != "name":
        return None
    width = len(columns) - 1
    match = _row_pattern(width).match(message)
    if match is None:
        return None
    groups = match.groups()  # pid, the `width` integers, the name: one tuple, in C
    name = groups[width + 1]
    if name.endswith("--"):
        name = _GREP_SEPARATOR.sub("", name) or name
    row = TaskRow(pid=int(groups[0]), name=name)
    for column, value in zip(columns[:width], groups[1 : width + 1], strict=True):
        field = _FIELD.get(column)
        if field is not None:
            setattr(row, field, int(value))
    return row
