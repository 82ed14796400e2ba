"""What a report says instead of "no OOM kills found" when that would mislead: kill lines it
could not decode (exit status 1, the lines named), and `--pod NAME` on a log that names pods
only by UID (the UIDs shown)."""

from __future__ import annotations

from pathlib import Path

from support.report_cli import corpus_file

from oomwatch.decode import TextScanner
from oomwatch.incident import Incident, Victim
from oomwatch.report.unread import Signs

POD_UID = "5931aa75-4603-4e65-b552-7c71cf55cfb5"
# Kill lines cut where no decoder can read them (no pid), among ordinary chatter.
UNREADABLE = (
    "[ 10.000000] eth0: link up\n"
    "[ 11.000000] java invoked oom-killer (gfp_mask and order cut by the pager)\n"
    "[ 11.000100] Memory cgroup out of memory: Killed process (java) total-vm:… cut\n"
    "[ 12.000000] eth0: link down\n"
)


def test_undecodable_kill_lines_exit_1_and_are_named(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "cut.log"
    log.write_text(UNREADABLE)
    run = report(str(log))
    assert run.rc == 1
    assert "No OOM kills found" not in run.out
    assert f"No OOM kill could be decoded from {log}" in run.out
    assert "  line 2: [ 11.000000] java invoked oom-killer" in run.out
    assert "  line 3: [ 11.000100] Memory cgroup out of memory: Killed process (java)" in run.out
    doc = report(str(log), "--json")
    assert doc.rc == 1 and doc.json()["incidents"] == []
    assert [w.split(" looks like")[0] for w in doc.json()["warnings"]] == [
        f"{log}: line 2",
        f"{log}: line 3",
    ]
    page = tmp_path / "cut.html"
    assert report(str(log), "--html", str(page)).rc == 1
    assert 'class="notice"' in page.read_text() and "line 3: [ 11.000100]" in page.read_text()


def test_undecodable_kill_lines_from_stdin(report, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(UNREADABLE.encode())))
    run = report("-")
    assert run.rc == 1 and "decoded from stdin" in run.out and "line 3:" in run.out


def test_decoded_logs_and_quiet_logs_exit_0(report, corpus: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert report(corpus_file(corpus, "02")).rc == 0
    quiet = tmp_path / "quiet.log"
    quiet.write_text("[ 1.0] systemd[1]: Killing process 42 (sleep) with signal SIGKILL.\n")
    run = report(str(quiet))
    assert run.rc == 0 and "No OOM kills found" in run.out


def test_signs_count_only_what_no_incident_explains() -> None:
    signs = Signs()
    scanner = TextScanner(line_observer=signs.see)
    scanner.feed(UNREADABLE)
    scanner.close("[ 20.0] x: oom-kill:constraint=CONSTRAINT_MEMCG,task=y\n")
    assert [n for n, _ in signs.unread([])] == [2, 3, 5]
    no_kill = Incident(kind="memcg")
    assert [n for n, _ in signs.unread([no_kill])] == [3]  # invoked, but no kill decoded
    killed = Incident(kind="memcg", victims=[Victim(pid=1, comm="java")])
    assert signs.unread([killed]) == []


def test_pod_name_on_a_uid_only_log_shows_the_uids(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    path = corpus_file(corpus, "02")
    run = report(path, "--pod", "web-0")
    assert run.rc == 0 and "No OOM kills found" not in run.out
    assert "this log names pods only by UID (and container id), never by name" in run.out
    assert f"pod uid {POD_UID}: 1 kill, container 25a38b5b8d55 (stress-ng-vm)" in run.out
    assert "kubectl get pods -A -o custom-columns=UID:.metadata.uid" in run.out
    [warning] = report(path, "--pod", "web-0", "--json").json()["warnings"]
    assert "names pods only by UID" in warning and POD_UID in warning
    # the UID works, whole, as systemd writes it, or by the 8 characters the summary shows
    for pod in (POD_UID, POD_UID.replace("-", "_"), POD_UID[:8]):
        [incident] = report(path, "--pod", pod, "--json").json()["incidents"]
        assert incident["pod_uid"] == POD_UID
    assert report(path, "--pod", POD_UID[:4], "--json").json()["incidents"] == []


def test_pod_on_a_log_without_pods(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    run = report(corpus_file(corpus, "17"), "--pod", "web-0")
    assert "no kill in it (1 incident) is in a Kubernetes pod's cgroup" in run.out
