"""A batch command's heap: freed memory kept for the next piece instead of given back.

`oomwatch report` reads a log in pieces of about a megabyte: each piece's bytes, its text and
its windows are allocated and freed in turn.  glibc's malloc serves blocks that large with
mmap, or trims them off the top of its heap once free, so each goes back to the kernel and
the next piece's pages are faulted in afresh: about 20,000 page faults on a 64 MiB log
against about 7,000 with this tuning (bench/RESULTS.md, issue 26).  The process exits as
soon as its report is written, so what is kept is never held for long.  The agent does not
call this: it runs for months, and what it frees should go back.
"""

from __future__ import annotations

# glibc's <malloc.h>: the mallopt(3) parameters.
M_TRIM_THRESHOLD = -1  # free memory at the heap's top beyond this goes back to the kernel
M_MMAP_THRESHOLD = -3  # blocks from this size on get their own mapping
KEEP_FREED_BYTES = 256 << 20
# The largest M_MMAP_THRESHOLD glibc accepts on 64-bit (HEAP_MAX_SIZE / 2, malloc/malloc.c).
LARGEST_HEAP_BLOCK_BYTES = 32 << 20


def keep_freed_memory() -> bool:
    """Serve blocks up to 32 MiB from the heap and keep up to 256 MiB of it once free.
    False where that cannot be set: a C library without glibc's mallopt, no ctypes."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):
        return False
    # mallopt returns 1 on success, 0 for a parameter or value it does not take (musl's
    # stub always returns 0).
    return bool(
        mallopt(M_MMAP_THRESHOLD, LARGEST_HEAP_BLOCK_BYTES)
        and mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES)
    )
