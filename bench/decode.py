"""Decoder throughput: a large log of kernel chatter with the corpus reports interleaved.

Prints MB/s and reports/s for `decode_text` on a dmesg-style log (about one OOM report line
per thousand lines), MB/s on chatter alone, and the time to decode a 16 MiB /dev/kmsg
backlog record by record (`parse_kmsg_record` + `ReportAssembler`, the daemon's path).
`--report` instead times the whole command, `oomwatch report --json FILE` in a fresh
process (read, decode, diagnose, JSON), on the same kind of log written to a file; `--form`
writes that log gzip-compressed or as `journalctl -o json`, `--text` times the text report.

    .venv/bin/python bench/decode.py [--mib 128] [--repeat 3] [--report [--form F] [--text]]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from oomwatch.decode import decode_kmsg_records, decode_text, parse_lines

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "corpus"
_CHATTER = (
    "eth0: renamed from veth{n:x}",
    "IPv6: ADDRCONF(NETDEV_CHANGE): cali{n:x}: link becomes ready",
    "cni0: port {p}(veth{n:x}) entered forwarding state",
    'audit: type=1400 audit({n}.{p}:{p}): apparmor="STATUS" operation="profile_load" '
    'profile="unconfined" name="cri-containerd.apparmor.d" pid={n} comm="apparmor_parser"',
    "EXT4-fs (nvme0n1p{p}): mounted filesystem with ordered data mode. Quota mode: none.",
    "kauditd_printk_skb: {p} callbacks suppressed",
    "overlayfs: upper fs does not support tmpfile.",
    "TCP: request_sock_TCP: Possible SYN flooding on port {n}. Sending cookies.",
    "nf_conntrack: nf_conntrack: table full, dropping packet",
    "device veth{n:x} entered promiscuous mode",
)


def _chatter(rng: random.Random, t: float) -> str:
    template = rng.choice(_CHATTER)
    return f"[{t:12.6f}] " + template.format(n=rng.randrange(1 << 24), p=rng.randrange(1, 64))


def _report_messages() -> list[list[str]]:
    """Each corpus report as kernel messages (prefixes removed), to re-stamp in any format."""
    reports = []
    for path in sorted(CORPUS.glob("*.log")):
        lines = path.read_text(encoding="utf-8").split("\n")
        reports.append([r.message for r in parse_lines(lines) if "\n" not in r.message])
    return reports


def build_dmesg_log(
    target_bytes: int, seed: int = 7, chatter_per_line: int = 1000
) -> tuple[str, int, int]:
    """(text, OOM lines, corpus reports) with about one OOM line per `chatter_per_line`
    lines of other chatter (1000: a quiet node; 60: a node dense with OOMs)."""
    rng = random.Random(seed)
    reports = _report_messages()
    parts: list[str] = []
    size = oom_lines = report_count = 0
    t = 1000.0
    while size < target_bytes:
        report = reports[report_count % len(reports)]
        for _ in range(chatter_per_line * len(report)):
            t += 0.0007
            line = _chatter(rng, t)
            parts.append(line)
            size += len(line) + 1
        for message in report:
            t += 0.000004
            line = f"[{t:12.6f}] {message}"
            parts.append(line)
            size += len(line) + 1
        oom_lines += len(report)
        report_count += 1
    return "\n".join(parts) + "\n", oom_lines, report_count


def build_kmsg_backlog(target_bytes: int, seed: int = 11) -> tuple[list[bytes], int]:
    """/dev/kmsg records (as read() returns them) of chatter and corpus reports."""
    rng = random.Random(seed)
    reports = _report_messages()
    records: list[bytes] = []
    size = seq = report_count = 0
    usec = 1_000_000
    while size < target_bytes:
        report = reports[report_count % len(reports)]
        for _ in range(50 * len(report)):
            seq += 1
            usec += 700
            message = _chatter(rng, 0)[15:]
            record = f"6,{seq},{usec},-;{message}\n".encode()
            records.append(record)
            size += len(record)
        for message in report:
            seq += 1
            usec += 4
            escaped = message.replace("\\", "\\x5c")
            record = f"6,{seq},{usec},-;{escaped}\n".encode()
            records.append(record)
            size += len(record)
        report_count += 1
    return records, report_count


def _best(repeat: int, run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def as_journal_json(text: str) -> str:
    """The dmesg log as `journalctl -o json` writes it: one kernel entry per line."""
    out = []
    for n, line in enumerate(text.splitlines()):
        stamp, _, message = line.partition("] ")
        micros = int(float(stamp.lstrip("[ ")) * 1e6)
        entry = {
            "__CURSOR": f"s=0;i={n:x}",
            "__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + micros),
            "__MONOTONIC_TIMESTAMP": str(micros + 40),
            "_BOOT_ID": "0" * 32,
            "_TRANSPORT": "kernel",
            "SYSLOG_IDENTIFIER": "kernel",
            "PRIORITY": "6",
            "_HOSTNAME": "node-1",
            "_SOURCE_MONOTONIC_TIMESTAMP": str(micros),
            "MESSAGE": message,
        }
        out.append(json.dumps(entry, separators=(",", ":")))
    return "\n".join(out) + "\n"


# Runs the command in a fresh interpreter and prints its peak RSS (VmHWM belongs to the new
# process image; getrusage would count the benchmark's own memory, inherited through fork).
_REPORT = (
    "import atexit, runpy, sys\n"
    "def hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            sys.stderr.write(line.split()[1] + '\\n')\n"
    "atexit.register(hwm)\n"
    "sys.argv = ['oomwatch', 'report', *sys.argv[2:], sys.argv[1]]\n"
    "runpy.run_module('oomwatch.cli', run_name='__main__')\n"
)


def bench_report(mib: int, repeat: int, form: str = "plain", as_text: bool = False) -> None:
    """Wall time and peak RSS of `oomwatch report --json FILE`, the best of `repeat` runs."""
    text, _, reports = build_dmesg_log(mib << 20)
    data = (as_journal_json(text) if form == "journal" else text).encode()
    del text
    with tempfile.NamedTemporaryFile("wb", suffix=".log") as log:
        log.write(gzip.compress(data, 6) if form == "gzip" else data)
        log.flush()
        text_mb = len(data) / 1e6
        del data
        runs, peaks_kib = [], []
        args = [] if as_text else ["--json"]
        for _ in range(repeat):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", _REPORT, log.name, *args], capture_output=True, check=True
            )
            runs.append(time.perf_counter() - started)
            peaks_kib.append(int(done.stderr.split()[-1]))
        incidents = done.stdout.split(b" OOM incident")[0] if as_text else None
        count = incidents.decode() if incidents else done.stdout.count(b'"verdict"')
    best = min(runs)
    what = f"oomwatch report {'' if as_text else '--json '}FILE ({form})"
    print(
        f"{what}: {text_mb:.1f} MB of log text, {reports} reports -> {count}"
        f" incidents, best of {repeat}: {best:.2f} s  {text_mb / best:6.1f} MB/s"
        f" (runs: {', '.join(f'{r:.2f}' for r in runs)} s), peak RSS"
        f" {max(peaks_kib) / 1024:.1f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Decoder throughput benchmark.")
    parser.add_argument("--mib", type=int, default=128, help="size of the dmesg log (MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported")
    parser.add_argument(
        "--report", action="store_true", help="time the whole `oomwatch report --json FILE`"
    )
    parser.add_argument(
        "--form",
        choices=("plain", "gzip", "journal"),
        default="plain",
        help="--report: the log as written, gzip-compressed, or as journalctl -o json",
    )
    parser.add_argument("--text", action="store_true", help="--report: the text report")
    args = parser.parse_args()
    if args.report:
        bench_report(args.mib, args.repeat, args.form, args.text)
        return

    text, oom_lines, reports = build_dmesg_log(args.mib << 20)
    data = text.encode()
    mb = len(data) / 1e6
    incidents = len(decode_text(text).incidents)
    seconds = _best(args.repeat, lambda: decode_text(text))
    seconds_bytes = _best(args.repeat, lambda: decode_text(data))
    lines = text.count("\n")
    print(
        f"dmesg log: {mb:.1f} MB, {lines} lines, {oom_lines} OOM report lines "
        f"(1 per {lines // max(oom_lines, 1)}), {reports} reports -> {incidents} incidents"
    )
    print(
        f"  decode_text(str):   {seconds:.3f} s  {mb / seconds:7.1f} MB/s  "
        f"{reports / seconds:8.1f} reports/s"
    )
    print(
        f"  decode_text(bytes): {seconds_bytes:.3f} s  {mb / seconds_bytes:7.1f} MB/s  "
        f"(UTF-8 decoding included)"
    )

    chatter = "\n".join(_chatter(random.Random(3), 1.0 + i) for i in range(len(text) // 110))
    chatter_mb = len(chatter) / 1e6
    seconds = _best(args.repeat, lambda: decode_text(chatter))
    print(
        f"ordinary chatter only: {chatter_mb:.1f} MB in {seconds:.3f} s  "
        f"{chatter_mb / seconds:7.1f} MB/s"
    )

    records, kmsg_reports = build_kmsg_backlog(16 << 20)
    backlog_mib = sum(len(r) for r in records) / (1 << 20)

    found = len(decode_kmsg_records(records).incidents)
    seconds = _best(args.repeat, lambda: decode_kmsg_records(records))
    print(
        f"kmsg backlog: {backlog_mib:.1f} MiB, {len(records)} records, {kmsg_reports} reports "
        f"-> {found} incidents in {seconds:.3f} s  ({len(records) / seconds / 1e3:.0f}k "
        f"records/s, {kmsg_reports / seconds:.0f} reports/s)"
    )


if __name__ == "__main__":
    main()
