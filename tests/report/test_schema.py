"""schemas/report.schema.json is the `--json` contract: it names every field the incident has
(no drift either way), it holds for the store path and for records of 0.1.0, and it rejects
the old shape (`_kb` fields, the kernel's no-limit maximum as a number).  Every corpus file's
`--json` is validated by `test_every_corpus_file_gives_the_json_contract` (through
`run.json()`), and every incident the daemon tests read from an agent's store by
tests/daemon/conftest.py's `stored()`."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
import typing
from pathlib import Path
from typing import Any

import pytest
from support.contract import schema, validate_report, validate_stored
from support.report_cli import corpus_files

from oomwatch import incident as contract
from oomwatch.daemon.pipeline import Pipeline
from oomwatch.decode import decode_text
from oomwatch.incident import JSON_SCHEMA_VERSION, Incident
from oomwatch.store import IncidentStore

V1_RECORD = Path(__file__).resolve().parents[1] / "store" / "data" / "store-record-v1.json"


def _dataclasses() -> list[type[Any]]:
    return [
        c for c in vars(contract).values() if isinstance(c, type) and dataclasses.is_dataclass(c)
    ]


@pytest.mark.parametrize("cls", _dataclasses(), ids=lambda c: c.__name__)
def test_every_field_is_in_the_schema_and_nothing_else(cls: type[Any]) -> None:
    definition = schema()["$defs"][cls.__name__]
    names = [f.name for f in dataclasses.fields(cls)]
    assert list(definition["properties"]) == names
    assert definition["required"] == names  # `to_dict` writes every field, null or not


def test_sizes_are_bytes_and_quantities_say_their_unit() -> None:
    """Names carry units: every integer field of the contract is a size in `_bytes`, pages,
    seconds, or one of the counts and identifiers listed here."""
    counts = {
        "pid",
        "uid",
        "tgid",
        "order",
        "oom_score_adj",
        "failcnt",
        "kmsg_seq",
        "selected_pid",
        "restart_count",
        "last_termination_exit_code",
        "kills_counted",
        "victims_omitted",
    }
    for cls in _dataclasses():
        if cls is contract.Breakdown:
            continue  # its fields are the parts of `breakdown_bytes`: the unit is in that name
        hints = typing.get_type_hints(cls, vars(contract))
        for f in dataclasses.fields(cls):
            hint = str(hints[f.name])  # `int` as a word: "device-footprint" is a code
            if not re.search(r"\bint\b", hint) or "dict" in hint:
                continue
            assert f.name in counts or f.name.endswith(("_bytes", "_pages")), (cls, f.name)
    assert schema()["properties"]["schema_version"] == {"const": JSON_SCHEMA_VERSION}


def _pipeline_store(tmp_path: Path) -> Path:
    """A store the agent's pipeline wrote: diagnosed, capped, as the daemon stores them."""
    store = IncidentStore(tmp_path)
    pipeline = Pipeline(store=store, sinks=[], boot_id="b", node="node-a", enrich_wait_s=0.0)
    for path in corpus_files()[:12]:
        pipeline.process(decode_text(path.read_text(errors="replace")).incidents)
    pipeline.drain()
    assert store.count() > 10
    store.close()
    return tmp_path


def test_the_store_path_follows_the_schema(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    state = _pipeline_store(tmp_path)
    reader = IncidentStore.open_readonly(state)
    for incident in reader.query():
        validate_stored(incident.to_dict())
        assert incident.verdict is not None  # the agent diagnosed it before storing it
    reader.close()
    doc = report("--store", str(state), "--json").json()  # validated
    assert doc["incidents"] and all(i["verdict"] for i in doc["incidents"])


def test_a_record_0_1_stored_reads_back_in_the_current_shape(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    IncidentStore(tmp_path).close()
    db = sqlite3.connect(tmp_path / "oomwatch.db")
    db.execute(
        "INSERT INTO incidents (identity_key, kind, killed_at_s, detected_at_s, data)"
        " VALUES ('v1', 'memcg', 1.0, 1.0, ?)",
        (V1_RECORD.read_text(),),
    )
    db.commit()
    db.close()
    [incident] = report("--store", str(tmp_path), "--json").json()["incidents"]
    assert incident["memcg"]["swap_limit_bytes"] is None  # v1 stored "no limit" as kB
    assert incident["verdict_code"] == "limit-node-allocatable"  # diagnosed again here


def test_the_schema_rejects_the_version_1_shape() -> None:
    old = json.loads(V1_RECORD.read_text())
    with pytest.raises(AssertionError, match=r"usage_kb|additional"):
        validate_stored(old)
    current = Incident.from_dict(old).to_dict()
    validate_stored(current)
    sentinel = json.loads(json.dumps(current))
    sentinel["memcg"]["swap_limit_bytes"] = 9007199254740988 * 1024
    with pytest.raises(AssertionError, match="swap_limit_bytes"):
        validate_stored(sentinel)
    with pytest.raises(AssertionError):
        validate_report({"incidents": [], "warnings": []})  # no schema_version
