"""Rebuild the journal text fixtures: real `journalctl` output of a real report, every format.

The report of tests/data/dmesg-modes/syslog-buffer.txt (kernel 6.18, memcg OOM, with one
systemd record) becomes journal entries as journald stores kernel records (`_TRANSPORT=kernel`,
the printk time as `_SOURCE_MONOTONIC_TIMESTAMP`, wall time from the boot time the dmesg
fixtures show), is written into a journal file by `systemd-journal-remote`, and is read back
with `journalctl --file F -o FORMAT` (systemd 252, Debian 12), in the C locale and, for the
formats that print a month name, in eight others (`LC_ALL`; locales generated with
locale-gen).  Needs systemd-journal-remote and those locales.

    python3 tests/data/journal-modes/build.py
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "dmesg-modes" / "syslog-buffer.txt"
BOOT_ID = "6f0e8c0d1b1a4b7c9a2e3d4c5b6a7980"
# dmesg --time-format=iso of the same buffer: kernel 5175.978284 s is this wall time.
FIRST = (5175_978284, datetime(2026, 11, 23, 21, 6, 4, 978284, tzinfo=UTC))
RECORD = re.compile(r"<(\d+)>\[\s*(\d+)\.(\d+)\] (.*)")
PROGRAM = re.compile(r"(\w+)\[(\d+)\]: (.*)")
FORMATS = (
    "short",
    "short-precise",
    "short-iso",
    "short-iso-precise",
    "short-full",
    "short-monotonic",
    "short-unix",
    "short-delta",
    "with-unit",
    "cat",
)
LOCALES = ("de_DE", "fr_FR", "ru_RU", "ja_JP", "ko_KR", "zh_CN", "es_ES", "cs_CZ")


def export_stream() -> bytes:
    boot_us = int(FIRST[1].timestamp() * 1_000_000) - FIRST[0]
    entries = []
    for line in SOURCE.read_text().splitlines():
        m = RECORD.fullmatch(line)
        assert m, line
        priority, monotonic_us = int(m.group(1)), int(m.group(2)) * 1_000_000 + int(m.group(3))
        fields = {
            "__REALTIME_TIMESTAMP": str(boot_us + monotonic_us + 150),
            "__MONOTONIC_TIMESTAMP": str(monotonic_us + 150),
            "_BOOT_ID": BOOT_ID,
            "_HOSTNAME": "node-7",
            "PRIORITY": str(priority & 7),
            "SYSLOG_FACILITY": str(priority >> 3),
        }
        program = PROGRAM.fullmatch(m.group(4)) if priority >> 3 else None
        if program:
            fields.update(SYSLOG_IDENTIFIER=program.group(1), _PID=program.group(2))
            fields.update(_TRANSPORT="syslog", MESSAGE=program.group(3))
        else:
            fields.update(SYSLOG_IDENTIFIER="kernel", _TRANSPORT="kernel", MESSAGE=m.group(4))
            fields["_SOURCE_MONOTONIC_TIMESTAMP"] = str(monotonic_us)
        entries.append("".join(f"{k}={v}\n" for k, v in fields.items()))
    return "\n".join(entries).encode() + b"\n"


def journalctl(journal: Path, *args: str, locale: str = "C", tz: str = "UTC") -> bytes:
    env = {**os.environ, "LC_ALL": locale if locale == "C" else f"{locale}.UTF-8", "TZ": tz}
    return subprocess.run(
        ["journalctl", "--file", str(journal), "--no-pager", *args],
        capture_output=True,
        check=True,
        env=env,
    ).stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "node.journal"
        subprocess.run(
            ["/lib/systemd/systemd-journal-remote", f"--output={journal}", "-"],
            input=export_stream(),
            check=True,
        )
        for form in FORMATS:
            (HERE / f"C-{form}.txt").write_bytes(journalctl(journal, "-o", form))
        (HERE / "C-short-no-hostname-k.txt").write_bytes(journalctl(journal, "-k", "--no-hostname"))
        (HERE / "Asia-Tokyo-short-iso.txt").write_bytes(
            journalctl(journal, "-o", "short-iso", tz="Asia/Tokyo")
        )
        for locale in LOCALES:
            for form in ("short", "short-precise"):
                (HERE / f"{locale}-{form}.txt").write_bytes(
                    journalctl(journal, "-o", form, locale=locale)
                )


if __name__ == "__main__":
    main()
