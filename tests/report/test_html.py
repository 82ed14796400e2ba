"""`--html FILE` rendered by headless Chromium: the page loads offline, the plot is drawn and
the verdict is visible (checked in the DOM and in the pixels of a screenshot)."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import pytest
from support.report_cli import ReportRun

from oomwatch.incident import (
    Breakdown,
    Incident,
    MemcgUsage,
    PodContext,
    Timeline,
    TimelineSample,
    Victim,
)
from oomwatch.store import IncidentStore

from .browser import browse as _browser
from .browser import chromium as _chromium

MIB = 1 << 20
POD = "/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba"
CONTAINER = f"{POD}/{'a' * 64}"
# The anon layer's colour (#4e79a7) at 75 % opacity over white, as Chromium paints it.
ANON_PIXEL = (122, 154, 189)
THP_PIXEL = (245, 170, 96)  # #f28e2b at 75 % over white


def _incident() -> Incident:
    samples = []
    for t in range(180):
        anon = min((60 + t) * MIB, 250 * MIB)
        samples.append(
            TimelineSample(
                1_700_000_000.0 + t,
                anon + 6 * MIB,
                256 * MIB,
                anon,
                6 * MIB,
                1 * MIB,
                anon // 2,
                MIB,
            )
        )
    return Incident(
        kind="memcg",
        wall_time="2026-11-22T08:00:00+00:00",
        oom_memcg=CONTAINER,
        task_memcg=CONTAINER,
        memcg=MemcgUsage(usage_bytes=256 * 2**20, limit_bytes=256 * 2**20, failcnt=9),
        breakdown_bytes=Breakdown(
            anon=250 * MIB, file=6 * MIB, shmem=MIB, thp=125 * MIB, kernel=MIB
        ),
        victims=[Victim(pid=4242, comm="trainer<b>x</b>", anon_rss_bytes=250 * 1024 * 1024)],
        pod_uid="28fcb1a0-a45c-44e7-b9bf-e3b9360bedba",
        container_id="a" * 64,
        qos_class="burstable",
        limit_scope="container",
        k8s=PodContext(namespace="ml", pod="trainer-0", container="train"),
        timeline=Timeline(
            samples=samples,
            interval_seconds=1.0,
            peak_bytes=256 * MIB,
            usage_at_kill_bytes=256 * MIB,
        ),
        allocator={
            "phase": "train",
            "last_sample": {
                "wall_s": 1_700_000_000.0 + 170,
                "cuda": {"allocated_bytes": 150 * MIB, "reserved_bytes": 200 * MIB},
            },
        },
    )


def _png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) to RGB pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, colour = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 4 if colour == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        pixels.extend((line[x], line[x + 1], line[x + 2]) for x in range(0, stride, bpp))
        prev = line
    return width, height, pixels


def _near(pixel: tuple[int, int, int], want: tuple[int, int, int], tolerance: int = 12) -> bool:
    return all(abs(p - w) <= tolerance for p, w in zip(pixel, want, strict=True))


@pytest.mark.slow
def test_html_page_renders_offline_with_plot_and_verdict(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    binary = _chromium()
    state = tmp_path / "state"
    store = IncidentStore(state)
    store.add(_incident())
    store.close()
    page = tmp_path / "report.html"
    run = report("--store", str(state), "--html", str(page))
    assert run.rc == 0, run.err
    html = page.read_text()
    # self-contained: nothing to fetch, and the hostile name is escaped, not markup
    assert not re.search(r"""(?:src|href)\s*=""", html)
    assert "<b>x</b>" not in html and "trainer&lt;b&gt;x&lt;/b&gt;" in html

    dom = _browser(binary, tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout.decode()
    verdict = re.search(r'<p class="verdict" id="verdict-1">(.*?)</p>', text, re.S)
    assert verdict is not None
    assert (
        "trainer&lt;b&gt;x&lt;/b&gt; (pid 4242) in pod ml/trainer-0 container train"
        in verdict.group(1)
    )
    assert "container memory limit of 256 MiB" in verdict.group(1)
    assert '<svg id="timeline-1"' in text
    # 179 s sampled: round ticks every 50 s, and 0 to 300 MiB in 100 MiB steps
    ticks = re.findall(r'class="tick tick-x"[^>]*>([^<]*)<', text)
    assert ticks == ["-200 s", "-150 s", "-100 s", "-50 s", "0"]
    ticks = re.findall(r'class="tick tick-y"[^>]*>([^<]*)<', text)
    assert ticks == ["0", "100 MiB", "200 MiB", "300 MiB"]
    for part in (
        'class="layer layer-anon"',
        'class="layer layer-thp"',
        'class="usage"',
        'class="limit"',
        'class="allocator-allocated"',
        'class="allocator-reserved"',
        'class="kill"',
    ):
        assert part in text, part

    shot = tmp_path / "shot.png"
    result = _browser(
        binary,
        tmp_path / "profile-shot",
        "--hide-scrollbars",
        "--window-size=900,1100",
        f"--screenshot={shot}",
        page.as_uri(),
    )
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (900, 1100)
    non_white = sum(1 for p in pixels if p != (255, 255, 255) and p != (250, 250, 250))
    assert non_white > 0.05 * len(pixels), "the screenshot is blank"
    assert len(set(pixels)) > 50
    assert sum(1 for p in pixels if _near(p, ANON_PIXEL)) > 2000, "no anon layer drawn"
    assert sum(1 for p in pixels if _near(p, THP_PIXEL)) > 2000, "no THP layer drawn"


def test_html_without_timeline_draws_the_breakdown_at_the_kill(
    report: ReportRun, corpus: Path, tmp_path: Path
) -> None:
    from support.report_cli import corpus_file

    page = tmp_path / "r.html"
    assert report(corpus_file(corpus, "02"), "--html", str(page)).rc == 0
    html = page.read_text()
    assert html.count('<section class="incident"') == 2
    assert "Memory at the kill" in html and "no timeline was sampled" in html
    assert '<rect class="layer layer-anon"' in html and 'class="limit"' in html
    assert "pod-level memory limit of 100 MiB" in html
