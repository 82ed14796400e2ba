"""Every input form people have, recognised by content, from a file and from stdin: gzip
(also several members, cut short or corrupt), CRLF, colour escapes, UTF-16 and UTF-8 BOMs,
Windows-1252 bytes and pasted no-break spaces, `journalctl -o json|json-pretty|export`; and
the formats we cannot read, refused with a way to read them."""

from __future__ import annotations

import codecs
import gzip
import hashlib
import json
import lzma
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.contract import validate_report
from support.report_cli import corpus_file

from oomwatch.report import journal, sniff

JOURNAL = Path(__file__).resolve().parents[1] / "data" / "journal"
SYSLOG = "02"  # the syslog of one AKS node: a pod-limit kill, then the next invocation
UID = "5931aa75-4603-4e65-b552-7c71cf55cfb5"
# What a decode must keep whatever the input form (wall clock and format may differ).
SAME = (
    "kind",
    "kernel_time_s",
    "victims",
    "pod_uid",
    "container_id",
    "memcg",
    "tasks",
    "breakdown_bytes",
    "limit_scope",
    "oom_memcg",
    "task_memcg",
    "invoker",
    "findings",
)


def _report(args: list[str], data: bytes | None = None) -> tuple[int, dict[str, Any], str]:
    """`oomwatch report --json ARGS` in a fresh process (stdin is the real pipe)."""
    proc = subprocess.run(
        [sys.executable, "-m", "oomwatch.cli", "report", "--json", *args],
        input=data,
        capture_output=True,
        timeout=120,
        check=False,
    )
    doc = json.loads(proc.stdout) if proc.stdout else {}
    if doc:
        validate_report(doc)
    return proc.returncode, doc, proc.stderr.decode()


def _both(tmp_path: Path, data: bytes, name: str) -> list[dict[str, Any]]:
    """The JSON report of `data` as a file and from stdin (both must agree)."""
    path = tmp_path / name
    path.write_bytes(data)
    rc_file, from_file, err = _report([str(path)])
    assert rc_file == 0, err
    rc_stdin, from_stdin, err = _report(["-"], data)
    assert rc_stdin == 0, err
    assert [i["victims"] for i in from_file["incidents"]] == [
        i["victims"] for i in from_stdin["incidents"]
    ]
    return [from_file, from_stdin]


@pytest.fixture(scope="module")
def plain() -> dict[str, Any]:
    rc, doc, err = _report([corpus_file_path()])
    assert rc == 0, err
    return doc


def corpus_file_path() -> str:
    return corpus_file(Path(__file__).resolve().parents[1] / "data" / "corpus", SYSLOG)


def _assert_same(doc: dict[str, Any], plain: dict[str, Any]) -> None:
    got, want = doc["incidents"], plain["incidents"]
    assert len(got) == len(want) == 2
    for a, b in zip(got, want, strict=True):
        assert {k: a[k] for k in SAME} == {k: b[k] for k in SAME}
    assert got[0]["pod_uid"] == UID and got[0]["victims"][0]["comm"] == "stress-ng-vm"


def _colour(text: str) -> str:
    """What `journalctl` prints with colour forced: highlighted kernel warnings."""
    return "".join(
        line.replace("kernel: ", "kernel: \x1b[0;1;39m") + "\x1b[0m\n" for line in text.splitlines()
    )


FORMS: dict[str, Callable[[str], bytes]] = {
    "gzip": lambda t: gzip.compress(t.encode()),
    "crlf": lambda t: t.replace("\n", "\r\n").encode(),
    "ansi-colour": lambda t: _colour(t).encode(),
    "utf-8-bom": lambda t: codecs.BOM_UTF8 + t.encode(),
    "utf-16-le-bom": lambda t: t.encode("utf-16"),  # what PowerShell's `>` writes
    "utf-16-be-bom": lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"),
    "utf-16-le": lambda t: t.encode("utf-16-le"),
    "windows-paste": lambda t: (
        t.replace("\n", "\r\n").replace(" invoked", "\xa0invoked").encode("cp1252")
    ),
    "gzip-of-crlf-utf16": lambda t: gzip.compress(t.replace("\n", "\r\n").encode("utf-16")),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_text_forms_decode_like_the_plain_log(
    form: str, plain: dict[str, Any], tmp_path: Path
) -> None:
    data = FORMS[form](Path(corpus_file_path()).read_text())
    for doc in _both(tmp_path, data, f"node.{form}"):
        _assert_same(doc, plain)


def test_windows_1252_bytes_become_their_characters(plain: dict[str, Any], tmp_path: Path) -> None:
    text = Path(corpus_file_path()).read_text().replace("Hardware name:", "Hardware name: café ’")
    for doc in _both(tmp_path, text.encode("cp1252"), "cp1252.log"):
        _assert_same(doc, plain)
        assert any("Windows-1252" in w for w in doc["warnings"])


@pytest.mark.parametrize(
    "name",
    [
        "02-aks-journal.json",
        "02-aks-journal-k.json",
        "02-aks-journal.json-pretty",
        "02-aks-journal.export",
    ],
)
def test_journalctl_dumps_decode_with_the_journal_clock(
    name: str, plain: dict[str, Any], tmp_path: Path
) -> None:
    """Real `journalctl` output (tests/data/journal/build.py): the same kills as the syslog,
    and the wall clock the syslog lacked (its stamps have no year), from the journal."""
    data = (JOURNAL / name).read_bytes()
    for doc in [*_both(tmp_path, data, name), *_both(tmp_path, gzip.compress(data), "x.gz")]:
        _assert_same(doc, plain)
        assert [i["wall_time"] for i in doc["incidents"]] == [
            "2023-10-12T19:00:20.347333+00:00",
            "2023-10-12T19:00:20.444701+00:00",
        ]
        assert doc["warnings"] == []
        assert all(i["year_inferred_from"] is None for i in doc["incidents"])
    # the syslog's stamps print no year: it could only be inferred (from the file's time)
    assert all(i["year_inferred_from"] for i in plain["incidents"])


def test_journal_json_keeps_line_numbers_and_reads_byte_arrays() -> None:
    data = (JOURNAL / "02-aks-journal.json").read_text()
    assert '"MESSAGE":[' in data  # journalctl's form of a message that is not UTF-8
    converted = journal.JsonLines("x").feed(data)
    assert converted.count("\n") == data.count("\n")
    lines = converted.split("\n")
    [line_no] = [n for n, line in enumerate(data.split("\n")) if '"MESSAGE":[' in line]
    assert lines[line_no].endswith("] process café (pid 4242) started")  # a lone 0xE9
    assert "TaskOOM" not in converted and "killed by the OOM k" not in converted  # not kernel
    kill = next(line for line in lines if "Killed process" in line)
    stamp = "2023-10-12T19:00:20.347333+0000 aks-nodepool1-24207654-vmss000001 kernel:"
    assert kill.startswith(f"{stamp} [ 8523.347333] Memory cgroup out of memory")


def test_journal_entry_fields() -> None:
    entry = {
        "MESSAGE": [104, 0xE9, 10, 120],
        "_TRANSPORT": "kernel",
        "__REALTIME_TIMESTAMP": "1700000000000001",
        "_SOURCE_MONOTONIC_TIMESTAMP": "5000000",
    }
    assert journal.entry_lines(entry) == [
        "2023-11-14T22:13:20.000001+0000 kernel: [    5.000000] h\xe9",
        "2023-11-14T22:13:20.000001+0000 kernel: [    5.000000] x",
    ]
    assert journal.entry_lines({"MESSAGE": "m", "_TRANSPORT": "stdout"}) is None
    assert journal.entry_lines({"MESSAGE": "m", "SYSLOG_IDENTIFIER": "kubelet"}) is None
    assert journal.entry_lines({"MESSAGE": "m"}) == ["m"]  # --output-fields=MESSAGE
    assert journal.entry_lines({"MESSAGE": None, "_TRANSPORT": "kernel"}) is None


def test_gzip_members_are_read_on_and_bounded(tmp_path: Path) -> None:
    member = gzip.compress(Path(corpus_file_path()).read_bytes())
    [doc, _] = _both(tmp_path, member + member, "two.gz")
    assert len(doc["incidents"]) == 4
    # 64 MiB of zeros in 64 KiB: decompressed in bounded steps, never whole
    bomb = gzip.compress(b"\0" * (64 << 20))
    steps = list(sniff.gunzip(iter([bomb]), "bomb", []))
    assert sum(map(len, steps)) == 64 << 20 and max(map(len, steps)) <= sniff.OUT_BYTES


def test_cut_gzip_reads_what_is_there(tmp_path: Path) -> None:
    chatter = "".join(f"eth0: {hashlib.sha256(bytes([n])).hexdigest()}\n" for n in range(256))
    data = gzip.compress((Path(corpus_file_path()).read_text() + chatter).encode())
    for doc in _both(tmp_path, data[: len(data) * 9 // 10], "cut.gz"):
        assert doc["incidents"][0]["victims"][0]["comm"] == "stress-ng-vm"
        assert any("gzip data ends early" in w for w in doc["warnings"])


def test_corrupt_gzip_is_an_error_naming_the_input(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(Path(corpus_file_path()).read_bytes()))
    data[100:140] = b"\xff" * 40
    path = tmp_path / "bad.gz"
    path.write_bytes(bytes(data))
    rc, _, err = _report([str(path)])
    assert rc == 2 and str(path) in err and "gzip data is corrupt" in err
    with pytest.raises(sniff.InputError):
        list(sniff.gunzip(iter([bytes(data)]), "x", []))


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (lzma.compress(b"x"), "xz -dc"),
        (b"\x28\xb5\x2f\xfd" + b"\0" * 20, "zstd -dc"),
        (b"LPKSHHRH" + b"\0" * 200, "journalctl --file"),
        (b"PK\x03\x04" + b"\0" * 26, "unzip -p"),
    ],
    ids=["xz", "zstd", "journal-file", "zip"],
)
def test_unreadable_forms_say_how_to_read_them(data: bytes, words: str, tmp_path: Path) -> None:
    path = tmp_path / "node.log"  # the name says nothing: the content does
    path.write_bytes(data)
    rc, doc, err = _report([str(path)])
    assert rc == 2 and doc == {} and str(path) in err and words in err
    rc, _, err = _report(["-"], gzip.compress(data))
    assert rc == 2 and "stdin" in err and words in err


def test_utf16_is_not_guessed_from_a_bom_alone() -> None:
    assert sniff.utf16_encoding(b"\xff\xfe\x00garbage" * 10) is None
    assert sniff.utf16_encoding("[ 1.0] x\n".encode("utf-16")) == "utf-16"
    assert sniff.utf16_encoding("[ 1.0] x\n".encode("utf-16-be")) == "utf-16-be"
    assert sniff.utf16_encoding(b"[ 1.0] x\n") is None


def test_clean_keeps_escapes_that_are_not_colour() -> None:
    assert sniff.clean("a\x1b[1;31mb\x1b[0m\x1b[K c\x1b[2J") == "ab c\x1b[2J"
    assert sniff.clean("Killed\xa0process") == "Killed process"


@pytest.mark.parametrize(
    "text",
    [
        "\u751f\u6210 Killed\xa0process",
        "\u751f\u6210 Killed\u2007process \u2019",
        "\u2019quoted\u2019\u202f\xb5s",
        "\u751f\u6210 no odd space, \u2019quoted\u2019 \xb0C \xe9",
        "\u2080\u0080\u2000\u20a0 near misses",
    ],
)
def test_clean_finds_odd_spaces_in_the_bytes_as_in_the_text(text: str) -> None:
    """Searched in the UTF-8 bytes (their lead bytes, then the non-ASCII bytes alone) or in
    the text, with the same result; text with nothing to clean is returned itself."""
    by_text, by_bytes = sniff.clean(text), sniff.clean(text, text.encode())
    assert by_bytes == by_text == text.translate(str.maketrans("\xa0\u2007\u202f", "   "))
    assert (by_bytes is text) == (by_text == text)


def test_peek_gathers_a_slow_pipe() -> None:
    head, blocks = sniff.peek(iter([b"a", b"b", b"c"]), size=2)
    assert head == b"ab" and b"".join(blocks) == b"abc"
    assert sniff.peek(iter([]))[0] == b""
