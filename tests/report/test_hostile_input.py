"""`oomwatch report` on input shaped to hurt it: a clear warning, never a
traceback, and time near that of plain text the same size."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

from oomwatch.report.inputs import load_file
from oomwatch.report.sniff import decode_bytes


def test_json_nested_past_the_stack_is_a_warning_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "nested.json"
    path.write_text('{"MESSAGE":' + "[" * 300_000 + "]" * 300_000 + "}\n")  # was RecursionError
    loaded = load_file(str(path))
    assert loaded.incidents == []
    assert any("nest JSON deeper than can be read" in w for w in loaded.warnings)


def timed(path: Path) -> float:
    started = time.process_time()
    load_file(str(path))
    return time.process_time() - started


def test_invalid_utf8_reads_near_the_speed_of_ascii(tmp_path: Path) -> None:
    bad, plain = tmp_path / "bad.gz", tmp_path / "plain.gz"
    bad.write_bytes(gzip.compress((b"x\x80" * 100 + b"\n") * 7_500))  # 1.5 MB, 750k stray
    plain.write_bytes(gzip.compress((b"x" * 200 + b"\n") * 7_500))
    bad_s, plain_s = timed(bad), timed(plain)
    # was 19 s for a 68 KB gzip (one Python call per stray byte); measured 1.2x plain
    assert bad_s < 3 * plain_s + 0.1, (bad_s, plain_s)


def test_a_few_stray_bytes_still_read_as_windows_1252(tmp_path: Path) -> None:
    path = tmp_path / "pasted.log"
    path.write_bytes(b"caf\xe9 " + b"x" * 300 + b"\n")
    assert decode_bytes(path.read_bytes()).startswith("café ")


def test_digits_python_reads_but_int_refuses_are_not_numbers(tmp_path: Path) -> None:
    """Found by bench/fuzz.py journal: `'³'.isdigit()` is True, `int('³')` raises."""
    path = tmp_path / "j.json"
    path.write_text(
        '{"_TRANSPORT":"kernel","MESSAGE":"x","_SOURCE_MONOTONIC_TIMESTAMP":"85²",'
        '"__REALTIME_TIMESTAMP":"1700000000000000"}\n'
    )
    assert load_file(str(path)).incidents == []
