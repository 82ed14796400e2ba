"""`--json` is written by `jsonout`'s own encoder; it must be byte for byte what
`json.dumps(indent=2, ensure_ascii=True)` writes, for every incident and any value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomwatch.decode import decode_text
from oomwatch.report import jsonout

CORPUS = sorted((Path(__file__).resolve().parent.parent / "data" / "corpus").glob("*.log"))


def _standard(value: Any, indent: int) -> str:
    return json.dumps(value, indent=2, ensure_ascii=True).replace("\n", "\n" + " " * indent)


def test_every_corpus_incident_as_the_standard_library_writes_it() -> None:
    incidents = [i for path in CORPUS for i in decode_text(path.read_bytes()).incidents]
    assert len(incidents) >= 100
    for incident in incidents:
        value = jsonout.incident_json(incident)
        assert jsonout._dumps(value, 4) == _standard(value, 4)


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # controls, U+2028, astral characters, lone surrogates
)
_KEYS = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_KEYS, inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_VALUES, st.integers(0, 6))
def test_any_value_as_the_standard_library_writes_it(value: Any, indent: int) -> None:
    assert jsonout._dumps(value, indent) == _standard(value, indent)


def test_what_json_cannot_write_fails_as_json_fails() -> None:
    with pytest.raises(TypeError):
        jsonout._dumps({"a": [object()]}, 2)
    with pytest.raises(TypeError):
        jsonout._dumps({(1, 2): 1}, 2)
