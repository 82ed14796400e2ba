"""`probe_allowed_uids`: parsed from flag, env or file, and the running agent's readers obey it."""

from __future__ import annotations

import argparse
import io
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support import settled, wait_for
from support.agent import agent_thread
from support.probe_records import META, sample

from oomwatch.daemon.config import ConfigError, DaemonConfig, configure, resolve
from oomwatch.probe.ring import RingWriter
from oomwatch.probe.schema import FrameworkOomEvent, to_payload
from oomwatch.sinks.log import setup_logging
from oomwatch.store import IncidentStore, StoreError


def _resolve(*argv: str, environ: dict[str, str] | None = None) -> DaemonConfig:
    parser = argparse.ArgumentParser()
    configure(parser)
    return resolve(parser.parse_args(list(argv)), environ=environ or {})


def test_any_owner_by_default_else_the_listed_uids(tmp_path: Path) -> None:
    assert _resolve().probe_allowed_uids is None
    assert _resolve("--probe-allowed-uids", "any").probe_allowed_uids is None
    ranges = _resolve("--probe-allowed-uids", "1000, 2000-2999").probe_allowed_uids
    assert ranges == (range(1000, 1001), range(2000, 3000))
    env = {"OOMWATCH_PROBE_ALLOWED_UIDS": "0"}
    assert _resolve(environ=env).probe_allowed_uids == (range(0, 1),)
    conf = tmp_path / "oomwatch.yaml"
    conf.write_text("probe_allowed_uids: 100000-165535\n")  # a user-namespace block
    assert _resolve("--config", str(conf)).probe_allowed_uids == (range(100000, 165536),)


@pytest.mark.parametrize("bad", ["", "root", "1000-", "-5", "2000-1000", "4294967296"])
def test_bad_uid_lists_name_their_source(bad: str) -> None:
    with pytest.raises(ConfigError, match="OOMWATCH_PROBE_ALLOWED_UIDS"):
        _resolve(environ={"OOMWATCH_PROBE_ALLOWED_UIDS": bad})


def _framework_oom_file(directory: Path, pod_uid: str, owner_uid: int) -> None:
    cgroup = f"/kubepods/burstable/pod{pod_uid}/" + pod_uid[0] * 64
    meta = replace(META, pod_uid=pod_uid, cgroup=cgroup)
    path = directory / f"{pod_uid}.trainer.ring"
    writer = RingWriter(str(path), to_payload(meta))
    writer.write_sample(to_payload(sample(0)))
    event = FrameworkOomEvent(
        wall_s=time.time(), mono_s=1001.5, framework="torch-cuda", message="CUDA out of memory."
    )
    writer.write_event(to_payload(event))
    writer.close()
    os.chown(path, owner_uid, owner_uid)


def _framework_pods(state_dir: Path) -> list[str | None]:
    try:
        store = IncidentStore.open_readonly(state_dir)
    except StoreError:
        return []  # not created yet
    try:
        # The pod the file claims (unvouched in standalone mode: no pod identity taken)
        return [
            (i.allocator or {})["claimed"]["pod_uid"]
            for i in store.query()
            if i.kind == "framework"
        ]
    finally:
        store.close()


def test_the_running_agent_reads_only_files_of_allowed_owners(tmp_path: Path) -> None:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    _framework_oom_file(probe_dir, "aaaa-1", owner_uid=1000)
    _framework_oom_file(probe_dir, "bbbb-2", owner_uid=0)
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    (tmp_path / "cgroup").mkdir()
    setup_logging("json", stream=io.StringIO())
    config = _resolve(
        "--standalone",
        "--node-name",
        "test-node",
        "--metrics-address",
        "127.0.0.1:0",
        "--state-dir",
        str(tmp_path / "state"),
        "--cgroup-root",
        str(tmp_path / "cgroup"),
        "--kmsg",
        str(fifo),
        "--probe-dir",
        str(probe_dir),
        "--sample-interval-s",
        "0.1",
        "--probe-allowed-uids",
        "1000",
    )
    try:
        with agent_thread(config):
            assert wait_for(lambda: bool(_framework_pods(config.state_dir)), 10.0)
            # several more polls: the refused file stays refused
            found = settled(
                "the framework pods stored", lambda: _framework_pods(config.state_dir), 0.5, 10.0
            )
    finally:
        os.close(writer)
    assert found == ["aaaa-1"]
