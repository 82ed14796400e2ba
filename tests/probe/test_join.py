"""Joining flight records to incidents: the allocator section and framework-OOM incidents."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.probe_records import META, sample, write_record

from oomwatch.incident import Incident, PodContext, Victim
from oomwatch.probe.framework import FrameworkOomSource
from oomwatch.probe.join import INIT_PID_NS_INO, ProbeEnricher
from oomwatch.probe.ring import RingWriter
from oomwatch.probe.schema import FrameworkOomEvent, to_payload

CONTAINER_ID = META.cgroup.rsplit("/", 1)[1]  # type: ignore[union-attr]


def _kill(**fields: object) -> Incident:
    base = Incident(
        kind="memcg", kernel_time_s=1007.4, boot_id="b0", victims=[Victim(pid=999, comm="python3")]
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def _samples() -> list[Any]:
    # steps 0..9 at mono 1001..1010; the trainer enters grand_scoring at step 4 and grows
    return [
        sample(i, phase="score_train" if i < 4 else "grand_scoring", rss_mib=100 + 20 * i)
        for i in range(10)
    ]


def test_allocator_section_for_the_container(probe_dir: Path) -> None:
    write_record(probe_dir, samples=_samples())
    incident = _kill(container_id=CONTAINER_ID)
    assert ProbeEnricher(probe_dir).enrich(incident)
    alloc = incident.allocator
    assert alloc is not None
    assert alloc["matched_by"] == "container_id"
    # kill at 1007.4: the last sample before it is step 6 at 1007.0
    assert alloc["phase"] == "grand_scoring" and alloc["step"] == 6
    assert alloc["age_seconds"] == pytest.approx(0.4)
    assert alloc["last_sample"]["rss_bytes"] == 220 << 20
    assert alloc["peak"]["rss_bytes"] == 220 << 20  # samples after the kill do not count
    assert alloc["samples_in_window"] == 7 and alloc["window_seconds"] == pytest.approx(6.0)


def test_other_ways_to_match_and_not_to(probe_dir: Path) -> None:
    write_record(probe_dir, meta=replace(META, pid_ns=INIT_PID_NS_INO), samples=_samples())
    enricher = ProbeEnricher(probe_dir)
    by_memcg = _kill(task_memcg=META.cgroup)
    by_pid = _kill(victims=[Victim(pid=META.pid, comm="python3")])
    by_pod = _kill(pod_uid=META.pod_uid, k8s=PodContext(container="trainer"))
    for incident, how in ((by_memcg, "memcg"), (by_pid, "pid"), (by_pod, "pod_container")):
        enricher.enrich(incident)
        assert incident.allocator is not None and incident.allocator["matched_by"] == how
    strangers = [
        _kill(task_memcg="/kubepods/besteffort/pod9/other"),
        _kill(pod_uid=META.pod_uid, k8s=PodContext(container="sidecar")),
        # same pid, but years later: pids are reused
        _kill(victims=[Victim(pid=META.pid, comm="x")], kernel_time_s=90_000.0),
        # same container, but the kill came before the first sample
        _kill(container_id=CONTAINER_ID, kernel_time_s=999.0),
        # the victim's pid, but the kernel says it lived in another memcg than the file's
        _kill(victims=[Victim(pid=META.pid, comm="x")], task_memcg="/kubepods/pod9/other"),
        # the pod and container name, but another instance of the container (a restart)
        _kill(pod_uid=META.pod_uid, k8s=PodContext(container="trainer"), container_id="f" * 64),
    ]
    for incident in strangers:
        enricher.enrich(incident)
        assert incident.allocator is None


def test_wall_clock_when_the_boot_differs(probe_dir: Path) -> None:
    write_record(probe_dir, samples=_samples())
    incident = _kill(
        container_id=CONTAINER_ID,
        boot_id="other-boot",
        wall_time="2023-11-14T22:13:23.500000+00:00",
    )  # 1_700_000_003.5
    ProbeEnricher(probe_dir).enrich(incident)
    assert incident.allocator is not None and incident.allocator["step"] == 2


def _write_oom(probe_dir: Path, meta: object = META, name: str = "1b2c-44.trainer.ring") -> None:
    writer = RingWriter(str(probe_dir / name), to_payload(meta))  # type: ignore[arg-type]
    for s in _samples()[:5]:
        writer.write_sample(to_payload(s))
    writer.write_event(
        to_payload(
            FrameworkOomEvent(
                wall_s=1_700_000_005.5,
                mono_s=1005.5,
                framework="torch-cuda",
                message="CUDA out of memory. Tried to allocate 2.00 GiB.\x1b[2J",
                device="cuda:0",
                requested_bytes=2 << 30,
                free_bytes=1 << 30,
                phase="grand_scoring",
                step=4,
                batch_size=256,
            )
        )
    )
    writer.close()


def test_framework_oom_becomes_one_incident_with_its_claims_as_text(probe_dir: Path) -> None:
    _write_oom(probe_dir)
    source = FrameworkOomSource(probe_dir)
    (incident,) = source.poll(now_wall_s=1_700_000_006.0)
    assert incident.kind == "framework"
    # Nothing backs the file's claims yet: no pod identity (the API may vouch later).
    assert incident.pod_uid is None and incident.k8s is None and incident.task_memcg is None
    assert incident.invoker is not None and incident.invoker.pid == META.pid
    alloc = incident.allocator
    assert alloc is not None and alloc["framework"] == "torch-cuda"
    assert alloc["identity"] == "unverified" and alloc["owner_uid"] == os.getuid()
    assert alloc["claimed"] == {
        "pod_uid": META.pod_uid,
        "namespace": "ml",
        "pod": "trainer-0",
        "container": "trainer",
        "cgroup": META.cgroup,
    }
    assert alloc["requested_bytes"] == 2 << 30 and alloc["phase"] == "grand_scoring"
    assert alloc["last_sample"]["step"] == 4
    assert "\x1b" not in alloc["message"] and "\\x1b[2J" in alloc["message"]
    assert source.poll(now_wall_s=1_700_000_007.0) == []  # reported once
    again = FrameworkOomSource(probe_dir).poll(now_wall_s=1_700_000_007.0)
    assert again[0].identity_key() == incident.identity_key()  # the store drops the repeat


def test_a_per_pod_directory_vouches_for_its_pod_only_when_enforced(probe_dir: Path) -> None:
    uid = "1b2c0000-4444"
    (probe_dir / uid).mkdir()
    _write_oom(probe_dir / uid, replace(META, pod_uid=uid, cgroup=None))
    (unenforced,) = FrameworkOomSource(probe_dir).poll(now_wall_s=1_700_000_006.0)
    assert unenforced.pod_uid is None
    (incident,) = FrameworkOomSource(probe_dir, pod_dirs=True).poll(now_wall_s=1_700_000_006.0)
    assert incident.pod_uid == uid and incident.allocator is not None
    assert incident.allocator["identity"] == "pod_dir"
    assert incident.allocator["file"] == f"{uid}/1b2c-44.trainer.ring"
    # a file in pod A's directory that claims pod B is believed for neither
    _write_oom(probe_dir / uid, replace(META, pod_uid="ffff0000-9999", cgroup=None), "b.ring")
    lying = [
        i
        for i in FrameworkOomSource(probe_dir, pod_dirs=True).poll(1_700_000_006.0)
        if i.allocator and i.allocator["file"].endswith("/b.ring")
    ]
    assert [i.pod_uid for i in lying] == [None]


def test_a_file_claiming_another_pod_is_refused(
    probe_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write_oom(probe_dir, replace(META, pod_uid="someone-else"))
    with caplog.at_level(logging.WARNING):
        assert FrameworkOomSource(probe_dir).poll(now_wall_s=1_700_000_006.0) == []
    assert any("contradicts its memcg path" in getattr(r, "reason", "") for r in caplog.records)


def test_a_cgroup_namespace_root_matches_nobody(probe_dir: Path) -> None:
    write_record(probe_dir, meta=replace(META, cgroup="/", pod_uid=None), samples=_samples())
    incident = _kill(kind="global", task_memcg="/")
    ProbeEnricher(probe_dir).enrich(incident)
    assert incident.allocator is None


def test_a_pid_matches_only_in_the_host_pid_namespace(probe_dir: Path) -> None:
    # A pod's probe records its pid inside the pod (often 1); the kernel prints host pids.
    write_record(probe_dir, meta=replace(META, pid_ns=4026532771, cgroup="/"), samples=_samples())
    incident = _kill(victims=[Victim(pid=META.pid, comm="python3")])
    ProbeEnricher(probe_dir).enrich(incident)
    assert incident.allocator is None


def _forged(probe_dir: Path, meta: object, name: str = "forged.trainer.ring") -> Path:
    """A file claiming the trainer, with a sample 10 ms before the kill (fresher than any)."""
    fresh = replace(sample(6, phase="forged"), mono_s=1007.39, wall_s=1_700_000_007.39)
    return write_record(probe_dir, name, meta, [fresh])  # type: ignore[arg-type]


def test_a_strong_match_beats_a_fresher_weak_one(probe_dir: Path) -> None:
    write_record(probe_dir, samples=_samples())  # genuine: its memcg is the kill's container
    _forged(probe_dir, replace(META, cgroup="/", pid=1))  # claims only pod UID and container
    incident = _kill(
        container_id=CONTAINER_ID, pod_uid=META.pod_uid, k8s=PodContext(container="trainer")
    )
    ProbeEnricher(probe_dir).enrich(incident)
    alloc = incident.allocator
    assert alloc is not None and alloc["matched_by"] == "container_id"
    assert alloc["phase"] == "grand_scoring" and alloc["age_seconds"] == pytest.approx(0.4)


def test_a_file_not_owned_by_the_victims_uid_is_refused(
    probe_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    genuine = write_record(probe_dir, samples=_samples())
    forged = _forged(probe_dir, META)  # the same claims, word for word
    os.chown(forged, 65534, 65534)
    incident = _kill(
        task_memcg=META.cgroup, victims=[Victim(pid=999, comm="python3", uid=genuine.stat().st_uid)]
    )
    with caplog.at_level(logging.WARNING):
        ProbeEnricher(probe_dir).enrich(incident)
    assert incident.allocator is not None and incident.allocator["phase"] == "grand_scoring"
    assert any(
        "owner uid 65534 is not the victim's" in getattr(r, "reason", "") for r in caplog.records
    )
    # The kernel's uid decides, not freshness: had the victim run as 65534, only that file fits.
    other = _kill(task_memcg=META.cgroup, victims=[Victim(pid=999, comm="python3", uid=65534)])
    ProbeEnricher(probe_dir).enrich(other)
    assert other.allocator is not None and other.allocator["phase"] == "forged"


def test_the_enricher_refuses_a_pod_uid_its_memcg_contradicts(probe_dir: Path) -> None:
    elsewhere = "/kubepods/besteffort/pod77aa-00/" + "e" * 64
    _forged(probe_dir, replace(META, cgroup=elsewhere))  # "I am pod 1b2c-44", from pod 77aa-00
    incident = _kill(pod_uid=META.pod_uid, k8s=PodContext(container="trainer"))
    ProbeEnricher(probe_dir).enrich(incident)
    assert incident.allocator is None


def test_with_pod_dirs_a_file_joins_only_its_own_pods_kill(probe_dir: Path) -> None:
    """The kernel-kill join holds to the identity rule.  A file of the same owner in
    another pod's directory (or above them all) claiming the killed container's memcg is no
    evidence about that kill; the one in the killed pod's directory is."""
    victim_uid, other_uid = "1b2c0000-4444", "ffff0000-9999"
    for where in (other_uid, ""):
        (probe_dir / where).mkdir(exist_ok=True)
        write_record(probe_dir / where, samples=_samples())  # claims META's memcg
    kill = _kill(task_memcg=META.cgroup, pod_uid=victim_uid)
    assert ProbeEnricher(probe_dir, pod_dirs=True).enrich(kill)
    assert kill.allocator is None
    (probe_dir / victim_uid).mkdir()
    write_record(probe_dir / victim_uid, samples=_samples())
    joined = _kill(task_memcg=META.cgroup, pod_uid=victim_uid)
    assert ProbeEnricher(probe_dir, pod_dirs=True).enrich(joined)
    assert joined.allocator is not None and joined.allocator["file"].startswith(victim_uid)
