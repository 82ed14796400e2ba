"""The idle agent leaves out the modules only a path it did not take needs: each costs RSS
on every node for nothing (issue 26).  Read from the agent's own `-X importtime` lines, up
to the moment it serves /healthz, watching a cgroup tree through inotify."""

from __future__ import annotations

import sys
from pathlib import Path

from support.fifo_agent import REPO, imports_in, running_agent

NOT_IMPORTED = {
    "yaml": "read only for --config",
    "inotify_simple": "oomwatch.cgroups.inotify binds libc itself",
    "ctypes.util": "find_library('c') ran `ldconfig -p`; ctypes.CDLL(None) needs no search",
    "subprocess": "nothing the agent does starts a process",
    "oomwatch.probe.probe": "the training side of the probe: the agent only reads its files",
    "encodings.idna": "the HTTP server's host is ASCII: getaddrinfo gets it as bytes",
    "prometheus_client": "the agent writes its exposition itself (sinks/exposition.py)",
    "http.server": "the agent's HTTP server is its own (daemon/http_server.py)",
    "ssl": "nothing a standalone agent does speaks TLS",
}


def test_the_idle_agent_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    launcher = [sys.executable, "-X", "importtime"]
    with running_agent(REPO, tmp_path, launcher=launcher) as agent:
        imported = set(imports_in(agent.stderr_path.read_text(errors="replace")))
    assert "oomwatch.cgroups.inotify" in imported  # the fake cgroup tree is watched
    assert {m: why for m, why in NOT_IMPORTED.items() if m in imported} == {}
