"""Time stamps of kernel log lines: month names in any locale, offsets, and the year that
syslog and journalctl short stamps leave out.

A stamp becomes an ISO-8601 `wall_time` when it carries a year (dmesg -T, RFC 3339,
short-iso).  A stamp without one (`Jun 13 14:21:19`) gets a year only from evidence, which
`YearClock` weighs and names: a dated stamp earlier in the same log (journalctl's
`-- Logs begin at ...` banner, an earlier incident's full stamp) is a lower bound; a
reference time the caller knows (the file's modification time, the time of reading) is an
upper bound.  Without either the year stays unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from oomwatch.decode.lazy_re import lazy_compile

# Month names as strftime %b prints them in common locales (dmesg -T, journalctl short).
_MONTHS: dict[str, int] = {}
for _names in (
    "jan feb mar apr may jun jul aug sep oct nov dec",
    "jan feb mär apr mai jun jul aug sep okt nov dez",
    "janv. févr. mars avr. mai juin juil. août sept. oct. nov. déc.",
    "ene feb mar abr may jun jul ago sep oct nov dic",
    "gen feb mar apr mag giu lug ago set ott nov dic",
    "jan fev mar abr mai jun jul ago set out nov dez",
    "jan feb mrt apr mei jun jul aug sep okt nov dec",
    "sty lut mar kwi maj cze lip sie wrz paź lis gru",
    "led úno bře dub kvě čvn čvc srp zář říj lis pro",
    "oca şub mar nis may haz tem ağu eyl eki kas ara",
    "янв фев мар апр мая июн июл авг сен окт ноя дек",
    "янв февр марта апр мая июня июля авг сент окт нояб дек",
    "січ лют бер кві тра чер лип сер вер жов лис гру",
    "ian feb mar apr mai iun iul aug sep oct nov dec",
    "јан феб мар апр мај јун јул авг сеп окт нов дец",
):
    for _i, _name in enumerate(_names.split(), 1):
        _MONTHS.setdefault(_name, _i)
_CJK_MONTH = lazy_compile(r"(\d{1,2})[月월]")
# Pieces of a `dmesg -T` stamp (`ctime_stamp`): the clock (`.` in Swedish), a CJK month and
# day (`11月23日`, `11월 23일`), the year (`2026.` in Serbian).
_CTIME_CLOCK = lazy_compile(r"(?<!\d)(\d{1,2})[:.](\d{2})[:.](\d{2})(?!\d)")
_CJK_DATE = lazy_compile(r"(\d{1,2})\s*([\u6708\uc6d4])\s*(\d{1,2})\s*[\u65e5\uc77c]?")
_CTIME_YEAR = lazy_compile(r"(?<![\d:.])(\d{4})(?![\d:])\.?")
# `May 30 12:29:02` or `May 30 12:29:02.123456` as `time_text` keeps it (month as printed).
_STAMP = lazy_compile(r"(\S{1,12})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")
# journalctl's first line: `-- Logs begin at Sun 2021-05-30 12:29:02 CST, end at ... --`
# (`-- Journal begins at ...` since systemd 246).
_BANNER = re.compile(
    r"-- (?:Logs begin|Journal begins) at \S+ (\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})"
)
# Stamps are local time and the reference may come from another machine's clock.
_SLACK = timedelta(days=1)


def month_number(text: str) -> int | None:
    """Month of a stamp's month name in any locale we know (any case), else None."""
    key = text.lower()
    if key in _MONTHS:
        return _MONTHS[key]
    key = key.rstrip(".")
    if key in _MONTHS:
        return _MONTHS[key]
    cjk = _CJK_MONTH.fullmatch(text)
    if cjk:
        number = int(cjk.group(1))
        return number if 1 <= number <= 12 else None
    if text.isascii() and text.isdigit() and 1 <= int(text) <= 12:  # isdigit admits ²
        return int(text)
    return None


def ctime_stamp(text: str) -> tuple[str | None, str | None] | None:
    """`dmesg -T`'s bracketed stamp in any locale -> (ISO wall time, None), or (None, the
    stamp to keep) when it has no year or an unknown month; None if it is no ctime stamp.

    util-linux >= 2.38 translates the stamp's layout as well as its names: `Mon Nov 23
    21:06:04 2026` (C), `Mo, 23. Nov 2026, 21:06:04` (de), `lun. 23 nov. 21:06:04 2026`
    (fr), `11月23日(月) 21:06:04 2026` (ja), `11월 23일 (월) 21:06:04` (ko, no year),
    `mån 23 nov 2026 21.06.04` (sv).  The weekday, where named, comes before the month.
    """
    clock = _CTIME_CLOCK.search(text)
    if clock is None:
        return None
    hms = f"{int(clock.group(1)):02d}:{clock.group(2)}:{clock.group(3)}"
    rest = text[: clock.start()] + " " + text[clock.end() :]
    month: int | None = None
    month_text = day_text = ""
    cjk = _CJK_DATE.search(rest)
    if cjk:
        month_text, day_text = cjk.group(1) + cjk.group(2), cjk.group(3)
        month = int(cjk.group(1))
        rest = rest[: cjk.start()] + " " + rest[cjk.end() :]
    year = _CTIME_YEAR.search(rest)
    if year:
        rest = rest[: year.start()] + " " + rest[year.end() :]
    if not day_text:
        words = [w.strip(".,") for w in rest.replace(",", " ").split()]
        days = [w for w in words if w.isascii() and w.isdigit() and len(w) <= 2]
        names = [w for w in words if not w.isdigit()]
        if len(days) == 1 and names:
            day_text, month_text = days[0], names[-1] if len(names) <= 2 else ""
            month = month_number(month_text) if month_text else None
    day = int(day_text) if day_text else 0
    if month is not None and 1 <= month <= 12 and 1 <= day <= 31:
        if year:
            return f"{year.group(1)}-{month:02d}-{day:02d}T{hms}", None
        return None, f"{month_text} {day:2d} {hms}"
    return None, text.strip()


def iso_offset(offset: str | None) -> str:
    """`+0200` -> `+02:00`; `Z` and `+02:00` as they are; None -> no offset."""
    if not offset:
        return ""
    if offset == "Z" or ":" in offset:
        return offset
    return f"{offset[:3]}:{offset[3:]}"


def banner_time(line: str) -> datetime | None:
    """The start of the journal from journalctl's `-- Logs begin at ...` first line."""
    match = _BANNER.match(line)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups())
    try:
        return datetime(year, month, day, hour, minute, second)  # local time, as printed
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Reference:
    """A time the log was written no later than, and what it is (said in the incident):
    e.g. `Reference(st_mtime, "the file's modification time")`."""

    time_s: float
    what: str = "the reference time"


@dataclass(frozen=True, slots=True)
class Dated:
    """A year put on a stamp, and the evidence it rests on (said in the incident)."""

    wall_time: str
    source: str  # "journal banner" | "earlier log stamp" | "reference time"
    note: str


class YearClock:
    """Dates yearless stamps of one log, in log order (see the module docstring).

    `observe` the log's dated stamps as they come; `date` each yearless one.  Every dated
    result becomes the next lower bound, so a log running from Dec 31 into Jan 1 moves on
    to the next year.
    """

    def __init__(self, reference: Reference | None = None) -> None:
        self._reference = (
            datetime.fromtimestamp(reference.time_s, UTC).replace(tzinfo=None)
            if reference is not None
            else None
        )
        self._reference_what = reference.what if reference is not None else ""
        self._floor: datetime | None = None
        self._floor_source = ""
        self._floor_root = ""  # where the floor's own year came from (it may be inferred)

    def observe(self, when: datetime, source: str = "earlier log stamp", root: str = "") -> None:
        """A dated stamp of this log (a lower bound for the stamps after it); `root`: what
        its year rests on where it was itself inferred."""
        if self._floor is None or when >= self._floor:
            self._floor, self._floor_source, self._floor_root = when, source, root or source

    def observe_iso(self, wall_time: str) -> None:
        """`observe` an ISO-8601 wall time (any offset is dropped: stamps are local)."""
        try:
            when = datetime.fromisoformat(wall_time.replace("Z", "+00:00"))
        except ValueError:
            return
        self.observe(when.replace(tzinfo=None))

    def date(self, stamp_text: str) -> Dated | None:
        """The stamp with its year inferred, or None when nothing bounds the year."""
        parsed = _parse_stamp(stamp_text)
        if parsed is None:
            return None
        month, day, hms, micros = parsed
        if self._floor is not None:
            when = _first_on_or_after(month, day, hms, micros, self._floor - _SLACK)
            basis = f"the {self._floor_source} ({self._floor.date().isoformat()})"
            source = self._floor_root
        elif self._reference is not None:
            when = _last_on_or_before(month, day, hms, micros, self._reference + _SLACK)
            basis = f"{self._reference_what} ({self._reference.date().isoformat()})"
            source = "reference time"
        else:
            return None
        if when is None:
            return None
        self.observe(when, "earlier log stamp", root=source)
        wall = when.isoformat()
        note = f"year {when.year} inferred for {stamp_text!r} from {basis}"
        return Dated(wall, source, note)


def _parse_stamp(text: str) -> tuple[int, int, tuple[int, int, int], int] | None:
    match = _STAMP.match(text.strip())
    if match is None:
        return None
    month = month_number(match.group(1))
    if month is None:
        return None
    frac = match.group(6) or ""
    micros = int((frac + "000000")[:6]) if frac else 0
    hms = (int(match.group(3)), int(match.group(4)), int(match.group(5)))
    return month, int(match.group(2)), hms, micros


def _at(year: int, month: int, day: int, hms: tuple[int, int, int], micros: int) -> datetime | None:
    try:
        return datetime(year, month, day, *hms, micros)  # local time, as printed
    except ValueError:
        return None  # Feb 29 in a common year, or a day the month does not have


def _first_on_or_after(
    month: int, day: int, hms: tuple[int, int, int], micros: int, floor: datetime
) -> datetime | None:
    for year in range(floor.year, floor.year + 9):
        when = _at(year, month, day, hms, micros)
        if when is not None and when >= floor:
            return when
    return None


def _last_on_or_before(
    month: int, day: int, hms: tuple[int, int, int], micros: int, ceiling: datetime
) -> datetime | None:
    for year in range(ceiling.year, ceiling.year - 9, -1):
        when = _at(year, month, day, hms, micros)
        if when is not None and when <= ceiling:
            return when
    return None
