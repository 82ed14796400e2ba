"""Reports as people forward them: quoted and wrapped by mail clients, hard-wrapped
and end-marked by consoles, chopped by pagers, abridged by their authors, pasted out of their
frame, and /dev/kmsg dumps whose sequence numbers prove a rate limit.

The real pastes are in the corpus (files 89-108); these tests pin each rule alone, built the
way the artifact looks (the kill line is corpus 99's, a 5.6 memcg kill), and check that what a
rule cannot prove stays unknown.
"""

from __future__ import annotations

import pytest

from oomwatch.cgroup_identity import identify
from oomwatch.decode import decode_lines, decode_text
from oomwatch.decode.forwarded import join_wrapped
from oomwatch.incident import Incident

KILL = (
    "Memory cgroup out of memory: Killed process 808 (repro) total-vm:41944kB, "
    "anon-rss:35344kB, file-rss:504kB, shmem-rss:0kB, UID:0 pgtables:108kB oom_score_adj:0"
)


def _decode(lines: list[str]) -> list[Incident]:
    """Both decode paths, which must agree."""
    incidents = decode_lines(lines).incidents
    fast = decode_text("\n".join(lines) + "\n").incidents
    assert [i.to_dict() for i in fast] == [i.to_dict() for i in incidents]
    return incidents


def _one(lines: list[str]) -> Incident:
    [incident] = _decode(lines)
    return incident


def _wrap(text: str, width: int) -> list[str]:
    """Cut `text` every `width` characters, mid-token (a console's hard wrap)."""
    return [text[i : i + width] for i in range(0, len(text), width)]


@pytest.mark.parametrize("quote", ["", "> ", "> > ", ">> ", "> > > > "])
@pytest.mark.parametrize("width", [72, 76, 80])
def test_a_mail_wrapped_kill_line_is_joined_whole(quote: str, width: int) -> None:
    words, lines, line = KILL.split(" "), [], ""
    for word in words:  # a mail client's soft wrap: at blanks, keeping the blank
        if line and len(line) + len(word) > width:
            lines.append(quote + line)
            line = ""
        line += word + " "
    lines.append(quote + line.rstrip())
    victim = _one(lines).victims[0]
    assert (victim.pid, victim.comm, victim.oom_score_adj) == (808, "repro", 0)
    assert victim.anon_rss_bytes == 35344 * 1024 and victim.pgtables_bytes == 108 * 1024


@pytest.mark.parametrize("width", [60, 64, 80])
def test_a_hard_wrapped_console_with_end_marks_splits_tokens_and_is_joined(width: int) -> None:
    header = "[ 5120.600000] repro invoked oom-killer: gfp_mask=0xcc0, order=0"
    rows = [row + "$" for row in [*_wrap(header, width), *_wrap("[ 5120.654321] " + KILL, width)]]
    incident = _one(rows)
    assert incident.invoker is not None and incident.invoker.order == 0
    v = incident.victims[0]
    assert (v.pid, v.comm, v.total_vm_bytes, v.file_rss_bytes, v.oom_score_adj) == (
        808,
        "repro",
        41944 * 1024,
        504 * 1024,
        0,
    )


def test_a_header_wrapped_before_its_order_is_read_whole() -> None:
    incident = _one(
        [
            "> Feb 4 16:15:15 kernel: df_inode invoked oom-killer: gfp_mask=0xd0,",
            "order=0, oomkilladj=0",
        ]
    )
    assert incident.invoker is not None and incident.invoker.order == 0


def test_a_summary_line_broken_after_its_commas_is_joined_without_blanks() -> None:
    lines = [
        "6,727,35945901675,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),",
        "cpuset=c1,mems_allowed=0,",
        "oom_memcg=/kubepods/burstable/podaaaa,",
        "task_memcg=/kubepods/burstable/podaaaa/c1,",
        "task=python,pid=9,uid=0",
    ]
    incident = _one(lines)
    assert incident.oom_memcg == "/kubepods/burstable/podaaaa"
    assert incident.task_memcg == "/kubepods/burstable/podaaaa/c1"
    assert [(v.pid, v.comm) for v in incident.victims] == [(9, "python")]


def test_a_continuation_never_changes_whose_line_it_is() -> None:
    held = "Killed process 1 (a) total-vm:1kB,"
    assert join_wrapped(held, "Killed process 2 (b) total-vm:2kB, anon-rss:2kB") is None
    assert join_wrapped(held, "anon-rss:1kB, file-rss:0kB") is not None
    assert join_wrapped("Killed process 1 (a", "b) total-vm:1kB, anon-rss:1kB") is None  # "a b"?
    assert join_wrapped("Killed process 1", "2 (a) total-vm:1kB, anon-rss:1kB") is not None
    assert join_wrapped("some prose ends with a comma,", "and goes on") is None


def test_two_kills_on_consecutive_lines_stay_two() -> None:
    incidents = _decode([KILL, KILL.replace("808 (repro)", "809 (repro2)")])
    assert [i.victims[0].pid for i in incidents] == [808, 809]


@pytest.mark.parametrize(
    ("line", "known", "unknown"),
    [
        # an author's elisions: what they hid is unknown, not zero
        (
            "Killed process 808 (repro) total-vm:41944kB, anon-rss:35344kB [...]",
            {"anon_rss_bytes": 35344 * 1024},
            ("file_rss_bytes", "oom_score_adj"),
        ),
        (
            "Memory cgroup out of memory: Killed process 808 (repro) <snip> UID:0",
            {},
            ("anon_rss_bytes", "uid"),
        ),
        (
            "Killed process 808 (repro) anon-rss:35344kB ...",
            {"anon_rss_bytes": 35344 * 1024},
            ("total_vm_bytes",),
        ),
        # a pager chopped the line at the screen's edge (`>`, `$`): the cut number is not read
        (
            "Memory cgroup out of memory: Killed process 808 (repro) total-vm:41944kB, "
            "anon-rss:353>",
            {"total_vm_bytes": 41944 * 1024},
            ("anon_rss_bytes",),
        ),
        (
            "Killed process 808 (repro) total-vm:41944kB, anon-rss:35344kB, file-rss:5$",
            {"anon_rss_bytes": 35344 * 1024},
            ("file_rss_bytes",),
        ),
    ],
)
def test_an_abridged_or_chopped_kill_line_keeps_only_what_it_shows(
    line: str, known: dict[str, int], unknown: tuple[str, ...]
) -> None:
    incident = _one(["[ 1.0] repro invoked oom-killer: gfp_mask=0xcc0, order=0", line])
    victim = incident.victims[0]
    assert (victim.pid, victim.comm) == (808, "repro")
    for name, value in known.items():
        assert getattr(victim, name) == value
    for name in unknown:
        assert getattr(victim, name) is None, name
    assert any("abridged or cut" in note for note in incident.notes)


def test_an_abridged_primary_kill_is_still_the_primary_of_its_group_kill() -> None:
    incident = _one(
        [
            "[ 1.0] a invoked oom-killer: gfp_mask=0xcc0, order=0, oom_score_adj=0",
            "[ 1.1] Memory cgroup out of memory: Killed process 10 (a) anon-rss:4000kB ...",
            "[ 1.2] Tasks in /kubepods/pod1 are going to be killed due to memory.oom.group set",
            "[ 1.3] Memory cgroup out of memory: Killed process 11 (b) total-vm:1kB, "
            "anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0",
        ]
    )
    assert [v.pid for v in incident.victims] == [10, 11] and incident.group_kill


@pytest.mark.parametrize(
    "lines",
    [
        ["Killed process 1234 (java) is what dmesg said, and then it came back"],
        ["The kernel killed it: see 'Killed process 1234 (java)' in the log"],
        ["systemd-oomd[1]: Killed /user.slice/app.scope due to memory pressure"],
        ['earlyoom: sending SIGTERM to process 12006 "python3": badness 209, VmRSS 2891 MiB'],
        [
            'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space',
            "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3512)",
        ],
        [
            "    Last State:     Terminated",
            "      Reason:       OOMKilled",
            "      Exit Code:    137",
        ],
        ["  Warning  SystemOOM  17m  kubelet, node1  System OOM encountered, victim process: java"],
        ["*  tomcat9.service: A process of this unit has been killed by the OOM killer"],
    ],
)
def test_near_misses_invent_no_kill(lines: list[str]) -> None:
    assert _decode(lines) == []


def test_a_list_marker_before_a_copied_kernel_line_goes() -> None:
    incident = _one(["*  " + KILL.replace("Memory cgroup out of memory", "Out of memory")])
    assert incident.victims[0].pid == 808 and incident.kind == "global"


def test_a_login_prompt_glued_to_the_first_record_goes() -> None:
    incident = _one(
        [
            "node-1 login: [ 5120.600000] repro invoked oom-killer: gfp_mask=0xcc0, order=0",
            "[ 5120.654321] " + KILL,
        ]
    )
    assert incident.invoker is not None and incident.invoker.comm == "repro"
    assert incident.victims[0].pid == 808


def _kmsg(seq: int, text: str) -> str:
    return f"6,{seq},{seq * 1000},-;{text}"


def _burst(first_seq: int, gap: int) -> list[Incident]:
    kill = KILL.replace("808 (repro)", "{pid} (repro)")
    return _decode(
        [
            _kmsg(first_seq, "repro invoked oom-killer: gfp_mask=0xcc0, order=0, oom_score_adj=0"),
            _kmsg(first_seq + 1, "memory: usage 1024kB, limit 1024kB, failcnt 9"),
            _kmsg(first_seq + 2, kill.format(pid=808)),
            _kmsg(
                first_seq + 3,
                "oom_reaper: reaped process 808 (repro), now anon-rss:0kB, file-rss:0kB, "
                "shmem-rss:0kB",
            ),
            _kmsg(first_seq + 4 + gap, kill.format(pid=809)),
        ]
    )


def test_a_kmsg_kill_right_after_the_previous_report_was_rate_limited() -> None:
    first, second = _burst(100, gap=0)
    assert not first.header_suppressed
    assert second.header_suppressed
    [note] = [n for n in second.notes if n.startswith("rate-limited")]
    assert "(104)" in note and "(103)" in note and "likely" in note and "not proven" in note


def test_a_gap_in_the_sequence_proves_nothing() -> None:
    _, second = _burst(100, gap=1)
    assert not second.header_suppressed
    assert any("cut, filtered, or rate-limited" in n for n in second.notes)


@pytest.mark.parametrize(
    ("path", "uid", "container", "qos"),
    [
        (
            "/system.slice/containerd.service/kubepods-besteffort-pod214f3ba8_4b69_4bdb_a7d5_"
            "5ecc73f04ae9.slice:cri-containerd:d4e8e05a546c86b6443f101966c618e47753ed01fa9929"
            "cae00d3b692f7a9f80",
            "214f3ba8-4b69-4bdb-a7d5-5ecc73f04ae9",
            "d4e8e05a546c86b6443f101966c618e47753ed01fa9929cae00d3b692f7a9f80",
            "besteffort",
        ),
        ("/kubepods-pod1_2.slice:cri-containerd:abc", "1-2", "abc", "guaranteed"),
    ],
)
def test_k3s_colon_cgroup_names_give_pod_and_container(
    path: str, uid: str, container: str, qos: str
) -> None:
    """k3s/k0s (systemd driver, cgroupfs underneath) name the directory by the systemd spec;
    the first path is from a k3s node's /proc/self/mountinfo (a public test fixture)."""
    found = identify(path)
    assert (found.pod_uid, found.container_id, found.qos_class) == (uid, container, qos)
    assert found.runtime == "containerd" and found.level == "container"


@pytest.mark.parametrize(
    "path",
    [
        "/system.slice/kubepods-burstable-podx.slice:cri-containerd:../../etc",
        "/kubepods-burstable-podx.slice:runc:abc",
        "/kubepods/burstable/pod12/0123abc...",
    ],
)
def test_colon_forms_and_abridged_ids_that_do_not_fit_are_not_guessed(path: str) -> None:
    assert identify(path).container_id is None


def test_a_reaper_line_pasted_before_its_report_joins_its_own_kill() -> None:
    reaper = (
        "oom_reaper: reaped process 808 (repro), now anon-rss:12kB, file-rss:0kB, shmem-rss:0kB"
    )
    header = "repro invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
    incident = _one([reaper, "", "and the report itself:", header, KILL])
    assert incident.victims[0].reaped_anon_rss_bytes == 12 * 1024
    assert any("out of order" in note for note in incident.notes)
    other = reaper.replace("808 (repro)", "909 (other)")
    incident = _one([other, header, KILL])  # another process's line proves nothing here
    assert incident.victims[0].reaped_anon_rss_bytes is None


_CONSOLE_KILL = (
    "[ 2170.372798] Out of memory: Killed process 1154 (php) total-vm:120284kB,"
    " anon-rss:19156kB, file-rss:3592kB, shmem-rss:0kB, UID:1002 pgtables:220kB oom_score_adj:0"
)
_LATER_HEADER = (
    "[ 2170.372482] supervisord invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE),"
    " order=0, oom_score_adj=0"
)


def test_a_kill_line_pasted_before_its_header_joins_that_report() -> None:
    """Corpus 115's shape: the console's kill line, then the report the kernel printed
    316 us before it; the kernel clock proves which came first."""
    incident = _one([_CONSOLE_KILL, _LATER_HEADER, "[ 2170.372489] Call Trace:"])
    assert incident.invoker is not None and incident.invoker.comm == "supervisord"
    assert [(v.pid, v.comm) for v in incident.victims] == [(1154, "php")]
    assert incident.kind == "global" and not incident.header_suppressed
    assert incident.kernel_time_s == 2170.372482  # the report's time, from its header
    assert any("comes before its report in this paste" in n for n in incident.notes)


@pytest.mark.parametrize(
    "lines",
    [
        # printed before the header by the kernel's clock: an earlier kill of its own
        [_CONSOLE_KILL.replace("2170.372798", "2160.000000"), _LATER_HEADER],
        # the header's report has its own kill line: the early one stands alone
        [_CONSOLE_KILL, _LATER_HEADER, _CONSOLE_KILL.replace("1154 (php)", "77 (java)")],
        # too far apart in the paste to be one fragment moved
        [_CONSOLE_KILL, *["prose between"] * 8, _LATER_HEADER],
    ],
)
def test_a_kill_line_before_a_header_stays_its_own_without_the_evidence(lines: list[str]) -> None:
    incidents = _decode(lines)
    assert len(incidents) == 2 and incidents[0].victims[0].pid == 1154
    assert not any("comes before its report" in n for i in incidents for n in i.notes)
