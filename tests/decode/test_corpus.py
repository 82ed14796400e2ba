"""Every public corpus report decodes with every kill found and its fields right, and gets
advice only where its evidence supports it.

The expectations in `tests/data/corpus/expected/` were written by reading each report,
not by running the decoder.  A contract key listed there must match exactly (a nested
object: the listed sub-keys), identity keys (`pod_uid`, `container_id`, `limit_scope`) as
the cgroup path gives them; `victims` lists every killed process in order (each with the
fields checked); `tasks_count`, `first_task`, `task_names`, `memcg_stats_subset` and
`notes_contain` check the task table, stats and notes; `advice` is the recommendation's
action after diagnosis (null: none), `advice_limit_bytes` the limit it sizes, and
`findings_include`/`findings_exclude` finding codes.  Files 31 and up name their public
source (`source`, `provenance`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oomwatch.cgroup_identity import annotate
from oomwatch.decode import decode_lines, decode_text
from oomwatch.diagnosis import diagnose
from oomwatch.incident import Incident

CORPUS_DIR = Path(__file__).resolve().parent.parent / "data" / "corpus"
EXPECTED_DIR = CORPUS_DIR / "expected"
FILES = sorted(CORPUS_DIR.glob("*.log"), key=lambda p: int(p.name.split("-", 1)[0]))
_SPECIAL = {
    "victims",
    "tasks_count",
    "first_task",
    "task_names",
    "notes_contain",
    "memcg_stats_subset",
    "advice",
    "advice_limit_bytes",
    "findings_include",
    "findings_exclude",
}
# The first corpus (files 01-30) came from /work/shared/corpus/public; later files name
# their source in the expectations.
FIRST_SOURCED = 31


def _number(path: Path) -> int:
    """The file's number (`NN-<what>.log`, three digits from 100 on)."""
    return int(path.name.split("-", 1)[0])


def _expected(path: Path) -> list[dict[str, Any]]:
    data = json.loads((EXPECTED_DIR / (path.stem + ".json")).read_text(encoding="utf-8"))
    assert data["file"] == path.name
    if _number(path) >= FIRST_SOURCED:
        assert data["source"] and data["provenance"], f"{path.name}: no source"
    incidents: list[dict[str, Any]] = data["incidents"]
    return incidents


def _check_subset(label: str, actual: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    assert actual is not None, f"{label}: missing"
    for key, value in expected.items():
        assert actual.get(key) == value, f"{label}.{key}: {actual.get(key)!r} != {value!r}"


def _check_advice(label: str, incident: Incident, expected: dict[str, Any]) -> None:
    diagnosed = diagnose(incident)
    rec = diagnosed.recommendation
    if "advice" in expected:
        action = rec["action"] if rec else None
        assert action == expected["advice"], f"{label}: advice {action!r} ({rec})"
    if "advice_limit_bytes" in expected:
        assert rec is not None and rec["memory_limit_bytes"] == expected["advice_limit_bytes"]
    codes = {f.code for f in diagnosed.findings}
    for code in expected.get("findings_include", []):
        assert code in codes, f"{label}: no {code} finding"
    for code in expected.get("findings_exclude", []):
        assert code not in codes, f"{label}: {code} finding without its evidence"


def _check_incident(label: str, incident: Incident, expected: dict[str, Any]) -> None:
    incident = annotate(incident)
    got = incident.to_dict()
    for key, value in expected.items():
        if key in _SPECIAL:
            continue
        if isinstance(value, dict):
            _check_subset(f"{label}.{key}", got[key], value)
        else:
            assert got[key] == value, f"{label}.{key}: {got[key]!r} != {value!r}"
    victims = expected["victims"]
    assert [(v.pid, v.comm) for v in incident.victims] == [
        (v["pid"], v["comm"]) for v in victims
    ], f"{label}: victims"
    for index, victim in enumerate(victims):
        _check_subset(f"{label}.victims[{index}]", got["victims"][index], victim)
    if "tasks_count" in expected:
        assert len(incident.tasks) == expected["tasks_count"], f"{label}: task rows"
    if "first_task" in expected:
        _check_subset(f"{label}.tasks[0]", got["tasks"][0], expected["first_task"])
    if "task_names" in expected:
        assert [t.name for t in incident.tasks] == expected["task_names"]
    if "memcg_stats_subset" in expected:
        _check_subset(f"{label}.memcg_stats", got["memcg_stats"], expected["memcg_stats_subset"])
    for text in expected.get("notes_contain", []):
        assert any(text in note for note in incident.notes), f"{label}: no note with {text!r}"
    _check_advice(label, incident, expected)


def test_corpus_is_complete() -> None:
    assert len(FILES) == 115
    assert len(list(EXPECTED_DIR.glob("*.json"))) == 115


@pytest.mark.parametrize("path", FILES, ids=[str(_number(p)) for p in FILES])
def test_corpus_file(path: Path) -> None:
    result = decode_text(path.read_bytes())
    expected = _expected(path)
    assert result.warnings == []
    assert len(result.incidents) == len(expected), [
        [(v.pid, v.comm) for v in i.victims] for i in result.incidents
    ]
    for index, (incident, want) in enumerate(zip(result.incidents, expected, strict=True)):
        _check_incident(f"{_number(path)}[{index}]", incident, want)


@pytest.mark.parametrize("path", FILES, ids=[str(_number(p)) for p in FILES])
def test_fast_scan_equals_line_by_line(path: Path) -> None:
    """The anchor-window scan must find exactly what parsing every line finds."""
    text = path.read_text(encoding="utf-8")
    fast = [i.to_dict() for i in decode_text(text).incidents]
    full = [i.to_dict() for i in decode_lines(text.split("\n")).incidents]
    assert fast == full


def test_every_corpus_kill_is_found() -> None:
    """Across the corpus: the number of killed processes the expectations list."""
    found = sum(len(i.victims) for p in FILES for i in decode_text(p.read_bytes()).incidents)
    expected = sum(len(i["victims"]) for p in FILES for i in _expected(p))
    assert found == expected == 52 + 48 + 15 + 14 + 1
