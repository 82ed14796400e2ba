"""`oomwatch report` through the real CLI entry: corpus files, stdin, filters, bad inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.report_cli import ReportRun, corpus_file, corpus_files, section_order

CID = "a" * 64
POD_UID = "28fcb1a0-a45c-44e7-b9bf-e3b9360bedba"


@pytest.mark.parametrize("path", [str(p) for p in corpus_files()], ids=lambda p: Path(p).name[:40])
def test_every_corpus_file_gives_the_json_contract(report, path: str) -> None:  # type: ignore[no-untyped-def]
    """Every document follows schemas/report.schema.json (`run.json()` validates it: every
    key, its type, bytes for sizes, null for no limit), and says something."""
    run = report(path, "--json")
    assert run.rc == 0, run.err
    doc = run.json()
    assert doc["schema_version"] == 2
    expected = Path(path).parent / "expected" / (Path(path).stem + ".json")
    near_miss = not json.loads(expected.read_text(encoding="utf-8"))["incidents"]
    # every public corpus file has at least one OOM, but a near miss (earlyoom, kubectl text)
    assert bool(doc["incidents"]) != near_miss
    for incident in doc["incidents"]:
        if incident["tasks"]:  # task rows count pages: the size is stated, or said unknown
            assert "page_size_bytes" in incident
        for finding in incident["findings"]:
            assert set(finding) == {"code", "severity", "message", "evidence"}
            assert finding["evidence"], f"{finding['code']} fired without evidence"
        assert incident["verdict"]


def _codes(doc: dict, n: int = 0) -> set[str]:  # type: ignore[type-arg]
    return {f["code"] for f in doc["incidents"][n]["findings"]}


@pytest.mark.parametrize(
    ("prefix", "index", "expected"),
    [
        ("01", 0, {"limit-node-allocatable", "group-kill", "besteffort-qos"}),
        ("02", 0, {"limit-pod"}),
        ("03", 0, {"limit-cgroup", "overcommit-vm"}),
        ("05", 0, {"limit-node", "thp-hidden"}),
        ("09", 0, {"limit-cpuset"}),
        ("12", 0, {"limit-pod", "kernel-memory"}),
        ("15", 0, {"limit-pod"}),
        ("17", 0, {"limit-cgroup", "thp-hidden", "overcommit-vm"}),
        ("18", 0, {"limit-cgroup"}),
        ("20", 0, {"limit-node"}),  # a global report lists the whole node: not "many-processes"
        ("27", 1, {"limit-mempolicy"}),
        # each checked against the text: oom_memcg = task_memcg (the container) ...
        ("13", 0, {"limit-container"}),
        # ... oom_memcg = the pod's slice, the container's scope below it
        ("13", 1, {"limit-pod"}),
        ("26", 0, {"limit-pod"}),  # under a nested LXC prefix
        # ... plus "Tasks in <container> are going to be killed due to memory.oom.group set"
        ("06", 0, {"limit-pod", "group-kill"}),
        # oom_memcg=/kubepods.slice (node allocatable), a Burstable pod's group kill
        ("23", 0, {"limit-node-allocatable", "group-kill"}),
        # a fragment: stats only (rss_huge 370688 kB of 524220 kB charged, ~71 %), no
        # `oom-kill:` line, so which limit was hit is unknown and no limit finding fires
        ("24", 0, {"thp-hidden"}),
    ],
)
def test_corpus_limit_and_consumer_findings(  # type: ignore[no-untyped-def]
    report, corpus: Path, prefix: str, index: int, expected: set[str]
) -> None:
    doc = report(corpus_file(corpus, prefix), "--json").json()
    assert _codes(doc, index) == expected


def test_fragment_thp_share_and_unknown_limit(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    inc = report(corpus_file(corpus, "24"), "--json").json()["incidents"][0]
    [thp] = inc["findings"]
    assert thp["evidence"] == {"thp_bytes": 370688 * 1024, "charged_bytes": 524220 * 1024}
    assert "(71 %)" in thp["message"]
    assert "which limit was hit is unknown" in " ".join(inc["unknown"])


def test_corpus_identity_and_scope(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    doc = report(corpus_file(corpus, "01"), "--json").json()
    [inc] = doc["incidents"]
    assert inc["pod_uid"] == "a5d8fdd1-1369-469e-8a7d-2c1047529435"
    assert inc["qos_class"] == "besteffort" and inc["runtime"] == "containerd"
    assert inc["cgroup_driver"] == "systemd" and inc["limit_scope"] == "node"
    rec = inc["recommendation"]
    # node allocatable (7.1 GiB) ran out; the BestEffort pod's processes held 6.8 GiB: no
    # container limit helps, and +20 % it does not fit the node at all
    assert rec["action"] == "relieve-node" and rec["limit_will_not_help"] is True
    assert rec["peak_source"] == "the killed processes' RSS"
    assert rec["scope_limit_bytes"] == 7464436 * 1024 and rec["fits_node"] is False
    assert rec["memory_limit"] is None and "8411Mi" not in str(rec["memory_request"])
    assert "does not fit this node" in rec["message"]
    assert "BestEffort pods (oom_score_adj 1000: no memory request) held 6.8 GiB" in rec["message"]


@pytest.mark.parametrize(("prefix", "index"), [("01", 0), ("10", 0), ("10", 1), ("23", 0)])
def test_node_level_kills_never_recommend_a_limit_at_what_ran_out(  # type: ignore[no-untyped-def]
    report, corpus: Path, prefix: str, index: int
) -> None:
    inc = report(corpus_file(corpus, prefix), "--json").json()["incidents"][index]
    rec = inc["recommendation"]
    if not inc["victims"]:  # 10[1]: nothing was killable, so there is nothing to advise
        assert rec is None
        return
    assert rec["action"] == "relieve-node" and rec["memory_limit"] is None
    assert not rec["message"].startswith("Set"), rec["message"]


def test_global_kill_of_a_small_daemon_is_not_sized(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    [first, _] = report(corpus_file(corpus, "10"), "--json").json()["incidents"]
    rec = first["recommendation"]
    assert "2Mi" not in rec["message"] and rec["memory_request"] is None
    assert "not a limit of dbus-daemon (pid 454)" in rec["message"]
    assert "it held 1.5 MiB at the kill" in rec["message"]


def test_fragment_without_usage_line_is_sized_on_memcg_stats(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    """Corpus 24: stats show rss 524188 kB + cache 32 kB charged and 524356 kB swapped."""
    inc = report(corpus_file(corpus, "24"), "--json").json()["incidents"][0]
    rec = inc["recommendation"]
    assert rec["usage_at_kill_bytes"] == (524188 + 32) * 1024
    assert rec["memory_limit"] == "615Mi"  # 512 MiB + 20 %, rounded up
    assert rec["message"].startswith("Raise the memory limit that was hit")
    assert "with 512 MiB more in swap" in rec["message"]


def test_text_report_leads_with_the_verdict(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    run = report(corpus_file(corpus, "17"))
    assert run.rc == 0
    lines = run.out.splitlines()
    block = lines.index(next(line for line in lines if line.startswith("== OOM 1 of 1")))
    verdict = lines[block + 1]
    assert verdict.strip().startswith("VERDICT    jshell (pid 29816)")
    assert "512 MiB" in verdict and "transparent hugepages (66 %)" in verdict
    assert "at least 615 MiB" in verdict and "615Mi" not in verdict  # prose: human sizes
    # the order: verdict, findings, breakdown, largest tasks (timeline: see the store
    # test); the facts they rest on and what is unknown come after
    labels = ["VERDICT", "findings:", "breakdown", "largest tasks", "cgroup", "victim", "limit"]
    order = section_order("\n".join(lines[block:]), [*labels, "unknown:"])
    assert order == sorted(order) and order[0] == 1
    assert "thp-hidden" in run.out


def test_group_kill_victims_are_compacted_after_the_findings(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    out = report(corpus_file(corpus, "01")).out
    order = section_order(out, ["VERDICT", "findings:", "breakdown", "largest tasks", "victim"])
    assert order == sorted(order)
    [also] = [line for line in out.splitlines() if line.startswith("  also")]
    assert "4 more: nginx (pid 7620) rss 4.9 MiB" in also and "bash (pid 7712)" in also


def test_stdin_through_the_console_entry(corpus: Path) -> None:
    data = Path(corpus_file(corpus, "02")).read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "oomwatch.cli", "report", "-", "--json"],
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert b'"limit_scope": "pod"' in proc.stdout


def test_the_program_exit_keeps_a_whole_report_and_its_status(corpus: Path, tmp_path: Path) -> None:
    """`run` ends a report's process without the interpreter's teardown: the output still
    reaches a file (block-buffered) whole, and the exit status and message are main's."""
    saved = tmp_path / "report.json"
    with saved.open("wb") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "oomwatch.cli", "report", "--json", corpus_file(corpus, "02")],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(saved.read_text(encoding="utf-8"))["incidents"][0]["limit_scope"] == "pod"
    missing = subprocess.run(
        [sys.executable, "-m", "oomwatch.cli", "report", str(tmp_path / "absent.log")],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2
    assert b"absent.log" in missing.stderr
    no_stderr = subprocess.run(  # started with descriptor 2 closed: Python's sys.stderr is None
        [sys.executable, "-m", "oomwatch.cli", "report", "--json", corpus_file(corpus, "02")],
        stdout=subprocess.PIPE,
        preexec_fn=lambda: os.close(2),
        timeout=60,
        check=False,
    )
    assert no_stderr.returncode == 0
    assert json.loads(no_stderr.stdout)["incidents"][0]["limit_scope"] == "pod"


HOSTILE = (
    "[  100.000000] evil\x1b[2J x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0,"
    " oom_score_adj=0\n"
    "[  100.000100] memory: usage 262144kB, limit 262144kB, failcnt 12\n"
    "[  100.000200] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    f"oom_memcg=/kubepods/burstable/pod{POD_UID}/{CID},"
    f"task_memcg=/kubepods/burstable/pod{POD_UID}/{CID},task=evil\x1b[2J x,pid=4242,uid=0\n"
    "[  100.000300] Memory cgroup out of memory: Killed process 4242 (evil\x1b[2J x)"
    " total-vm:300000kB, anon-rss:250000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:600kB"
    " oom_score_adj:0\n"
)


def test_control_characters_never_reach_the_terminal(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "evil.log"
    log.write_text(HOSTILE)
    for args in ((str(log),), (str(log), "--json")):
        run = report(*args)
        assert run.rc == 0
        assert "\x1b" not in run.out
        assert "evil\\x1b[2J x" in run.out or "evil\\\\x1b[2J x" in run.out


def test_filters_pod_last_since(report, corpus: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "two.log"
    log.write_text(HOSTILE + Path(corpus_file(corpus, "02")).read_text())
    every = report(str(log), "--json").json()["incidents"]
    assert len(every) >= 2
    only = report(str(log), "--json", "--pod", POD_UID).json()["incidents"]
    assert [i["pod_uid"] for i in only] == [POD_UID]
    last = report(str(log), "--json", "--last", "1").json()["incidents"]
    assert last == [every[-1]]
    # dmesg lines carry no wall clock: --since cannot place them, and says so
    since = report(str(log), "--json", "--since", "2h").json()
    assert since["incidents"] == []
    assert any("no wall-clock time" in w for w in since["warnings"])


def test_since_keeps_incidents_with_wall_time(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    path = corpus_file(corpus, "14")  # dmesg -T: wall-clock times from 2020s
    doc = report(path, "--json", "--since", "2000-01-01T00:00:00").json()
    assert doc["incidents"] and all(i["wall_time"] for i in doc["incidents"])
    assert report(path, "--json", "--since", "2999-01-01").json()["incidents"] == []


def test_no_incidents_is_success(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    quiet = tmp_path / "quiet.log"
    quiet.write_text("[    1.000000] Linux version 6.18\n[    2.0] eth0: link up\n")
    run = report(str(quiet))
    assert run.rc == 0 and "No OOM kills found" in run.out
    assert report(str(quiet), "--json").json() == {
        "schema_version": 2,
        "incidents": [],
        "warnings": [],
    }


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: str(d / "missing.log"), "No such file"),
        (lambda d: str(d), "is a directory"),
        (lambda d: "/proc/self/mem", "cannot read /proc/self/mem"),  # unreadable even for root
    ],
)
def test_unreadable_input_exits_2_naming_it(report, tmp_path: Path, make, needle: str) -> None:  # type: ignore[no-untyped-def]
    path = make(tmp_path)
    run = report(path)
    assert run.rc == 2
    assert path in run.err and needle in run.err and run.out == ""


def test_permission_denied_exits_2(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if os.geteuid() == 0:
        pytest.skip("root reads files regardless of their mode")
    log = tmp_path / "secret.log"
    log.write_text("x\n")
    log.chmod(0)
    run = report(str(log))
    assert run.rc == 2 and "Permission denied" in run.err


def test_bad_arguments_exit_2(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert report("--since", "yesterday-ish").rc == 2
    assert report("x.log", "--store", str(tmp_path)).rc == 2
    run = report("--store", str(tmp_path))  # an empty directory is not a store
    assert run.rc == 2 and str(tmp_path) in run.err


def test_huge_line_and_binary_garbage_do_not_stop_the_report(
    report: ReportRun, corpus: Path, tmp_path: Path
) -> None:
    log = tmp_path / "big.log"
    with log.open("wb") as fh:
        fh.write(b"\xff\xfe\x00garbage" * 10 + b"\n")
        fh.write(b"A" * (3 << 20))  # a 3 MiB line without newline, then the report
        fh.write(b"\n")
        fh.write(Path(corpus_file(corpus, "18")).read_bytes())
    doc = report(str(log), "--json").json()
    assert _codes(doc) == {"limit-cgroup"}
    assert any("were cut" in w for w in doc["warnings"])
