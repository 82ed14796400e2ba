"""Pre-OOM warnings on the real kernel (issue 17): how early leak-driven kills are warned, and
how many warnings steady workloads get, through one real `oomwatch run` agent.

    sudo PYTHONPATH=. .venv/bin/python bench/forecast.py [--soak-s 3600] [--out FILE]

The agent runs standalone with its own state dir.  Meanwhile:
- the soak: steady workloads that must never be warned of (nor killed), in a scratch tree that
  takes no lab lock (it lives an hour): a collector's sawtooth (30 s rises to ~80 % of the
  limit), a batch sawtooth (50 s rises, held, freed), a spike to ~94 % of the limit every 4
  min, and a container at ~88 % of its limit whose page cache fills the rest and is reclaimed;
- the leaks, one after another, each in its own scratch memcg (the lab lock held while it
  runs) until the kernel kills it: linear at four rates, steps of three sizes, and the pruning
  trainer's leak scenario (`--leak-mb-per-step` at a real model's step time) twice.
At the end the agent's store says, for each leak kill, whether and how early it was warned;
every warning on a soak container is a false one.  Kills and warnings of other cgroups on the
machine (other test runs) are counted apart.  `--quick` runs a 3-minute smoke version.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from overhead import REPO, free_port, start_daemon, wait_healthy

from oomwatch.lab import HogProcess, Memcg, ScratchMemcg, memcg_v1_unavailable_reason, spawn_hog
from oomwatch.store import IncidentStore

MIB = 1 << 20
TRAINER = [
    "-m",
    "examples.pruning_trainer",
    "--score-runs",
    "1",
    "--score-epochs",
    "100000",
    "--score-only",
    "--threads",
    "1",
    "--min-step-s",
    "0.1",
]


@dataclass(frozen=True)
class Leak:
    name: str
    limit_mib: int
    hog: dict[str, Any] = field(default_factory=dict)  # spawn_hog arguments
    trainer_leak_mb: float | None = None  # the pruning trainer instead of a hog


LEAKS = (
    Leak("linear 0.2 MiB/s", 96, {"mb": 600, "step_mb": 1, "step_interval_s": 5.0}),
    Leak("linear 0.35 MiB/s", 96, {"mb": 600, "step_mb": 1, "step_interval_s": 2.86}),
    Leak("linear 0.5 MiB/s", 96, {"mb": 600, "step_mb": 1, "step_interval_s": 2.0}),
    Leak("linear 1 MiB/s", 96, {"mb": 600, "step_mb": 1, "step_interval_s": 1.0}),
    Leak("steps 8 MiB / 20 s", 96, {"mb": 600, "step_mb": 8, "step_interval_s": 20.0}),
    Leak("steps 16 MiB / 45 s", 96, {"mb": 600, "step_mb": 16, "step_interval_s": 45.0}),
    Leak("steps 24 MiB / 90 s", 128, {"mb": 600, "step_mb": 24, "step_interval_s": 90.0}),
    Leak("trainer 0.05 MiB/step", 400, trainer_leak_mb=0.05),
    Leak("trainer 0.03 MiB/step", 400, trainer_leak_mb=0.03),
)
QUICK_LEAKS = (LEAKS[3],)

# name -> (limit MiB, spawn_hog arguments): never to be warned of.
STEADY: dict[str, tuple[int, dict[str, Any]]] = {
    "gc-sawtooth": (64, {"mode": "sawtooth", "mb": 12, "cycle_mb": 32, "rise_s": 30.0,
                         "hold_s": 0.0, "rest_s": 0.0}),
    "batch-sawtooth": (64, {"mode": "sawtooth", "mb": 10, "cycle_mb": 36, "rise_s": 50.0,
                            "hold_s": 5.0, "rest_s": 10.0}),
    "spike": (64, {"mode": "sawtooth", "mb": 16, "cycle_mb": 34, "rise_s": 0.5,
                   "hold_s": 10.0, "rest_s": 240.0}),
    "cache-at-limit": (48, {"mode": "cache", "mb": 34, "cycle_mb": 48, "rest_s": 2.0}),
}  # fmt: skip


def warm_trainer() -> None:
    """Run the trainer once outside any scratch memcg, so torch's library pages are cached
    and charged elsewhere (else the leak's limit thrashes on them: tests/probe/test_real_kill)."""
    subprocess.run(
        [sys.executable, *TRAINER[:-2], "--score-epochs", "1"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )


def run_leak(leak: Leak, timeout_s: float) -> dict[str, Any]:
    """One leak in its own scratch memcg until the kernel kills it."""
    with ScratchMemcg(max(256, leak.limit_mib + 16) * MIB) as scratch:
        memcg = scratch.create_child("leak", leak.limit_mib * MIB)
        started = time.time()
        proc = _start_leak(scratch, memcg, leak)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        killed = time.time()
        return {
            "name": leak.name,
            "cgroup": memcg.relpath,
            "limit_mib": leak.limit_mib,
            "returncode": proc.returncode,
            "ran_s": round(killed - started, 1),
        }


def _start_leak(scratch: ScratchMemcg, memcg: Memcg, leak: Leak) -> subprocess.Popen[bytes]:
    if leak.trainer_leak_mb is None:
        hog: HogProcess = spawn_hog(memcg, mode="anon", comm="leaky", **leak.hog)
        return hog
    argv = [
        "sh",
        "-c",
        f'echo $$ > {memcg.fs_path}/cgroup.procs && exec "$0" "$@"',
        sys.executable,
        *TRAINER,
        "--leak-mb-per-step",
        str(leak.trainer_leak_mb),
    ]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scratch.track_process(proc)
    return proc


def results(
    state_dir: Path,
    leaks: list[dict[str, Any]],
    steady: dict[str, str],
    soak_root: str,
    started_s: float,
) -> dict[str, Any]:
    """What the agent's store says of each leak kill and each soak container."""
    store = IncidentStore.open_readonly(state_dir)
    incidents = [i for i in store.query() if i.task_memcg]
    warnings = store.warnings(started_s)
    for run in leaks:
        kill = next((i for i in incidents if i.task_memcg == run["cgroup"]), None)
        record = kill.forecast if kill is not None else None
        run["kill_recorded"] = kill is not None
        run["predicted"] = bool(record and record.predicted)
        run["lead_time_s"] = record.lead_time_seconds if record else None
        run["predicted_s"] = record.seconds_to_oom_at_warning if record else None
        run["confidence"] = record.confidence if record else None
        run["reason"] = record.reason if record else None
    in_soak = [w for w in warnings if w.cgroup == soak_root or w.cgroup.startswith(soak_root + "/")]
    leak_roots = {run["cgroup"].rsplit("/", 1)[0] for run in leaks}
    mine = {w.cgroup for w in in_soak} | {run["cgroup"] for run in leaks} | leak_roots
    false = in_soak  # the soak's tree root (its limit holds them all) counts too
    return {
        "leaks": leaks,
        "false_warnings": [
            {"cgroup": w.cgroup, "started_at_s": w.started_at_s, "text": w.data.get("text")}
            for w in false
        ],
        "soak_containers": steady,
        "leak_parent_warnings": sum(1 for w in warnings if w.cgroup in leak_roots),
        "other_warnings": sum(1 for w in warnings if w.cgroup not in mine),
    }


def summary(found: dict[str, Any], soak_s: float) -> str:
    kills = [r for r in found["leaks"] if r["returncode"] == -9]
    early = [r for r in kills if r["predicted"] and (r["lead_time_s"] or 0) >= 60]
    lines = [
        "| leak | limit | ran | warned | lead | predicted at warning | confidence |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in found["leaks"]:
        lead = f"{r['lead_time_s']:.0f} s" if r["lead_time_s"] is not None else "-"
        said = f"{r['predicted_s']:.0f} s" if r["predicted_s"] is not None else "-"
        warned = "yes" if r["predicted"] else f"no ({r['reason']})"
        lines.append(
            f"| {r['name']} | {r['limit_mib']} MiB | {r['ran_s']:.0f} s | {warned} |"
            f" {lead} | {said} | {r['confidence'] or '-'} |"
        )
    share = len(early) / len(kills) if kills else 0.0
    lines.append(f"\nleak kills warned >= 60 s ahead: {len(early)}/{len(kills)} ({share:.0%})")
    lines.append(
        f"false warnings on {len(found['soak_containers'])} steady containers over"
        f" {soak_s / 60:.0f} min: {len(found['false_warnings'])}"
    )
    lines.append(
        f"warnings on the leaks' scratch roots (nested limits the leak never reached):"
        f" {found['leak_parent_warnings']}"
    )
    lines.append(
        f"(warnings on other cgroups of the machine, not counted: {found['other_warnings']})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--soak-s", type=float, default=3600.0)
    parser.add_argument("--quick", action="store_true", help="3 minutes, one leak")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args(argv)
    reason = memcg_v1_unavailable_reason()
    if reason is not None:
        print(f"needs root, cgroup v1 memory and /dev/kmsg: {reason}", file=sys.stderr)
        return 2
    soak_s = 180.0 if args.quick else args.soak_s
    leaks = QUICK_LEAKS if args.quick else LEAKS
    if any(leak.trainer_leak_mb is not None for leak in leaks):
        warm_trainer()
    state_dir = Path(tempfile.mkdtemp(prefix="oomwatch-forecast-bench-"))
    port = free_port()
    started_s = time.time()
    agent = start_daemon(state_dir, port)
    runs: list[dict[str, Any]] = []
    try:
        wait_healthy(port)
        with ScratchMemcg(exclusive=False) as soak:
            soak_root = soak.relpath
            steady: dict[str, str] = {}
            for name, (limit_mib, hog) in STEADY.items():
                memcg = soak.create_child(name, limit_mib * MIB)
                spawn_hog(memcg, comm=name[:15], **hog)
                steady[name] = memcg.relpath
            for leak in leaks:
                runs.append(run_leak(leak, timeout_s=1200))
                print(json.dumps(runs[-1]), flush=True)
                time.sleep(5)  # the kill is recorded and joined
            time.sleep(max(0.0, started_s + soak_s - time.time()))
            alive = {
                name: memcg.pids() != []
                for name, memcg in ((n, Memcg(soak, rel)) for n, rel in steady.items())
            }
    finally:
        cpu = psutil.Process(agent.pid).cpu_times()
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
    found = results(state_dir, runs, steady, soak_root, started_s)
    found.update(
        soak_s=round(time.time() - started_s),
        steady_alive=alive,
        agent_cpu_s=round(cpu.user + cpu.system, 1),
        state_dir=str(state_dir),
    )
    if args.out is not None:
        args.out.write_text(json.dumps(found, indent=1) + "\n")
    print(summary(found, soak_s))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
