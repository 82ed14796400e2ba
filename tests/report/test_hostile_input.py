"""`oomwatch report` on input shaped to hurt it: a clear warning, never a traceback, and
work in bulk, not per hostile byte (the seconds, beside plain text of the same size, are
`bench/hostile.py --only utf8`)."""

from __future__ import annotations

import gzip
from pathlib import Path

from support.work import calls_made

from oomwatch.report.inputs import Loaded, load_file
from oomwatch.report.sniff import decode_bytes


def test_json_nested_past_the_stack_is_a_warning_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "nested.json"
    path.write_text('{"MESSAGE":' + "[" * 300_000 + "]" * 300_000 + "}\n")
    loaded = load_file(str(path))
    assert loaded.incidents == []
    assert any("nest JSON deeper than can be read" in w for w in loaded.warnings)


def test_invalid_utf8_is_replaced_in_bulk_not_byte_by_byte(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress((b"x\x80" * 100 + b"\n") * 7_500))  # 1.5 MB, 750k stray
    loaded: list[Loaded] = []
    calls = calls_made(lambda: loaded.append(load_file(str(bad))))
    assert any("not all UTF-8" in w for w in loaded[0].warnings)
    assert calls < 750_000 // 10, calls  # not a Python call per stray byte (measured 6,096)


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
