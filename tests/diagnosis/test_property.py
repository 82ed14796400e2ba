"""Diagnosis and every report format on arbitrary incidents: never raise, always escape.

A daemon must not die on odd input: zero limits, missing parts, huge values, hostile names,
timelines with one sample or repeated times.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from oomwatch.diagnosis import diagnose, unknowns, verdict
from oomwatch.incident import (
    INCIDENT_KINDS,
    LIMIT_SCOPES,
    Breakdown,
    Incident,
    MemcgUsage,
    PodContext,
    TaskRow,
    Timeline,
    TimelineSample,
    Victim,
)
from oomwatch.report import jsonout, page, text

SIZE = st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 62))
SMALL = st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 30))
NAME = st.text(max_size=20)
ADJ = st.one_of(st.none(), st.integers(min_value=-1000, max_value=1000))

victims = st.builds(
    Victim,
    pid=st.integers(0, 1 << 22),
    comm=NAME,
    total_vm_bytes=SMALL,
    anon_rss_bytes=SMALL,
    file_rss_bytes=SMALL,
    shmem_rss_bytes=SMALL,
    oom_score_adj=ADJ,
)
tasks = st.builds(
    TaskRow,
    pid=st.integers(0, 1 << 22),
    name=NAME,
    rss_pages=SMALL,
    total_vm_pages=SMALL,
    oom_score_adj=ADJ,
)
samples = st.builds(
    TimelineSample,
    t_seconds=st.floats(0, 1e6, allow_nan=False),
    usage_bytes=st.integers(0, 1 << 40),
    limit_bytes=SIZE,
    anon_bytes=SIZE,
    file_bytes=SIZE,
    shmem_bytes=SIZE,
    thp_bytes=SIZE,
    kernel_bytes=SIZE,
)
timelines = st.builds(
    Timeline, samples=st.lists(samples, max_size=30), peak_bytes=SIZE, usage_at_kill_bytes=SIZE
)
incidents = st.builds(
    Incident,
    kind=st.sampled_from(INCIDENT_KINDS),
    constraint=st.one_of(st.none(), NAME),
    oom_memcg=st.one_of(st.none(), NAME, st.just("/kubepods/burstable/pod1-2/abc")),
    task_memcg=st.one_of(st.none(), NAME),
    memcg=st.one_of(
        st.none(),
        st.builds(
            MemcgUsage, usage_bytes=SMALL, limit_bytes=SIZE, failcnt=SMALL, kmem_usage_bytes=SMALL
        ),
    ),
    breakdown_bytes=st.one_of(
        st.none(), st.builds(Breakdown, anon=SIZE, file=SIZE, shmem=SIZE, thp=SIZE, kernel=SIZE)
    ),
    tasks=st.lists(tasks, max_size=8),
    victims=st.lists(victims, max_size=3),
    group_kill=st.booleans(),
    header_suppressed=st.booleans(),
    pod_uid=st.one_of(st.none(), NAME),
    qos_class=st.one_of(st.none(), st.sampled_from(["besteffort", "burstable", "guaranteed"])),
    limit_scope=st.one_of(st.none(), st.sampled_from(LIMIT_SCOPES)),
    container_survived=st.one_of(st.none(), st.booleans()),
    timeline=st.one_of(st.none(), timelines),
    k8s=st.one_of(
        st.none(),
        st.builds(PodContext, namespace=NAME, pod=NAME, container=NAME, restart_count=SMALL),
    ),
    allocator=st.one_of(st.none(), st.dictionaries(NAME, st.one_of(SIZE, NAME), max_size=4)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(incidents, min_size=1, max_size=3))
def test_diagnosis_and_rendering_never_raise(batch: list[Incident]) -> None:
    diagnosed = [diagnose(i, batch) for i in batch]
    for incident in diagnosed:
        assert all(f.evidence for f in incident.findings)
        line = verdict(incident)
        assert "\x1b" not in line and "\n" not in line
        unknowns(incident)
    out = text.render(diagnosed, ["w\x1b"], "src")
    assert "\x1b" not in out
    json.loads(jsonout.render(diagnosed, []))
    html = page.render(diagnosed, [], "src")
    assert "<script" not in html.lower()
