"""`report.heap`: a report keeps the memory it frees, so its pieces are not faulted in afresh."""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys

import pytest

from oomwatch.report import heap

GLIBC = platform.libc_ver()[0] == "glibc"

# Pieces of a log as `oomwatch report` handles them: bytes read, decoded to text, a window
# sliced out, all freed before the next piece, of sizes that vary from piece to piece.
_PIECES = """
import resource, sys
from oomwatch.report.heap import keep_freed_memory
if sys.argv[1] == "keep" and not keep_freed_memory():
    raise SystemExit("mallopt refused")
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(48):
    data = b"x" * ((1 + i % 6) << 20)
    text = data.decode()
    del data
    window = text[: len(text) // 3]
    del text, window
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
"""


def _page_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PIECES, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(not GLIBC, reason="mallopt's parameters are glibc's")
def test_freed_pieces_are_reused_not_faulted_in_again() -> None:
    """48 pieces of 1-6 MiB: without the tuning glibc gives most of them back and faults
    them in again (about 32,000 faults here); with it, about a tenth of that.  (In a child:
    the tuning would stay with this test process.)"""
    plain, kept = _page_faults("plain"), _page_faults("keep")
    assert kept * 4 < plain, (kept, plain)


def test_without_mallopt_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A C library without mallopt (or no ctypes): the report runs as before."""

    def no_library(name: str | None) -> object:
        raise OSError(f"cannot load {name}")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    assert heap.keep_freed_memory() is False
