"""Findings on hand-built incidents: each fires on its evidence, and not without it."""

from __future__ import annotations

from oomwatch.diagnosis import CODES, diagnose, unknowns, verdict
from oomwatch.incident import (
    Breakdown,
    Finding,
    Incident,
    MemcgUsage,
    PodContext,
    TaskRow,
    Timeline,
    TimelineSample,
    Victim,
)

MIB = 1 << 20
POD = "/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba"
CONTAINER = f"{POD}/{'a' * 64}"


def _kill(
    *,
    usage_mib: int = 256,
    limit_mib: int = 256,
    anon_mib: int = 250,
    file_mib: int = 4,
    shmem_mib: int = 0,
    thp_mib: int = 0,
    kernel_mib: int | None = None,
    scope: str = "container",
    oom_memcg: str = CONTAINER,
    **kw: object,
) -> Incident:
    victim = Victim(
        pid=4242, comm="python", total_vm_bytes=(anon_mib + 20) * MIB, anon_rss_bytes=anon_mib * MIB
    )
    inc = Incident(
        kind="memcg",
        oom_memcg=oom_memcg,
        task_memcg=CONTAINER,
        memcg=MemcgUsage(usage_bytes=usage_mib * MIB, limit_bytes=limit_mib * MIB, failcnt=7),
        breakdown_bytes=Breakdown(
            anon=anon_mib * MIB,
            file=file_mib * MIB,
            shmem=shmem_mib * MIB,
            thp=thp_mib * MIB,
            kernel=None if kernel_mib is None else kernel_mib * MIB,
        ),
        tasks=[TaskRow(pid=4242, name="python", rss_pages=anon_mib * 256, oom_score_adj=900)],
        victims=[victim],
        pod_uid="28fcb1a0-a45c-44e7-b9bf-e3b9360bedba",
        container_id="a" * 64,
        qos_class="burstable",
        limit_scope=scope,  # type: ignore[arg-type]
    )
    for key, value in kw.items():
        setattr(inc, key, value)
    return inc


def _codes(inc: Incident, history: list[Incident] | None = None) -> set[str]:
    return {f.code for f in diagnose(inc, history or []).findings}


def test_plain_container_limit_gives_only_the_limit_finding() -> None:
    out = diagnose(_kill())
    assert [f.code for f in out.findings] == ["limit-container"]
    finding = out.findings[0]
    assert "256 MiB" in finding.message and "python (pid 4242)" in finding.message
    assert finding.evidence["limit_bytes"] == 256 * MIB
    rec = out.recommendation
    assert rec is not None and rec["memory_limit"] == "308Mi"  # 256 MiB + 20 %, rounded up
    assert rec["limit_will_not_help"] is False and rec["memory_request"] is None
    line = verdict(out)
    assert line.startswith("python (pid 4242) in pod 28fcb1a0")  # UID cut: ≤ 200 chars
    assert "container memory limit of 256 MiB" in line and "at least 308 MiB" in line
    assert "308Mi" not in line  # prose reads human sizes; the quantity is for the manifest
    assert rec["message"].startswith("Set the container's memory limit to at least 308 MiB")
    assert rec["message"].endswith(" In the container's spec: `resources.limits.memory: 308Mi`.")


def test_every_finding_code_is_listed() -> None:
    assert {"limit-pod", "thp-hidden", "crash-loop", "false-oomkilled"} <= CODES


def test_scopes_map_to_limit_codes() -> None:
    assert "limit-pod" in _codes(_kill(scope="pod", oom_memcg=POD))
    assert "limit-node-allocatable" in _codes(_kill(scope="node", oom_memcg="/kubepods"))
    glob = Incident(
        kind="global",
        constraint="CONSTRAINT_NONE",
        limit_scope="global",
        victims=[Victim(pid=1, comm="java", anon_rss_bytes=1 << 30)],
    )
    out = diagnose(glob)
    assert [f.code for f in out.findings] == ["limit-node"]
    rec = out.recommendation
    # no limit was hit: a process outside any pod is not sized (the kernel picked it by score)
    assert rec and rec["action"] == "relieve-node" and rec["limit_will_not_help"] is True
    assert rec["memory_limit"] is None and rec["memory_request"] is None
    assert "The node's memory ran out, not a limit of java (pid 1)" in rec["message"]
    assert "it held 1 GiB at the kill" in rec["message"]
    assert "limit-cpuset" in _codes(Incident(kind="cpuset", constraint="CONSTRAINT_CPUSET"))
    assert "limit-mempolicy" in _codes(Incident(kind="mempolicy"))


def test_consumers() -> None:
    assert _codes(_kill(thp_mib=180)) == {"limit-container", "thp-hidden"}
    assert _codes(_kill(anon_mib=20, file_mib=230, shmem_mib=220)) == {
        "limit-container",
        "tmpfs-shmem",
    }
    assert _codes(_kill(anon_mib=20, file_mib=230, shmem_mib=0)) == {
        "limit-container",
        "page-cache",
    }
    assert _codes(_kill(anon_mib=150, kernel_mib=100)) == {"limit-container", "kernel-memory"}
    # small shares do not fire
    assert _codes(_kill(thp_mib=20, shmem_mib=30, file_mib=40)) == {"limit-container"}


def test_thp_message_names_dashboards_and_settings() -> None:
    [_, thp] = diagnose(_kill(thp_mib=180)).findings
    assert "180 MiB (70 %)" in thp.message
    assert "transparent_hugepage/enabled" in thp.message and "working_set" in thp.message


def test_many_processes_lists_by_name() -> None:
    tasks = [TaskRow(pid=100 + i, name="worker", rss_pages=40 * 256) for i in range(6)]
    tasks.append(TaskRow(pid=99, name="python", rss_pages=10 * 256))
    out = diagnose(_kill(tasks=tasks))
    finding = next(f for f in out.findings if f.code == "many-processes")
    assert "7 processes" in finding.message and "worker ×6 240 MiB" in finding.message
    assert "fewer/smaller worker" in (out.recommendation or {})["message"]


def test_overcommit_vm_needs_total_vm_far_above_rss_and_limit() -> None:
    inc = _kill()
    inc.victims[0].total_vm_bytes = 4 << 30  # 4 GiB reserved, 250 MiB touched
    [finding] = [f for f in diagnose(inc).findings if f.code == "overcommit-vm"]
    assert "4 GiB" in finding.message and "16×" in finding.message
    inc.victims[0].total_vm_bytes = 270 * MIB
    assert "overcommit-vm" not in _codes(inc)


def test_score_adj_victim() -> None:
    tasks = [
        TaskRow(pid=4242, name="python", rss_pages=50 * 256, oom_score_adj=1000),
        TaskRow(pid=7, name="big", rss_pages=200 * 256, oom_score_adj=-997),
    ]
    inc = _kill(tasks=tasks)
    inc.victims[0].anon_rss_bytes = 50 * MIB
    [f] = [f for f in diagnose(inc).findings if f.code == "score-adj-victim"]
    assert f.evidence["largest_pid"] == 7 and "Guaranteed -997" in f.message
    tasks[0].oom_score_adj = -997
    assert "score-adj-victim" not in _codes(inc)


def test_who_and_how() -> None:
    assert "child-process-kill" in _codes(_kill(container_survived=True))
    assert "child-process-kill" not in _codes(_kill(container_survived=None))
    group = _kill(group_kill=True, group_cgroup=CONTAINER)
    group.victims.append(Victim(pid=4243, comm="sh"))
    f = next(f for f in diagnose(group).findings if f.code == "group-kill")
    assert f.evidence["victim_pids"] == [4242, 4243] and "singleProcessOOMKill" in f.message
    bare = Incident(kind="memcg", header_suppressed=True, victims=[Victim(pid=5, comm="x")])
    out = diagnose(bare)
    assert {f.code for f in out.findings} == {"rate-limited-report"}
    assert out.recommendation is None
    assert any("breakdown unknown" in u for u in unknowns(out))
    assert "unknown limit" in verdict(out)


def _timeline(usages_mib: list[float], limit_mib: int = 256) -> Timeline:
    samples = [
        TimelineSample(t_seconds=1000.0 + i, usage_bytes=int(u * MIB), limit_bytes=limit_mib * MIB)
        for i, u in enumerate(usages_mib)
    ]
    return Timeline(
        samples=samples,
        interval_seconds=1.0,
        peak_bytes=max(s.usage_bytes for s in samples),
        usage_at_kill_bytes=samples[-1].usage_bytes,
    )


def test_leak_trend_says_a_bigger_limit_will_not_help() -> None:
    inc = _kill(timeline=_timeline([56 + 2 * i for i in range(100)]))
    out = diagnose(inc)
    codes = {f.code for f in out.findings}
    assert "leak-trend" in codes and "spike" not in codes
    leak = next(f for f in out.findings if f.code == "leak-trend")
    assert abs(leak.evidence["slope_bytes_per_second"] - 2 * MIB) < 1024
    assert leak.evidence["seconds_to_limit"] == 100.0
    assert out.recommendation and out.recommendation["limit_will_not_help"] is True
    assert "steady growth" in verdict(out)


def test_spike_with_phase() -> None:
    inc = _kill(
        timeline=_timeline([60.0] * 60 + [61, 62, 200, 250, 256]), allocator={"phase": "validation"}
    )
    out = diagnose(inc)
    codes = {f.code for f in out.findings}
    assert "spike" in codes and "leak-trend" not in codes
    spike = next(f for f in out.findings if f.code == "spike")
    # The phase is the probe file's text: evidence, never words of the verdict.
    assert spike.evidence["phase"] == "validation" and "validation" not in spike.message
    rec = out.recommendation or {}
    assert rec["memory_request"] == "60Mi" and rec["window_seconds"] == 64.0


def test_flat_timeline_gives_request_from_median() -> None:
    out = diagnose(_kill(timeline=_timeline([100.0 + (i % 3) for i in range(30)] + [256])))
    rec = out.recommendation or {}
    assert rec["memory_request"] == "101Mi" and rec["memory_limit"] == "308Mi"


def test_crash_loop_counts_same_container_in_history() -> None:
    def at(t: float, cid: str) -> Incident:
        inc = _kill(kernel_time_s=t, container_id=cid)
        inc.k8s = PodContext(namespace="ml", pod="trainer-0", container="train")
        return inc

    history = [at(100.0, "b" * 64), at(200.0, "c" * 64)]
    now = at(300.0, "d" * 64)  # a new container id after each restart
    assert "crash-loop" in _codes(now, history)
    assert "crash-loop" not in _codes(now, history[:1])
    assert "crash-loop" not in _codes(at(100_000.0, "e" * 64), history)  # outside the window


def test_elsewhere_kinds_and_superseded_adapter_findings() -> None:
    ev = Incident(
        kind="eviction",
        qos_class="burstable",
        k8s=PodContext(namespace="a", pod="b"),
        findings=[Finding("memory_pressure_eviction", "warning", "x", {"status_message": "m"})],
    )
    out = diagnose(ev)
    assert [f.code for f in out.findings] == ["eviction"]
    assert out.findings[0].evidence["status_message"] == "m"
    false = diagnose(
        Incident(kind="false_oomkilled", findings=[Finding("false_oomkilled", "warning", "x")])
    )
    assert [f.code for f in false.findings] == ["false-oomkilled"]
    fw = diagnose(
        Incident(
            kind="framework",
            allocator={
                "framework": "torch-cuda",
                "allocated_bytes": 2 << 30,
                "reserved_unallocated_bytes": 4 << 30,
                "requested_bytes": 1 << 30,
            },
        )
    )
    f, cause = fw.findings
    assert f.code == "framework-oom" and "expandable_segments" in f.message
    assert cause.code == "device-fragmentation" and fw.verdict_code == "device-fragmentation"
    assert fw.recommendation and fw.recommendation["limit_will_not_help"] is True
    assert fw.recommendation["action"] == "fix-fragmentation"


def test_pod_facts() -> None:
    inc = _kill(scope="pod", oom_memcg=POD, qos_class="besteffort")
    inc.k8s = PodContext(namespace="a", pod="b", container="c", container_memory_limit_bytes=None)
    codes = _codes(inc)
    assert {"limit-pod", "no-memory-limit", "besteffort-qos"} <= codes


def test_diagnose_is_idempotent_and_escapes_names() -> None:
    inc = _kill()
    inc.victims[0].comm = "evil\x1b[2J\nname"
    once = diagnose(inc)
    twice = diagnose(once)
    assert [f.code for f in twice.findings] == [f.code for f in once.findings]
    assert all("\x1b" not in f.message and "\n" not in f.message for f in twice.findings)
    assert "\x1b" not in verdict(twice)


def test_spike_between_two_samples_is_seen_in_the_report_usage() -> None:
    """Sampling every second can miss a burst; the report's usage at the kill cannot."""
    out = diagnose(_kill(timeline=_timeline([60.0] * 40)))
    spike = next(f for f in out.findings if f.code == "spike")
    assert spike.evidence["last_sampled_usage_bytes"] == 60 * MIB
    assert spike.evidence["usage_at_kill_bytes"] == 256 * MIB
    rec = out.recommendation or {}
    assert rec["memory_limit"] == "308Mi"  # sized on the kill, not on the last sample


def test_node_allocatable_kill_sizes_requests_and_never_a_limit_at_what_ran_out() -> None:
    """A pod that fits: request near its use, a limit below node allocatable."""
    inc = _kill(scope="node", oom_memcg="/kubepods", usage_mib=7000, limit_mib=7000)
    inc.tasks = [
        TaskRow(pid=4242, name="python", rss_pages=250 * 256, oom_score_adj=900),
        TaskRow(pid=77, name="greedy", rss_pages=3000 * 256, oom_score_adj=1000),
    ]
    rec = diagnose(inc).recommendation or {}
    assert rec["action"] == "relieve-node" and rec["fits_node"] is True
    assert rec["memory_request"] == "250Mi"  # the killed process's RSS, no sampled timeline
    limit = rec["memory_limit_bytes"]
    assert rec["memory_limit"] == "300Mi" and limit is not None and limit < 7000 * MIB
    assert rec["besteffort_rss_bytes"] == 3000 * MIB
    assert "BestEffort pods (oom_score_adj 1000: no memory request) held 2.9 GiB" in rec["message"]


def test_node_allocatable_kill_that_does_not_fit_says_so() -> None:
    inc = _kill(scope="node", oom_memcg="/kubepods", usage_mib=1024, limit_mib=1024, anon_mib=1000)
    rec = diagnose(inc).recommendation or {}
    assert rec["fits_node"] is False and rec["memory_limit"] is None
    assert rec["needed_bytes"] == 1200 * MIB
    assert "does not fit this node" in rec["message"] and "1 GiB that ran out" in rec["message"]


def test_fragment_without_usage_is_sized_on_the_charged_memory() -> None:
    """No `memory: usage` line, no `oom-kill:` line: the memcg stats still say what was charged."""
    inc = _kill(thp_mib=0)
    inc.memcg, inc.limit_scope, inc.oom_memcg, inc.task_memcg = None, None, None, None
    inc.memcg_stats = {"swap": 100 * MIB}
    rec = diagnose(inc).recommendation or {}
    assert rec["usage_at_kill_bytes"] == 254 * MIB  # anon 250 + file 4
    assert rec["memory_limit"] == "305Mi"
    assert rec["message"].startswith("Raise the memory limit that was hit")
    assert "charged at the kill per the memcg stats, with 100 MiB more in swap" in rec["message"]


def test_global_breakdown_is_the_nodes_memory() -> None:
    inc = Incident(
        kind="global",
        limit_scope="global",
        victims=[Victim(pid=1, comm="x", anon_rss_bytes=1024 * 1024)],
        breakdown_bytes=Breakdown(anon=100 * MIB, file=400 * MIB, shmem=0, kernel=10 * MIB),
    )
    [cache] = [f for f in diagnose(inc).findings if f.code == "page-cache"]
    assert "of the 510 MiB in use on the node" in cache.message
    assert "unknown cgroup" not in cache.message
