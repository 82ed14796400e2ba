"""identify() on arbitrary text: never raises, and never turns hostile text into an identity."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from oomwatch.cgroup_identity import identify

_COMPONENT = st.one_of(
    st.sampled_from(
        [
            "kubepods",
            "kubepods.slice",
            "burstable",
            "besteffort",
            "kubepods-burstable.slice",
            "pod" + "0" * 8,
            "kubepods-pod1_2.slice",
            "cri-containerd-ab.scope",
            "crio-x",
            "..",
            "",
        ]
    ),
    st.text(max_size=40),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_COMPONENT, max_size=8))
def test_identify_never_raises_and_ids_are_clean(parts: list[str]) -> None:
    ident = identify("/" + "/".join(parts))
    assert ident.level in {"container", "pod", "qos", "node", "cgroup"}
    for value in (ident.pod_uid, ident.container_id):
        if value is not None:
            assert re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z_.-]*", value), value
    if ident.level in ("pod", "container"):
        assert ident.pod_uid is not None and ident.qos_class is not None
