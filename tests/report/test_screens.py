"""Screenshot tests: the text and HTML reports of a 300-kill log and of a real group kill
(corpus 01), rendered by headless Chromium and checked for what a reader sees: the summary
in the first screen, nothing running off the page, round axis ticks, a page of bounded
height.  The text report is shown as a 120-column terminal shows it (long lines wrap).

`OOMWATCH_SCREENSHOTS=DIR` keeps the screenshots (tests/report/browser.py).
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import pytest
from PIL import Image
from support.report_cli import ReportRun, corpus_file

from .browser import chromium, dom, screenshot
from .logs import three_hundred_kills

pytestmark = pytest.mark.slow

# The terminal: 120 columns of 9 px, rows of 18 px, light text on a dark background.
COLUMNS, CHAR_PX, ROW_PX, PAD_PX = 120, 9, 18, 8
TERMINAL_BG = (30, 30, 30)
PAGE_BG = (250, 250, 250)
PAGE_RIGHT_PX = 24 + 1000  # body margin + max-width: nothing may be drawn right of it
VERDICT_BORDER = (214, 39, 40)
SUMMARY_HEAD_BG = (240, 240, 240)
ANON_PIXEL = (122, 154, 189)  # #4e79a7 at 75 % over white

RGB = tuple[int, int, int]


def _terminal(text: str, path: Path) -> Path:
    """The text report as a page that renders like a 120-column terminal."""
    style = (
        f"body{{margin:0;background:rgb{TERMINAL_BG}}}"
        f"pre{{margin:0;padding:0 {PAD_PX}px;width:{COLUMNS * CHAR_PX}px;color:#ddd;"
        f"font:15px/{ROW_PX}px monospace;white-space:pre-wrap}}"
        f"pre span{{display:inline-block;width:{CHAR_PX}px}}"
    )
    # Each character sits in a fixed 9 px cell, whatever the monospace font's own advance.
    cells = "".join(f"<span>{html.escape(c)}</span>" if c != "\n" else "\n" for c in text)
    path.write_text(f"<!DOCTYPE html><meta charset=utf-8><style>{style}</style><pre>{cells}</pre>")
    return path


def _rgb(value: object) -> tuple[int, int, int]:
    """A pixel of an RGB(A) image as (r, g, b) (Pillow types it as any band layout)."""
    assert isinstance(value, tuple) and len(value) >= 3, value
    return int(value[0]), int(value[1]), int(value[2])


def _colours(image: Image.Image, box: tuple[int, int, int, int]) -> list[tuple[int, RGB]]:
    """(pixel count, colour) of every colour in `box`."""
    region = image.crop(box).convert("RGB")
    return [(count, _rgb(colour)) for count, colour in region.getcolors(1 << 20) or []]


def _distance(a: RGB, b: RGB) -> int:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _ink(image: Image.Image, box: tuple[int, int, int, int], background: RGB) -> int:
    """Pixels in `box` that differ from the background (text, lines, fills)."""
    return sum(
        count for count, colour in _colours(image, box) if _distance(colour, background) > 40
    )


def _rows_with_ink(image: Image.Image, rows: int) -> list[bool]:
    width = PAD_PX + COLUMNS * CHAR_PX
    return [
        _ink(image, (0, r * ROW_PX, width, (r + 1) * ROW_PX), TERMINAL_BG) > 0 for r in range(rows)
    ]


def _expected_rows(lines: list[str]) -> list[bool]:
    """Which terminal rows these lines ink once wrapped at COLUMNS."""
    rows: list[bool] = []
    for line in lines:
        rows += [bool(line.strip())] * max(1, math.ceil(len(line) / COLUMNS))
    return rows


def _content_bottom(image: Image.Image) -> int:
    """The lowest drawn pixel row of a page screenshot."""
    grey = image.convert("RGB").point(lambda v: 255 if abs(v - PAGE_BG[0]) > 6 else 0).convert("L")
    box = grey.getbbox()
    assert box is not None, "blank page"
    return box[3]


def _round_ticks(labels: list[str]) -> None:
    """Tick labels are 0 and multiples of one 1/2/5 × 10^n step, in one unit."""
    values, units = [], set()
    for label in labels:
        number, _, unit = label.partition(" ")
        values.append(abs(float(number)))
        if unit:
            units.add(unit)
    assert len(units) == 1, labels
    values.sort()
    step = values[1] - values[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in (1, 2, 5), labels
    assert all(abs(v / step - round(v / step)) < 1e-6 for v in values), labels


def _ticks(page_dom: str, axis: str) -> list[list[str]]:
    """The tick labels of every plot on the page, one list per plot."""
    plots = re.findall(r"<svg .*?</svg>", page_dom, re.S)
    return [re.findall(rf'class="tick tick-{axis}"[^>]*>([^<]*)<', plot) for plot in plots]


@pytest.fixture(scope="module")
def log300(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("screens") / "node-300-kills.log"
    path.write_text(three_hundred_kills())
    return path


def test_text_300_kills_summary_fills_the_first_screen(
    report: ReportRun, log300: Path, tmp_path: Path
) -> None:
    binary = chromium()
    out = report(str(log300)).out
    lines = out.splitlines()
    table_end = lines.index("", 2)  # headline, blank, then the table up to the next blank
    assert lines[2].split()[:2] == ["#", "time"] and table_end == 20  # header + 17 rows
    assert all(len(line) <= COLUMNS for line in lines[2:table_end])
    shot = screenshot(binary, tmp_path, _terminal(out, tmp_path / "text-300.html"), 1100, 900)
    image = Image.open(shot)
    # one screen row per table line (none wrapped), the whole table in the first screen, and
    # the findings right after it
    want = _expected_rows(lines[: table_end + 2])
    assert len(want) < 900 // ROW_PX
    assert _rows_with_ink(image, len(want)) == want
    right = PAD_PX + COLUMNS * CHAR_PX + 2
    assert _ink(image, (right, 0, 1100, 900), TERMINAL_BG) == 0, "text ran past 120 columns"


def test_text_group_kill_leads_with_the_verdict(report, corpus: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    binary = chromium()
    out = report(corpus_file(corpus, "01")).out
    lines = out.splitlines()
    assert lines[2].startswith("== OOM 1 of 1") and lines[3].startswith(
        "  VERDICT    bash (pid 7788)"
    )
    assert "were killed" in lines[3] and len(lines[3]) <= 13 + 200
    also = next(line for line in lines if line.startswith("  also"))
    assert "4 more: nginx (pid 7620)" in also
    shot = screenshot(binary, tmp_path, _terminal(out, tmp_path / "text-group.html"), 1100, 900)
    image = Image.open(shot)
    want = _expected_rows(lines[:5])  # head, blank, ==, VERDICT (two rows), findings:
    assert _rows_with_ink(image, len(want)) == want
    right = PAD_PX + COLUMNS * CHAR_PX + 2
    assert _ink(image, (right, 0, 1100, 900), TERMINAL_BG) == 0


def test_html_300_kills(report, log300: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    binary = chromium()
    page = tmp_path / "html-300.html"
    assert report(str(log300), "--html", str(page)).rc == 0
    text = dom(binary, tmp_path, page)
    # the summary first, then the first (most actionable) rows' findings, then every
    # incident (closed)
    order = [text.index(mark) for mark in ('id="summary"', 'id="top"', 'id="incident-1"')]
    assert order == sorted(order)
    assert all(f'id="incident-{n}"' in text for n in range(1, 301))
    summary = re.search(r'<table class="grid summary".*?</table>', text, re.S)
    assert summary is not None and summary.group(0).count("<tr>") == 18  # header + 17 rows
    for labels in _ticks(text, "y"):
        _round_ticks(labels)
    first = Image.open(screenshot(binary, tmp_path, page, 1280, 900))
    top = next(y for y in range(900) if _rgb(first.getpixel((30, y))) == SUMMARY_HEAD_BG)
    assert top < 150, "the summary table starts the page"
    # all 17 summary rows drawn in the first screen: their separator lines are there
    rules = [y for y in range(top, 900) if _rgb(first.getpixel((600, y))) == (228, 228, 228)]
    assert len(rules) >= 18, rules
    full = Image.open(screenshot(binary, tmp_path, page, 1280, 8000))
    bottom = _content_bottom(full)
    assert bottom < 4500, f"page is {bottom} px high for 300 kills"
    assert _ink(full, (PAGE_RIGHT_PX + 2, 0, 1280, bottom), PAGE_BG) == 0, "text overflows"


def test_html_group_kill(report, corpus: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    binary = chromium()
    page = tmp_path / "html-group.html"
    assert report(corpus_file(corpus, "01"), "--html", str(page)).rc == 0
    text = dom(binary, tmp_path, page)
    # what the text shows: task table, group members, the limit line
    assert "<h3>Largest tasks (8 of 28)</h3>" in text and "<h3>Also killed (4)</h3>" in text
    members = re.search(r"Also killed \(4\)</h3><table.*?</table>", text, re.S)
    assert members is not None
    assert re.findall(r'<td class="num">(\d+)</td>', members.group(0)) == [
        "7620",
        "7656",
        "7657",
        "7712",
    ]
    assert "<td>limit</td><td>node allocatable limit 7.1 GiB, usage 7.1 GiB (100 %)" in text
    assert "<td>group</td><td>memory.oom.group kill of /kubepods.slice/" in text
    [labels] = _ticks(text, "y")
    assert labels == ["0", "2 GiB", "4 GiB", "6 GiB", "8 GiB"]
    first = Image.open(screenshot(binary, tmp_path, page, 1280, 900))
    border = sum(1 for y in range(100, 300) if _rgb(first.getpixel((42, y))) == VERDICT_BORDER)
    assert border > 30, "the verdict is in the first screen"
    full = Image.open(screenshot(binary, tmp_path, page, 1280, 4000))
    bottom = _content_bottom(full)
    assert bottom < 2600
    assert _ink(full, (PAGE_RIGHT_PX + 2, 0, 1280, bottom), PAGE_BG) == 0, "text overflows"
    anon = _colours(full, (24, 0, 1024, bottom))
    assert sum(n for n, c in anon if _distance(c, ANON_PIXEL) <= 12) > 2000
