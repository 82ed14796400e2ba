"""What an input is, judged by its first bytes and never by its name: gzip, UTF-16 (what
Windows tools write), a `journalctl -o json`/`export` dump, or plain log text; and the byte
streams that turn each into UTF-8 log text on the fly, in bounded blocks.

Formats we cannot read (xz, zstd, a binary journal file, ...) are an `InputError` that says
how to turn them into something we can, never a page of mojibake and "no OOM kills".
"""

from __future__ import annotations

import codecs
import itertools
import re
import zlib
from collections.abc import Iterator

HEAD_BYTES = 64 * 1024  # what detection looks at
OUT_BYTES = 1 << 20  # the most one decompression step may produce (a gzip bomb stays bounded)
GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = codecs.BOM_UTF8
# Magic numbers of inputs we cannot read, and how to make them readable.
_FOREIGN = (
    (b"\xfd7zXZ\x00", "xz-compressed", "xz -dc {name} | oomwatch report -"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "zstd -dc {name} | oomwatch report -"),
    (b"BZh", "bzip2-compressed", "bzip2 -dc {name} | oomwatch report -"),
    (b"\x04\x22\x4d\x18", "lz4-compressed", "lz4 -dc {name} | oomwatch report -"),
    (
        b"LPKSHHRH",
        "a binary systemd journal file",
        "journalctl --file {name} -k -o json | oomwatch report -",
    ),
    (b"PK\x03\x04", "a zip archive", "unzip -p {name} | oomwatch report -"),
    (b"\x7fELF", "an executable (ELF), not a log", None),
)
_EXPORT_FIELD = re.compile(rb"[A-Z_][A-Z0-9_]{0,63}=")
# Colour and erase-line escapes (`dmesg --color=always`, `journalctl` piped with colour
# forced, `grep --color`); other escapes are kept, so a hostile name still shows escaped.
_SGR = re.compile(r"\x1b\[[0-9;:]{0,32}[mK]")
# Spaces a paste from a web page, chat or mail client puts where the kernel wrote ' '.
_ODD_SPACES = ("\u00a0", "\u2007", "\u202f")
_ODD_SPACES_UTF8 = tuple(space.encode() for space in _ODD_SPACES)
# The first bytes of their UTF-8 forms (C2 A0, E2 80 87, E2 80 AF): text with neither holds
# none of them.  CJK starts E3 to E9, accented Latin C3 to C5: most non-ASCII text has neither.
_ODD_SPACE_LEADS = tuple(dict.fromkeys(space[:1] for space in _ODD_SPACES_UTF8))
_ASCII_BYTES = bytes(range(0x80))
_SPACES = str.maketrans(dict.fromkeys(_ODD_SPACES, " "))


class InputError(Exception):
    """The input cannot be read; the message names it and says why."""


def _cp1252_fallback(error: UnicodeError) -> tuple[str, int]:
    """A lone byte that is not UTF-8 is read as Windows-1252 (what Notepad and Outlook write:
    ’ – é, no-break space); a cut multi-byte sequence (a comm cut at 15 bytes) is U+FFFD."""
    assert isinstance(error, UnicodeDecodeError)
    bad = error.object[error.start : error.end]
    text = bad.decode("cp1252", "replace") if len(bad) == 1 else "\ufffd"
    return text, error.end


codecs.register_error("oomwatch-cp1252", _cp1252_fallback)


_STRAY_RUN = re.compile("[\udc80-\udcff]+")  # stray bytes as `surrogateescape` decodes them
STRAY_RUN_BYTES = 256  # text with more stray runs than one per this many bytes is binary


def decode_bytes(data: bytes) -> str:
    """UTF-8 text, stray bytes read as Windows-1252 (see `_cp1252_fallback`).

    That error handler is a Python call per stray byte (a 68 KB gzip of them took 19 s);
    text with more than one stray run per STRAY_RUN_BYTES is binary or hostile,
    not a pasted log, and has every stray byte replaced by U+FFFD in C instead."""
    most = len(data) // STRAY_RUN_BYTES + 16
    escaped = data.decode("utf-8", "surrogateescape")
    runs = sum(1 for _ in itertools.islice(_STRAY_RUN.finditer(escaped), most + 1))
    return data.decode("utf-8", "oomwatch-cp1252" if runs <= most else "replace")


def clean(text: str, utf8: bytes | None = None) -> str:
    """Text with colour escapes removed and pasted no-break spaces made plain spaces.

    `utf8`, the bytes `text` was decoded from, makes the checks byte searches (memchr fast;
    a str search of text with CJK in it is not).  Text with nothing to clean is returned
    itself (`is`), so a caller knows its bytes are still the text's.
    """
    if (b"\x1b" in utf8) if utf8 is not None else ("\x1b" in text):
        text = _SGR.sub("", text)  # the same object where nothing matched
    if text.isascii():
        return text
    if utf8 is not None:
        odd = _holds_odd_space(utf8)
    else:
        odd = any(space in text for space in _ODD_SPACES)
    return text.translate(_SPACES) if odd else text


def _holds_odd_space(utf8: bytes) -> bool:
    """Whether valid UTF-8 holds an odd space: one memchr pass per lead byte, and only if one
    is there a search of the bytes of the non-ASCII characters (a fraction of a log's)."""
    if not any(lead in utf8 for lead in _ODD_SPACE_LEADS):
        return False
    # Deleting the ASCII bytes leaves each longer character's bytes whole, in order; a lead
    # byte is never a continuation byte, so a space's form found there is that character.
    others = utf8.translate(None, _ASCII_BYTES)
    return any(space in others for space in _ODD_SPACES_UTF8)


def peek(blocks: Iterator[bytes], size: int = HEAD_BYTES) -> tuple[bytes, Iterator[bytes]]:
    """The first `size` bytes (fewer at end of input) and the whole stream, head included.

    A pipe may hand over a few bytes at a time, so blocks are gathered until there are enough.
    """
    head = b""
    for block in blocks:
        head += block
        if len(head) >= size:
            break
    return head, itertools.chain([head] if head else [], blocks)


def foreign(head: bytes, name: str) -> InputError | None:
    """The error for an input whose magic number says we cannot read it, else None."""
    for magic, what, how in _FOREIGN:
        if head.startswith(magic) and (magic != b"BZh" or head[3:4].isdigit()):
            hint = f"; read it with: {how.format(name=name)}" if how else ""
            return InputError(f"cannot read {name}: it is {what}{hint}")
    return None


def gunzip(blocks: Iterator[bytes], name: str, warnings: list[str]) -> Iterator[bytes]:
    """Decompress a gzip stream (several members, as `cat a.gz b.gz` makes, are read on)."""
    inflater, fed, read = zlib.decompressobj(wbits=31), False, 0
    for block in blocks:
        data, fed = block, True
        while True:
            try:
                out = inflater.decompress(data, OUT_BYTES)
            except zlib.error as exc:
                raise InputError(
                    f"cannot read {name}: its gzip data is corrupt near compressed byte"
                    f" {read + len(block) - len(data)} ({exc})"
                ) from exc
            if out:
                yield out
            if inflater.eof:  # one member done: another may follow, or padding
                data = inflater.unused_data
                if data and not GZIP_MAGIC.startswith(data[:2]):
                    if data.strip(b"\x00"):
                        warnings.append(f"{name}: bytes after the end of the gzip data ignored")
                    return
                inflater, fed = zlib.decompressobj(wbits=31), bool(data)
                if not data:
                    break
                continue
            data = inflater.unconsumed_tail
            if not data and len(out) < OUT_BYTES:
                break
        read += len(block)
    if fed and not inflater.eof:
        warnings.append(f"{name}: the gzip data ends early (a cut copy?); read what was there")


def utf16_encoding(head: bytes) -> str | None:
    """`utf-16` (with its BOM), `utf-16-le`/`-be` (without), or None for other text.

    A BOM alone is not enough (binary junk can start with FF FE): the text must also look
    like UTF-16, which for a log (mostly ASCII) means a zero byte in most code units.
    """
    bom = head[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
    sample = head[2:4098] if bom else head[:4096]
    units = len(sample) // 2
    if units == 0:
        return "utf-16" if bom and len(head) <= 3 else None
    high_le = sample[1 : 2 * units : 2].count(0) / units  # zero high bytes, little-endian
    high_be = sample[0 : 2 * units : 2].count(0) / units
    if bom:
        little = head[:2] == codecs.BOM_UTF16_LE
        return "utf-16" if (high_le if little else high_be) >= 0.5 else None
    if high_le >= 0.9 and high_be < 0.1:
        return "utf-16-le"
    if high_be >= 0.9 and high_le < 0.1:
        return "utf-16-be"
    return None


def to_utf8(blocks: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    """Re-encode a UTF-16 stream as UTF-8 (broken surrogates become U+FFFD)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    for block in blocks:
        if text := decoder.decode(block):
            yield text.encode()
    if text := decoder.decode(b"", final=True):
        yield text.encode()


def drop_bom(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """The stream without a leading UTF-8 BOM (Notepad writes one; it would hide line 1)."""
    first = next(blocks, b"")
    yield first.removeprefix(_UTF8_BOM)
    yield from blocks


def journal_form(head: bytes) -> str | None:
    """`json` (also json-seq, json-sse, json-pretty) or `export` for a journalctl dump."""
    start = head.lstrip(b"\x1e \t\r\n")
    start = start.removeprefix(b"data: ")
    if start.startswith(b"{"):
        fields = (b'"__CURSOR"', b'"__REALTIME_TIMESTAMP"', b'"MESSAGE"', b'"_TRANSPORT"')
        return "json" if any(f in head for f in fields) else None
    if _EXPORT_FIELD.match(start) and (b"\n__REALTIME_TIMESTAMP=" in head or b"\nMESSAGE" in head):
        return "export"
    return None
