"""Fuzz the parsers a pod or the kernel feeds: the probe reader, the OOM decoder, and the
journal reader of `oomwatch report`.

    .venv/bin/python bench/fuzz.py probe --cases 100000
    .venv/bin/python bench/fuzz.py decode --cases 100000
    .venv/bin/python bench/fuzz.py journal --cases 100000
    .venv/bin/python bench/fuzz.py hostile --cases 10

`probe`: mutated flight-record images (bit flips, byte runs, truncation, splices, slot
payloads replaced by hostile JSON: nesting, huge numbers, wrong types, NaN) through
`parse_flight_record`, and every 100th case as a file through `ProbeDirReader`.  Refusals
(`RingFormatError`, `SchemaError`) are the expected outcome; any other exception counts.
`decode`: mutated corpus reports (lines dropped, duplicated, cut, swapped, bytes flipped,
numbers replaced, control and invalid UTF-8 bytes) through `decode_text`: nothing may raise.
`journal`: the journal dumps of tests/data/journal (json, json-pretty, export) mutated as
the decode cases are, plus JSON-level damage (nesting, truncation, wrong types, huge values,
invalid UTF-8, gzip wrapping) through the report's whole input path (`load_file`: sniffing,
decompression, the journal readers, the decoder); `InputError` (a clear message naming the
input) is an expected outcome, any other exception counts.
`hostile`: the megabyte anchor-text lines and 5000-digit numbers of tests/support/hostile_lines.py
(what tests/decode/test_properties.py holds to the decoder's record cap) through `decode_text`,
`--cases` times each; prints the slowest decode of each input, in seconds.
Prints cases, exceptions, time and peak RSS (VmHWM); exits 1 on any exception.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import random
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

from oomwatch.decode import decode_text
from oomwatch.probe.reader import ProbeDirReader, ReaderLimits, parse_flight_record
from oomwatch.probe.ring import (
    HEADER_BYTES,
    RingFormatError,
    RingGeometry,
    encode_header,
    encode_slot,
)
from oomwatch.probe.schema import SchemaError

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]  # `support`, for the hostile inputs
from support.hostile_lines import (  # noqa: E402
    HUGE_NUMBER_HEADER,
    MEGABYTE_LINES,
    huge_number_lines,
)

HOSTILE_JSON = [
    b"[" * 5000,
    b'{"a":' * 400,
    b"1e999999",
    b'{"wall_s": NaN}',
    b"\xff\xfe",
    b'{"rss_bytes": 1' + b"0" * 5000 + b"}",
    b'{"cuda": {"device": [1]}}',
    b'{"phase": "' + b"\\ud800" * 10 + b'"}',
    b"{}" * 100,
    b'"' * 3000,
]


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def base_image(rng: random.Random) -> bytes:
    geometry = RingGeometry(slot_bytes=512, sample_slots=rng.randint(1, 8), event_slots=2)
    meta = {
        "pid": 7,
        "comm": "python",
        "started_wall_s": 1.0,
        "started_mono_s": 1.0,
        "pod_uid": "u",
        "cgroup": "/kubepods/podu/c",
    }
    data = bytearray(geometry.file_bytes)
    data[:HEADER_BYTES] = encode_header(geometry, meta)
    for seq in range(1, rng.randint(1, 12)):
        sample = {
            "wall_s": 2.0 + seq,
            "mono_s": 2.0 + seq,
            "rss_bytes": seq << 20,
            "phase": "train",
            "cuda": {"device": "cuda:0", "allocated_bytes": seq},
        }
        at = geometry.sample_offset(seq)
        data[at : at + 512] = encode_slot(seq, sample, 512)
    event = {"wall_s": 3.0, "mono_s": 3.0, "framework": "torch-cuda", "message": "CUDA oom"}
    at = geometry.event_offset(1)
    data[at : at + 512] = encode_slot(1, event, 512)
    return bytes(data)


def mutate_probe(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if op == 0 and buf:  # bit flips
            for _ in range(rng.randint(1, 16)):
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # a run of one byte
            at = rng.randrange(len(buf))
            buf[at : at + rng.randint(1, 64)] = bytes([rng.randrange(256)]) * rng.randint(1, 64)
        elif op == 2:  # truncate or extend
            buf = buf[: rng.randrange(len(buf) + 1)] + bytes(rng.choice([0, 0, 17]))
        elif op == 3:  # a slot whose CRC is valid but whose JSON is hostile
            body = rng.choice(HOSTILE_JSON)[:496]
            seq = rng.randint(1, 4)
            crc = zlib.crc32(struct.pack("<QI", seq, len(body)) + body)
            slot = struct.pack("<QII", seq, len(body), crc) + body
            at = HEADER_BYTES + (seq - 1) * 512
            buf[at : at + len(slot)] = slot
        elif op == 4 and len(buf) > 40:  # the header's geometry words
            struct.pack_into(
                "<I",
                buf,
                8 + 4 * rng.randrange(6),
                rng.choice([0, 1, 255, 256, 4096, 65536, 2**31, 2**32 - 1, rng.randrange(2**32)]),
            )
        else:  # splice two regions
            a, b = rng.randrange(len(buf) + 1), rng.randrange(len(buf) + 1)
            buf = buf[:a] + buf[b:]
    return bytes(buf)


def fuzz_probe(cases: int, seed: int) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    errors: list[str] = []
    refused = 0
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        reader = ProbeDirReader(directory, ReaderLimits(max_walk_s=5.0))
        for case in range(cases):
            image = mutate_probe(rng, base_image(rng))
            try:
                parse_flight_record("f.ring", image, 0.0, keep_samples=64, keep_events=16)
            except (RingFormatError, SchemaError):
                refused += 1
            except Exception as exc:
                errors.append(f"case {case}: {type(exc).__name__}: {exc}"[:200])
            if case % 100 == 0:
                (directory / f"f{case % 1000}.ring").write_bytes(image)
                try:
                    reader.read_all(now_wall_s=time.time())
                except Exception as exc:  # the reader itself must never raise
                    errors.append(f"reader case {case}: {type(exc).__name__}: {exc}"[:200])
    print(f"probe: {refused} refused as invalid, {cases - refused} parsed")
    return cases, errors


def mutate_log(rng: random.Random, lines: list[str]) -> str:
    out = list(lines)
    for _ in range(rng.randint(1, 6)):
        if not out:
            break
        i = rng.randrange(len(out))
        op = rng.randrange(8)
        if op == 0:
            del out[i]
        elif op == 1:
            out.insert(i, out[rng.randrange(len(out))])
        elif op == 2:
            out[i] = out[i][: rng.randrange(len(out[i]) + 1)]
        elif op == 3:
            j = rng.randrange(len(out))
            out[i], out[j] = out[j], out[i]
        elif op == 4:
            out[i] = "".join(
                str(rng.choice([0, 9, 2**64, -1])) if c.isdigit() and rng.random() < 0.3 else c
                for c in out[i]
            )
        elif op == 5:
            at = rng.randrange(len(out[i]) + 1)
            junk = rng.choice(["\x1b[2J", "\x00", "\u202e", "\r", "\ud800", "(", "=", ":"])
            out[i] = out[i][:at] + junk + out[i][at:]
        elif op == 6:
            out[i] = (out[i] * rng.randint(2, 50))[:20_000]  # long, still one record
        else:
            out.insert(i, rng.choice(lines))
    return "\n".join(out)


def fuzz_decode(cases: int, seed: int) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    corpus = [
        p.read_text(errors="replace").splitlines()
        for p in sorted((ROOT / "tests" / "data" / "corpus").glob("*.log"))
    ]
    corpus.append((ROOT / "tests" / "daemon" / "data" / "memcg_kill.kmsg").read_text().splitlines())
    errors: list[str] = []
    incidents = 0
    for case in range(cases):
        lines = rng.choice(corpus)
        start = rng.randrange(max(1, len(lines) - 80))
        text = mutate_log(rng, lines[start : start + rng.randint(5, 120)])
        data: str | bytes = text
        if rng.random() < 0.2:  # invalid UTF-8 in the bytes
            raw = bytearray(text.encode("utf-8", "surrogatepass"))
            for _ in range(rng.randint(1, 8)):
                if raw:
                    raw[rng.randrange(len(raw))] = rng.choice([0x80, 0xC3, 0xFF, 0xED])
            data = bytes(raw)
        try:
            incidents += len(decode_text(data).incidents)
        except Exception as exc:
            errors.append(f"case {case}: {type(exc).__name__}: {exc}"[:200])
    print(f"decode: {incidents} incidents decoded")
    return cases, errors


JSON_DAMAGE = [
    b"[" * 200_000,
    b'{"MESSAGE":' * 3000,
    b'"MESSAGE":null',
    b'"MESSAGE":[1,2]',
    b'"__REALTIME_TIMESTAMP":"x"',
    b'"_SOURCE_MONOTONIC_TIMESTAMP":"-1"',
    b"\xff\xfe\x80",
    b'"MESSAGE":"' + b"\\ud800" * 50 + b'"',
    b'"PRIORITY":1e999',
    b"\x00" * 10,
    b"}" * 50,
    b"\x1e",
]


def mutate_journal(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    start = rng.randrange(max(1, len(lines) - 40))
    out = lines[start : start + rng.randint(1, 60)]
    for _ in range(rng.randint(1, 5)):
        if not out:
            break
        i = rng.randrange(len(out))
        op = rng.randrange(6)
        if op == 0:
            at = rng.randrange(len(out[i]) + 1)
            out[i] = out[i][:at] + rng.choice(JSON_DAMAGE) + out[i][at:]
        elif op == 1:
            out[i] = out[i][: rng.randrange(len(out[i]) + 1)]
        elif op == 2:
            del out[i]
        elif op == 3:
            out.insert(i, out[rng.randrange(len(out))])
        elif op == 4:
            raw = bytearray(out[i])
            for _ in range(rng.randint(1, 8)):
                if raw:
                    raw[rng.randrange(len(raw))] = rng.randrange(256)
            out[i] = bytes(raw)
        else:
            out[i] = (out[i] * rng.randint(2, 40))[:70_000]
    joined = b"\n".join(out)
    return gzip.compress(joined, 1) if rng.random() < 0.1 else joined


def fuzz_journal(cases: int, seed: int) -> tuple[int, list[str]]:
    from oomwatch.report.inputs import load_file
    from oomwatch.report.sniff import InputError

    rng = random.Random(seed)
    dumps = [
        p.read_bytes()
        for p in sorted((ROOT / "tests" / "data" / "journal").iterdir())
        if p.suffix in (".json", ".export", ".json-pretty")
    ]
    errors: list[str] = []
    incidents = refused = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "journal"
        for case in range(cases):
            path.write_bytes(mutate_journal(rng, rng.choice(dumps)))
            try:
                incidents += len(load_file(str(path)).incidents)
            except InputError:
                refused += 1
            except Exception as exc:
                errors.append(f"case {case}: {type(exc).__name__}: {exc}"[:200])
    print(f"journal: {incidents} incidents decoded, {refused} inputs refused with a message")
    return cases, errors


def time_hostile(cases: int, seed: int) -> tuple[int, list[str]]:
    """The slowest of `cases` decodes of each hostile input (no randomness: `seed` unused)."""
    texts = {
        "megabyte lines": "\n".join(MEGABYTE_LINES),
        **{f"megabyte line {i}": line for i, line in enumerate(MEGABYTE_LINES)},
        "huge numbers": "\n".join([HUGE_NUMBER_HEADER, *huge_number_lines()]),
    }
    errors: list[str] = []
    slowest: dict[str, float] = {}
    for name, text in texts.items():
        for _ in range(cases):
            started = time.process_time()
            try:
                decode_text(text)
            except Exception as exc:
                errors.append(f"{name}: {type(exc).__name__}: {exc}"[:200])
            spent = time.process_time() - started
            slowest[name] = max(slowest.get(name, 0.0), spent)
    print(json.dumps({"slowest_cpu_s": {k: round(v, 4) for k, v in slowest.items()}}))
    return cases * len(texts), errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target", choices=["probe", "decode", "journal", "hostile"])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the reader logs each refusal; only exceptions count
    started = time.perf_counter()
    run = {
        "probe": fuzz_probe,
        "decode": fuzz_decode,
        "journal": fuzz_journal,
        "hostile": time_hostile,
    }[args.target]
    cases, errors = run(args.cases, args.seed)
    result = {
        "target": args.target,
        "cases": cases,
        "exceptions": len(errors),
        "seconds": round(time.perf_counter() - started, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "first": errors[:5],
    }
    print(json.dumps(result))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
