"""Rebuild the journal fixtures from the public corpus: real journalctl output of a real log.

The syslog lines of corpus 02 (one AKS node, kernel and other programs) become journal entries
(`_TRANSPORT=kernel` with the printk stamp as `_SOURCE_MONOTONIC_TIMESTAMP` for the kernel's,
`syslog` for the rest; the year 2023 from the kernel build), are written into a journal file
by `systemd-journal-remote`, and read back with `journalctl -o json|json-pretty|export`.  One
extra kernel line names a process whose comm is not UTF-8, so journalctl prints that MESSAGE
as a byte array.  Needs Debian's systemd-journal-remote (apt-get install systemd-journal-remote).

    python3 tests/data/journal/build.py
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "corpus" / "02-aks-cgroupv2-cri-containerd-syslog-with-next-start.log"
YEAR = 2023
BOOT_ID = "3f6c2a0e5b8d4f1a9c7e2d4b6a8f0c13"
LINE = re.compile(
    r"(\w{3} +\d+ [\d:]{8}) (\S+) ([^\s:\[]+)(?:\[(\d+)\])?: (?:\[ *(\d+\.\d+)\] )?(.*)"
)


def _field(name: str, value: bytes) -> bytes:
    if b"\n" in value or not value.isascii():
        return name.encode() + b"\n" + len(value).to_bytes(8, "little") + value + b"\n"
    return name.encode() + b"=" + value + b"\n"


def export_stream() -> bytes:
    entries = []
    kernel_s = 8500.0
    lines = SOURCE.read_text().splitlines()
    lines.insert(3, lines[3].replace("Call Trace:", "process caf\udce9 (pid 4242) started"))
    for line in lines:
        m = LINE.match(line)
        assert m, line
        stamp, host, ident, pid, kernel, message = m.groups()
        wall = datetime.strptime(f"{YEAR} {stamp}", "%Y %b %d %H:%M:%S").replace(tzinfo=UTC)
        kernel_s = float(kernel) if kernel else kernel_s
        micro = int(kernel_s * 1e6) % 1_000_000
        fields = {
            "__REALTIME_TIMESTAMP": str(int(wall.timestamp()) * 1_000_000 + micro),
            "__MONOTONIC_TIMESTAMP": str(int(kernel_s * 1e6) + 40),
            "_BOOT_ID": BOOT_ID,
            "_HOSTNAME": host,
            "SYSLOG_IDENTIFIER": ident,
            "PRIORITY": "4" if ident == "kernel" else "6",
        }
        if ident == "kernel":
            fields.update(_TRANSPORT="kernel", SYSLOG_FACILITY="0")
            fields["_SOURCE_MONOTONIC_TIMESTAMP"] = str(int(kernel_s * 1e6))
        else:
            fields.update(_TRANSPORT="syslog", _PID=pid or "1", SYSLOG_FACILITY="3")
        raw = message.encode("utf-8", "surrogateescape")
        entry = b"".join(_field(k, v.encode()) for k, v in fields.items())
        entries.append(entry + _field("MESSAGE", raw))
    return b"\n".join(entries) + b"\n"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "node.journal"
        subprocess.run(
            ["/lib/systemd/systemd-journal-remote", f"--output={journal}", "-"],
            input=export_stream(),
            check=True,
        )
        for form in ("json", "json-pretty", "export"):
            out = subprocess.run(
                ["journalctl", "--file", str(journal), "-o", form, "--no-pager"],
                capture_output=True,
                check=True,
            ).stdout
            (HERE / f"02-aks-journal.{form}").write_bytes(out)
        kernel = subprocess.run(
            ["journalctl", "--file", str(journal), "-k", "-o", "json", "--no-pager"],
            capture_output=True,
            check=True,
        ).stdout
        (HERE / "02-aks-journal-k.json").write_bytes(kernel)


if __name__ == "__main__":
    main()
