"""The ML engineer's path on a real GPU, in one run: a standalone agent, the probe in
small programs claiming one pod, and one table of what the agent stored for each scenario.

    python3 bench/gpu_check.py [--extra-path DIR] [--overhead-s 10] [--cpu]

Scenarios (each program claims pod ml/trainer-0 and a container named after the scenario):

  fragmentation   fill the device with 2 GiB tensors, free them (they stay reserved), hold
                  1.5 GiB in each cached segment, ask for more than is free: one incident,
                  device-fragmentation
  expandable      the same under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: it
                  succeeds, no incident (the advice is right)
  too-large       ask for 1 TiB: one incident, device-too-large (not fragmentation)
  catch_oom       the same inside `probe.catch_oom()`, caught by the program: one incident
  restarts        one identity run 3 times, the agent restarted between runs 2 and 3: three
                  incidents, not more
  shared          a second process holds about half the device; the trainer asks for more
                  than is free: one incident, device-shared naming that process's pid
  two-ranks       torchrun, two ranks (gloo) on one GPU, rank 1 runs out: one incident naming
                  rank 1 (torchrun SIGTERMs rank 0)
  overhead        MLP training steps/s without the probe, with it at 1 Hz and at 100 Hz

`--cpu` runs the same scenarios where no CUDA device is: each program raises torch's
OutOfMemoryError with the message a GPU printed (shared/notes/verified-here.md), so the agent,
store, diagnosis and table are exercised; `expandable` is skipped there (only a device can say
whether the advice works).  Without CUDA and without `--cpu` it stops, saying so.

The GPU machine lacks structlog, jsonschema and kubernetes: download their
wheels where there is network (`pip download --no-deps --only-binary=:all: --python-version
3.12 --platform manylinux2014_x86_64 structlog jsonschema
jsonschema-specifications referencing rpds-py attrs kubernetes -d wheels`), install them with
`pip install --no-index --no-deps --target DIR wheels/*` there, and pass `--extra-path DIR`.
Exit status: 0 when every scenario gave what it should, 1 otherwise, 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
POD_UID = "5f0c2a9e-1d7b-4c1e-9a53-6b1f0e2d7c44"
GIB = 1 << 30

# What each program does on a GPU; on --cpu, FAKE raises the message a GPU printed.
PRELUDE = """
import os, sys, time, torch, oomwatch.probe
probe = oomwatch.probe.start()
probe.set_phase("train", epoch=0, step=int(os.environ.get("STEP", "1")), batch_size=64)
CPU = os.environ.get("GPU_CHECK_CPU") == "1"
def fake(message):
    raise torch.OutOfMemoryError(message)
"""
PROGRAMS = {
    "fragmentation": """
if CPU:
    fake("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.18 GiB"
         " of which 2.44 GiB is free. Including non-PyTorch memory, this process has 76.18 GiB"
         " memory in use. Of the allocated memory 57.00 GiB is allocated by PyTorch, and 19.00"
         " GiB is reserved by PyTorch but unallocated.")
blocks = []
try:
    while True:
        blocks.append(torch.empty(2 << 30, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
count = len(blocks)
del blocks
held = [torch.empty(3 << 29, dtype=torch.uint8, device="cuda") for _ in range(count)]
free, total = torch.cuda.mem_get_info()
torch.empty(free + (1 << 30), dtype=torch.uint8, device="cuda")
""",
    "too-large": """
if CPU:
    fake("CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of 79.18"
         " GiB of which 78.60 GiB is free. Including non-PyTorch memory, this process has 590.00"
         " MiB memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0"
         " bytes is reserved by PyTorch but unallocated.")
torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
""",
    "catch_oom": """
try:
    with probe.catch_oom():
        if CPU:
            fake("CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity"
                 " of 79.18 GiB of which 78.60 GiB is free. Including non-PyTorch memory, this"
                 " process has 590.00 MiB memory in use. Of the allocated memory 0 bytes is"
                 " allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.")
        torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError:
    print("caught")
""",
    "shared": """
if CPU:
    fake("CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total capacity of 79.18"
         " GiB of which 18.15 GiB is free. Process 439 has 40.51 GiB memory in use. Including"
         " non-PyTorch memory, this process has 20.51 GiB memory in use. Of the allocated memory"
         " 20.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but"
         " unallocated.")
mine = torch.empty(20 << 30, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
torch.empty(free + (8 << 30), dtype=torch.uint8, device="cuda")
""",
    "two-ranks": """
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    if CPU:
        fake("CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of"
             " 79.18 GiB of which 78.60 GiB is free. Including non-PyTorch memory, this process"
             " has 590.00 MiB memory in use. Of the allocated memory 0 bytes is allocated by"
             " PyTorch, and 0 bytes is reserved by PyTorch but unallocated.")
    torch.cuda.set_device(0)
    torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
time.sleep(60)
""",
}
PROGRAMS["expandable"] = PROGRAMS["fragmentation"]
PROGRAMS["restarts"] = PROGRAMS["too-large"]
# Holds about half the device until killed (the `shared` scenario's other process).
HOLDER = """
import time, torch
free, total = torch.cuda.mem_get_info()
hold = torch.empty(total // 2, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("holding", flush=True)
time.sleep(600)
"""
OVERHEAD = """
import sys, time, tempfile, torch
from torch import nn
from torch.nn import functional as F
import oomwatch.probe
rate, seconds, device = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if rate != "off":
    probe = oomwatch.probe.start(tempfile.mkdtemp(), interval_s=1 / float(rate), excepthooks=False)
torch.manual_seed(0)
wide = 8192 if device == "cuda" else 512
model = nn.Sequential(nn.Linear(4096 if device == "cuda" else 256, wide), nn.ReLU(),
                      nn.Linear(wide, wide), nn.ReLU(), nn.Linear(wide, 10)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(2048 if device == "cuda" else 64, model[0].in_features, device=device)
y = torch.randint(0, 10, (x.shape[0],), device=device)
def step():
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()
for _ in range(20):
    step()
if device == "cuda":
    torch.cuda.synchronize()
steps, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    step()
    steps += 1
if device == "cuda":
    torch.cuda.synchronize()
print(steps / (time.perf_counter() - start))
"""


@dataclass
class Scenario:
    name: str
    runs: int = 1
    want_incidents: int = 1
    want_code: str | None = None
    want_rc: int = 1
    notes: list[str] = field(default_factory=list)
    got_rcs: list[int] = field(default_factory=list)


Row = tuple[str, str, str, str, str, str, str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Agent:
    """`oomwatch run --standalone` with a probe directory, healthy when constructed."""

    def __init__(self, work: Path, env: dict[str, str], cgroup_root: str | None) -> None:
        self.port = free_port()
        argv = [
            sys.executable,
            "-m",
            "oomwatch.cli",
            "run",
            "--standalone",
            "--state-dir",
            str(work / "state"),
            "--probe-dir",
            str(work / "probe"),
            "--metrics-address",
            f"127.0.0.1:{self.port}",
            "--log-format",
            "json",
        ]
        if cgroup_root:
            argv += ["--cgroup-root", cgroup_root]
        self.log = open(work / f"agent-{self.port}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(
                    f"gpu_check: the agent exited {self.proc.returncode}; see {self.log.name}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise SystemExit(f"gpu_check: the agent was not healthy in 60 s; see {self.log.name}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def stored(state_dir: Path) -> list[Any]:
    from oomwatch.store import IncidentStore, StoreError

    try:
        store = IncidentStore.open_readonly(state_dir)
    except StoreError:
        return []
    try:
        return [i for i in store.query() if i.kind == "framework"]
    finally:
        store.close()


def container_of(incident: Any) -> str:
    return str(((incident.allocator or {}).get("claimed") or {}).get("container") or "")


def run_program(
    name: str, base_env: dict[str, str], work: Path, step: int, extra: dict[str, str] | None = None
) -> int:
    env = {**base_env, "OOMWATCH_CONTAINER_NAME": name, "STEP": str(step), **(extra or {})}
    script = work / f"{name}.py"
    script.write_text(PRELUDE + PROGRAMS[name])
    if name == "two-ranks":
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "0",
            str(script),
        ]
    else:
        argv = [sys.executable, str(script)]
    run = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True, timeout=300)
    (work / f"{name}-{step}.out").write_text(run.stdout + run.stderr)
    return run.returncode


def preflight(args: argparse.Namespace, paths: list[str]) -> bool | None:
    """Whether CUDA is there (None: the check cannot run here, said why on stderr)."""
    sys.path[:0] = paths
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed here; nothing to check.", file=sys.stderr)
        return None
    from importlib.util import find_spec

    missing = [m for m in ("structlog", "psutil", "yaml") if not find_spec(m)]
    if missing:
        print(
            f"gpu_check: the agent needs {', '.join(missing)}: install their wheels into a"
            " directory and pass --extra-path DIR (see this file's docstring).",
            file=sys.stderr,
        )
        return None
    cuda = bool(torch.cuda.is_available())
    if not cuda and not args.cpu:
        print(
            f"gpu_check: no CUDA device here (torch {torch.__version__}). Run it on a GPU"
            " machine, or with --cpu to exercise the agent with the recorded messages; the"
            " CPU tests cover the logic (tests/probe/test_restarts.py,"
            " tests/probe/test_distributed.py, tests/diagnosis/test_device.py).",
            file=sys.stderr,
        )
        return None
    name = torch.cuda.get_device_name(0) if cuda else "no GPU (--cpu: recorded messages)"
    print(f"gpu_check: {name}, torch {torch.__version__}", flush=True)
    return cuda


SCENARIOS = (
    Scenario("fragmentation", want_code="device-fragmentation"),
    Scenario("expandable", want_incidents=0, want_rc=0),
    Scenario("too-large", want_code="device-too-large"),
    Scenario("catch_oom", want_code="device-too-large", want_rc=0),
    Scenario("restarts", runs=3, want_incidents=3, want_code="device-too-large"),
    Scenario("shared", want_code="device-shared"),
    Scenario("two-ranks", want_code="device-too-large"),
)


@dataclass
class Outcome:
    found: list[Any]
    metrics: str
    restarted_at: float
    seconds: float


def run_scenarios(
    scenarios: list[Scenario], env: dict[str, str], work: Path, cuda: bool, cgroup_root: str | None
) -> Outcome:
    """Each scenario's programs against one agent (restarted once); what it stored."""
    started = time.monotonic()
    agent = Agent(work, env, cgroup_root)
    restarted_at = time.time()
    holder = None
    try:
        for sc in scenarios:
            if sc.name == "expandable" and not cuda:
                sc.notes.append("skipped: needs a GPU")
                sc.want_rc = -1
                continue
            extra = {}
            if sc.name == "expandable":
                extra["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
            if sc.name == "shared" and cuda:
                holder = subprocess.Popen(
                    [sys.executable, "-c", HOLDER], env=env, stdout=subprocess.PIPE, text=True
                )
                assert holder.stdout is not None
                holder.stdout.readline()  # "holding"
                sc.notes.append(f"holder pid {holder.pid}")
            for step in range(sc.runs):
                if sc.name == "restarts" and step == 2:
                    agent.stop()
                    restarted_at = time.time()
                    agent = Agent(work, env, cgroup_root)
                    sc.notes.append("agent restarted before run 3")
                sc.got_rcs.append(run_program(sc.name, env, work, step, extra))
            if holder is not None:
                holder.kill()
                holder.wait()
                holder = None
        want = sum(sc.want_incidents for sc in scenarios if sc.want_rc >= 0)
        deadline = time.monotonic() + 30  # a launch's OOMs wait 3 s for its other ranks
        while len(stored(work / "state")) < want and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)  # and nothing more arrives
        return Outcome(
            stored(work / "state"), agent.metrics(), restarted_at, time.monotonic() - started
        )
    finally:
        if holder is not None:
            holder.kill()
        agent.stop()


def scenario_rows(scenarios: list[Scenario], outcome: Outcome) -> tuple[list[Row], bool]:
    """One row per scenario and one for the metric; whether all are as they should be."""
    from oomwatch.incident import iso_epoch_s

    ok, rows = True, []
    for sc in scenarios:
        mine = [i for i in outcome.found if container_of(i) == sc.name]
        codes = sorted({i.verdict_code or "?" for i in mine})
        good = len(mine) == sc.want_incidents and (sc.want_code is None or codes == [sc.want_code])
        good = good and all((rc == 0) == (sc.want_rc == 0) for rc in sc.got_rcs)
        if sc.name == "shared" and mine:
            named = (mine[0].allocator or {}).get("other_processes") or []
            sc.notes.append(f"named {[p.get('pid') for p in named]}")
        if sc.name == "two-ranks" and mine:
            alloc = mine[0].allocator or {}
            sc.notes.append(
                f"rank {alloc.get('rank')} of {alloc.get('world_size')} on"
                f" {alloc.get('device')}, ranks {alloc.get('ranks')}"
            )
        if mine:
            sc.notes.append(f"verdict: {mine[0].verdict}")
        skipped = sc.want_rc < 0
        ok = ok and (good or skipped)
        rows.append(
            (
                sc.name,
                ",".join(map(str, sc.got_rcs)) or "-",
                str(len(mine)),
                str(sc.want_incidents),
                ",".join(codes) or "-",
                "skip" if skipped else "yes" if good else "NO",
                "; ".join(sc.notes),
            )
        )
    counted = [
        line
        for line in outcome.metrics.splitlines()
        if line.startswith("oomwatch_framework_oom_total{")
    ]
    total = sum(float(line.rsplit(" ", 1)[1]) for line in counted)
    since = [i for i in outcome.found if (iso_epoch_s(i.detected_at) or 0) >= outcome.restarted_at]
    good = total == len(since)
    note = "what the restarted agent counted = what it stored"
    rows.append(
        (
            "metric",
            "-",
            f"{total:.0f}",
            str(len(since)),
            "oomwatch_framework_oom_total",
            "yes" if good else "NO",
            note,
        )
    )
    return rows, ok and good


def overhead_rows(env: dict[str, str], seconds: float, cuda: bool) -> list[Row]:
    """Training steps/s without the probe and with it at 1 Hz and 100 Hz."""
    rates: dict[str, float] = {}
    for rate in ("off", "1", "100"):
        argv = [sys.executable, "-c", OVERHEAD, rate, str(seconds), "cuda" if cuda else "cpu"]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        rates[rate] = float(out.stdout.strip() or "nan")
    rows = []
    for rate in ("1", "100"):
        cost = (1 - rates[rate] / rates["off"]) * 100
        without = f"{cost:.2f} % slower than {rates['off']:.2f} steps/s without the probe"
        rows.append(
            (f"overhead {rate} Hz", "-", "-", "-", f"{rates[rate]:.2f} steps/s", "-", without)
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="no GPU: raise recorded messages")
    parser.add_argument("--extra-path", help="a directory of packages the machine lacks")
    parser.add_argument("--overhead-s", type=float, default=10.0, help="seconds per rate")
    parser.add_argument("--cgroup-root", help="passed to the agent (cgroup v1 hosts)")
    parser.add_argument("--work", help="keep programs, outputs and the store here")
    args = parser.parse_args()
    paths = [str(REPO)] + ([args.extra_path] if args.extra_path else [])
    cuda = preflight(args, paths)
    if cuda is None:
        return 2
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-check-"))
    (work / "probe").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOMWATCH_")}
    env.update(
        PYTHONPATH=os.pathsep.join(paths),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        OOMWATCH_PROBE_DIR=str(work / "probe"),
        OOMWATCH_POD_UID=POD_UID,
        OOMWATCH_POD_NAME="trainer-0",
        OOMWATCH_POD_NAMESPACE="ml",
    )
    if not cuda:
        env["GPU_CHECK_CPU"] = "1"
    scenarios = [
        Scenario(sc.name, sc.runs, sc.want_incidents, sc.want_code, sc.want_rc) for sc in SCENARIOS
    ]
    outcome = run_scenarios(scenarios, env, work, cuda, args.cgroup_root)
    rows, ok = scenario_rows(scenarios, outcome)
    rows = [("scenario", "exit", "incidents", "want", "verdict code", "ok", "notes"), *rows]
    rows += overhead_rows(env, args.overhead_s, cuda)
    widths = [max(len(r[n]) for r in rows) for n in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1])
    print(f"scenarios took {outcome.seconds:.0f} s; programs, outputs and store in {work}")
    (work / "result.json").write_text(json.dumps({"rows": rows, "ok": ok}, indent=1))
    if not ok:
        print("gpu_check: FAILED (see the rows marked NO)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
