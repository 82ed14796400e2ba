"""The flight-recorder file: a fixed-size header and a bounded ring of checksummed slots.

The trainer can be SIGKILLed at any instant, so no write may leave the file without a
readable recent sample.  Each sample goes to the slot after the previous one, in one
`pwrite`; a slot carries its sequence number and a CRC over sequence, length and payload.
A write cut short leaves at worst that one slot torn: it held the oldest sample, so the
reader, taking the highest valid sequence, still finds the last complete sample.

Layout (little endian):
  header  (HEADER_BYTES): magic, version, slot_bytes, sample_slots, event_slots,
          meta_len, meta_crc, then the metadata JSON (who wrote the file).
  samples (sample_slots x slot_bytes), then framework-OOM events (event_slots x slot_bytes);
  slot:   u64 seq (0 = never written), u32 payload_len, u32 crc32, JSON payload, zero padding.
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import zlib
from dataclasses import dataclass
from typing import Any

MAGIC = b"OOMWPRB1"
VERSION = 1
HEADER_BYTES = 1024
SLOT_BYTES = 2048
SAMPLE_SLOTS = 128
EVENT_SLOTS = 16
FILE_SUFFIX = ".ring"
MAX_BRACKETS = 64  # per payload; a valid one has 1-3 objects and a few [] in message text

_HEADER = struct.Struct("<8sIIIIII")  # magic, version, slot_bytes, samples, events, meta len, crc
_SLOT = struct.Struct("<QII")  # seq, payload length, crc32
_SLOT_KEY = struct.Struct("<QI")  # the part of the slot header the CRC covers


class RingFormatError(ValueError):
    """The bytes are not a valid flight-recorder file (the reader refuses the whole file)."""


@dataclass(frozen=True, slots=True)
class RingGeometry:
    """Slot size and counts; fixed per file so every slot has a fixed offset."""

    slot_bytes: int = SLOT_BYTES
    sample_slots: int = SAMPLE_SLOTS
    event_slots: int = EVENT_SLOTS

    @property
    def file_bytes(self) -> int:
        return HEADER_BYTES + (self.sample_slots + self.event_slots) * self.slot_bytes

    def sample_offset(self, seq: int) -> int:
        return HEADER_BYTES + ((seq - 1) % self.sample_slots) * self.slot_bytes

    def event_offset(self, seq: int) -> int:
        first = HEADER_BYTES + self.sample_slots * self.slot_bytes
        return first + ((seq - 1) % self.event_slots) * self.slot_bytes


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, sort_keys=True).encode()


def encode_header(geometry: RingGeometry, meta: dict[str, Any]) -> bytes:
    body = _dumps(meta)
    room = HEADER_BYTES - _HEADER.size
    if len(body) > room:
        raise ValueError(f"probe metadata is {len(body)} bytes, the header holds {room}")
    head = _HEADER.pack(
        MAGIC,
        VERSION,
        geometry.slot_bytes,
        geometry.sample_slots,
        geometry.event_slots,
        len(body),
        zlib.crc32(body),
    )
    return (head + body).ljust(HEADER_BYTES, b"\0")


def encode_slot(seq: int, payload: dict[str, Any], slot_bytes: int) -> bytes:
    """One slot image; raises ValueError if the JSON does not fit (callers trim first)."""
    body = _dumps(payload)
    if len(body) > slot_bytes - _SLOT.size:
        raise ValueError(f"payload of {len(body)} bytes does not fit a {slot_bytes}-byte slot")
    crc = zlib.crc32(_SLOT_KEY.pack(seq, len(body)) + body)
    return (_SLOT.pack(seq, len(body), crc) + body).ljust(slot_bytes, b"\0")


def decode_header(data: bytes) -> tuple[RingGeometry, dict[str, Any]]:
    """Parse and bound-check the header; the geometry must match the data's length exactly."""
    if len(data) < HEADER_BYTES:
        raise RingFormatError(f"truncated: {len(data)} bytes, header needs {HEADER_BYTES}")
    magic, version, slot_bytes, samples, events, meta_len, meta_crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise RingFormatError("bad magic")
    if version != VERSION:
        raise RingFormatError(f"unsupported version {version}")
    if not (256 <= slot_bytes <= 65536 and 1 <= samples <= 4096 and events <= 256):
        raise RingFormatError(f"implausible geometry {slot_bytes}x{samples}+{events}")
    geometry = RingGeometry(slot_bytes, samples, events)
    if len(data) != geometry.file_bytes:
        raise RingFormatError(f"size {len(data)} != {geometry.file_bytes} the header declares")
    if meta_len > HEADER_BYTES - _HEADER.size:
        raise RingFormatError("metadata length out of range")
    body = data[_HEADER.size : _HEADER.size + meta_len]
    if zlib.crc32(body) != meta_crc:
        raise RingFormatError("metadata checksum mismatch")
    return geometry, _loads_object(body, "metadata")


def decode_slots(
    data: bytes, first: int, count: int, slot_bytes: int, keep: int | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """The `keep` newest valid slots of a region as (seq, payload), oldest first.

    Torn or empty slots are skipped.  Only slot headers are read for the others: the JSON of
    at most `keep` slots is parsed, so a file's cost in time and memory is bounded by what
    the reader keeps, not by how many slots the file declares.
    """
    heads = []
    for i in range(count):
        seq, length = _SLOT.unpack_from(data, first + i * slot_bytes)[:2]
        if seq != 0 and length <= slot_bytes - _SLOT.size:
            heads.append((seq, i, length))
    heads.sort(reverse=True)
    found: list[tuple[int, dict[str, Any]]] = []
    for seq, i, length in heads:
        if keep is not None and len(found) >= keep:
            break
        off = first + i * slot_bytes
        crc = _SLOT.unpack_from(data, off)[2]
        body = data[off + _SLOT.size : off + _SLOT.size + length]
        if zlib.crc32(_SLOT_KEY.pack(seq, length) + body) != crc:
            continue  # torn by a kill mid-write, or never completed
        if (seq - 1) % count != i:
            raise RingFormatError(f"slot {i} holds sequence {seq}, which belongs elsewhere")
        found.append((seq, _loads_object(body, f"slot {i}")))
    found.reverse()
    return found


def _loads_object(body: bytes, what: str) -> dict[str, Any]:
    # The schema nests objects two deep and has no arrays; json.loads recurses once per
    # bracket, and ~1,000 of them (a 1 KB "[[[[...") raise RecursionError.  Counting the
    # brackets bounds the depth before parsing (brackets inside strings count too: a
    # TensorFlow message names a shape or two).
    brackets = body.count(b"[") + body.count(b"{")
    if brackets > MAX_BRACKETS:
        raise RingFormatError(f"{what}: {brackets} brackets, more than {MAX_BRACKETS}")
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RingFormatError(f"{what}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise RingFormatError(f"{what}: not a JSON object")
    return obj


# Readable by its owner only: the agent, another uid with no capabilities, gets a descriptor
# from the probe's socket instead of opening it by path (oomwatch.probe.handoff).
RING_FILE_MODE = 0o600


class RingWriter:
    """Writes samples and events into one file; used only by the probe in its own process."""

    def __init__(self, path: str, meta: dict[str, Any], geometry: RingGeometry | None = None):
        self.geometry = geometry or RingGeometry()
        header = encode_header(self.geometry, meta)
        # Built under a name the reader ignores, then renamed: no reader sees a half header.
        # The name is unpredictable and O_EXCL: another pod with the directory cannot plant
        # a link or a file there to be written through.
        directory, base = os.path.split(path)
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(8)}.tmp")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(tmp, flags, RING_FILE_MODE)
        try:
            os.fchmod(self._fd, RING_FILE_MODE)  # exactly this, whatever the trainer's umask
            os.pwrite(self._fd, header + bytes(self.geometry.file_bytes - HEADER_BYTES), 0)
            os.replace(tmp, path)
        except OSError:
            os.close(self._fd)
            raise
        self._sample_seq = 0
        self._event_seq = 0

    def write_sample(self, payload: dict[str, Any]) -> int:
        """Write the next sample slot in one pwrite; returns its sequence number."""
        seq = self._sample_seq + 1
        os.pwrite(
            self._fd,
            encode_slot(seq, payload, self.geometry.slot_bytes),
            self.geometry.sample_offset(seq),
        )
        self._sample_seq = seq
        return seq

    def write_event(self, payload: dict[str, Any]) -> int:
        seq = self._event_seq + 1
        os.pwrite(
            self._fd,
            encode_slot(seq, payload, self.geometry.slot_bytes),
            self.geometry.event_offset(seq),
        )
        self._event_seq = seq
        return seq

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
