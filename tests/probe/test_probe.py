"""The in-process probe: sampling, phases, framework-OOM capture, and staying harmless."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import until

import oomwatch.probe
from oomwatch.probe.probe import flight_record_name, framework_of, own_memory_cgroup
from oomwatch.probe.reader import FlightRecord, ProbeDirReader
from oomwatch.probe.sampler import RollupBudget, parse_kb_fields, process_memory


def _env(**values: str) -> object:
    return lambda key: values.get(key)


def test_two_line_use_samples_and_records_the_phase(probe_dir: Path) -> None:
    probe = oomwatch.probe.start(probe_dir, interval_s=0.05, excepthooks=False)
    try:
        probe.set_phase("grand_scoring", epoch=2, step=7, batch_size=256)
        first = ProbeDirReader(probe_dir).read_one(probe.path.name).samples[-1]
        assert first.phase == "grand_scoring"  # a new phase is written at once
        assert (first.epoch, first.step, first.batch_size) == (2, 7, 256)
        probe.set_phase("grand_scoring", epoch=2, step=8, batch_size=256)

        def sampled_on() -> FlightRecord | None:  # the sampler thread keeps sampling
            record = ProbeDirReader(probe_dir).read_one(probe.path.name)
            return record if len(record.samples) >= 4 and record.samples[-1].step == 8 else None

        record = until("four samples, the last at step 8", sampled_on, timeout_s=10.0)
    finally:
        probe.stop()
    assert len(record.samples) >= 4  # the sampler thread kept sampling
    last = record.samples[-1]
    assert last.step == 8 and last.rss_bytes > 10 << 20
    assert last.anon_bytes is not None and 0 < last.anon_bytes <= last.rss_bytes
    uss = [s.uss_bytes for s in record.samples if s.uss_bytes is not None]
    assert uss and 0 < uss[0] <= record.samples[0].rss_bytes  # rollup read, within budget
    assert last.cuda is None  # CUDA not initialised in this process
    assert record.meta.pid == probe.meta.pid and record.meta.cgroup
    assert record.meta.pid_ns == os.stat("/proc/self/ns/pid").st_ino
    assert abs(last.mono_s - time.monotonic()) < 5


def test_identity_from_the_downward_api_and_restart_keeps_the_previous_file(
    probe_dir: Path,
) -> None:
    env = _env(
        OOMWATCH_POD_UID="0a1b-2c",
        OOMWATCH_CONTAINER_NAME="trainer",
        OOMWATCH_POD_NAME="job-0",
        OOMWATCH_POD_NAMESPACE="ml",
    )
    first = oomwatch.probe.start(probe_dir, excepthooks=False, env=env)  # type: ignore[arg-type]
    first.stop()
    second = oomwatch.probe.start(probe_dir, excepthooks=False, env=env)  # type: ignore[arg-type]
    second.stop()
    names = sorted(r.name for r in ProbeDirReader(probe_dir).read_all())
    assert names == ["0a1b-2c.trainer.prev.ring", "0a1b-2c.trainer.ring"]
    meta = ProbeDirReader(probe_dir).read_one("0a1b-2c.trainer.ring").meta
    assert (meta.pod_uid, meta.container, meta.pod_name, meta.namespace) == (
        "0a1b-2c",
        "trainer",
        "job-0",
        "ml",
    )


def test_file_names_cannot_be_steered_by_hostile_identity() -> None:
    assert flight_record_name("../../etc", "x/y", "c", 1) == "______etc.x_y.ring"
    assert flight_record_name(None, None, "py\nthon", 77) == "local.py_thon.77.ring"
    assert flight_record_name("u", "c", "python", 1, rank=3) == "u.c.r3.ring"


def test_unwritable_directory_disables_the_probe_without_raising(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    probe = oomwatch.probe.start(blocker / "probe", excepthooks=False)
    assert not probe.enabled
    probe.set_phase("train", step=1)
    probe.stop()


def test_framework_oom_recorded_and_reraised(probe_dir: Path) -> None:
    torch = pytest.importorskip("torch")
    probe = oomwatch.probe.start(probe_dir, excepthooks=False)
    probe.set_phase("forward", epoch=1, step=9, batch_size=512)
    message = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
        "of which 1.25 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB "
        "memory in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.50 GiB "
        "is reserved by PyTorch but unallocated."
    )
    with pytest.raises(torch.OutOfMemoryError), probe.catch_oom():
        raise torch.OutOfMemoryError(message)
    with pytest.raises(ValueError), probe.catch_oom():
        raise ValueError("not an OOM")  # re-raised, not recorded
    assert not probe.record_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory"))
    probe.stop()
    (event,) = ProbeDirReader(probe_dir).read_one(probe.path.name).events
    assert event.framework == "torch-cuda" and event.device == "cuda:0"
    assert event.requested_bytes == 2 << 30
    assert event.reserved_unallocated_bytes == round(7.5 * (1 << 30))
    assert (event.phase, event.epoch, event.step, event.batch_size) == ("forward", 1, 9, 512)
    assert event.message.startswith("CUDA out of memory.")


def test_a_torch_oom_is_labelled_with_the_device_its_message_names() -> None:
    torch = pytest.importorskip("torch")
    messages = {
        "CUDA out of memory. Tried to allocate 2.00 GiB.": "torch-cuda",
        "XPU out of memory. Tried to allocate 4.66 GiB.": "torch-xpu",
        "MPS backend out of memory (MPS allocated: 1 GiB, other allocations: ...": "torch-mps",
        "out of memory": "torch",  # torch raised it; the device is not said
    }
    for message, framework in messages.items():
        assert framework_of(torch.OutOfMemoryError(message)) == framework
    assert framework_of(RuntimeError("DefaultCPUAllocator: can't allocate memory")) is None


def test_an_xpu_oom_is_recorded_as_one(probe_dir: Path) -> None:
    torch = pytest.importorskip("torch")
    probe = oomwatch.probe.start(probe_dir, excepthooks=False)
    message = (
        "XPU out of memory. Tried to allocate 8.11 GiB. GPU 0 has a total capacity of 16.54 GiB "
        "of which 16.54 GiB is free. 8.27 GiB allowed; Of the allocated memory 0 bytes is "
        "allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    )
    assert probe.record_oom(torch.OutOfMemoryError(message))
    probe.stop()
    (event,) = ProbeDirReader(probe_dir).read_one(probe.path.name).events
    assert (event.framework, event.device) == ("torch-xpu", "xpu:0")
    assert event.requested_bytes is not None and event.free_bytes is not None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_uncaught_oom_in_a_thread_is_recorded_by_the_hook(probe_dir: Path) -> None:
    torch = pytest.importorskip("torch")
    saved = sys.excepthook, threading.excepthook
    try:
        probe = oomwatch.probe.start(probe_dir)

        def work() -> None:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        probe.stop()
    finally:
        sys.excepthook, threading.excepthook = saved
    (event,) = ProbeDirReader(probe_dir).read_one(probe.path.name).events
    assert event.requested_bytes == 20 << 20


def test_probe_never_imports_a_framework(probe_dir: Path) -> None:
    code = (
        "import sys, oomwatch.probe\n"
        f"p = oomwatch.probe.start({str(probe_dir)!r}, interval_s=0.01)\n"
        "import time; time.sleep(0.1); p.stop()\n"  # the body: ten intervals of sampling
        "print(sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "[]"


def test_parsers_of_proc_files() -> None:
    rollup = "Rss: 2048 kB\nPrivate_Clean: 100 kB\nAnonHugePages: 1024 kB\nbad: x kB\n"
    wanted = {"Private_Clean": "clean", "AnonHugePages": "thp", "bad": "bad"}
    assert parse_kb_fields(rollup, wanted) == {"clean": 100 << 10, "thp": 1024 << 10}
    v1 = "12:pids:/a\n4:memory:/kubepods/pod1/abc\n0::/\n"
    assert own_memory_cgroup(v1) == "/kubepods/pod1/abc"
    assert own_memory_cgroup("0::/kubepods.slice/x.scope\n") == "/kubepods.slice/x.scope"
    assert own_memory_cgroup("") is None


def test_smaps_rollup_is_read_only_within_its_budget() -> None:
    budget = RollupBudget(fraction=0.001)
    first = process_memory(budget)
    second = process_memory(budget)  # right after: the walk's cost is not yet paid back
    assert first.uss_bytes is not None and first.anon_huge_bytes is not None
    assert second.uss_bytes is None and second.anon_bytes is not None
    assert second.rss_bytes > 0 and second.swap_bytes is not None
    assert process_memory().uss_bytes is not None  # no budget: always read


def test_cuda_allocator_stats_on_a_gpu(probe_dir: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"CUDA not available (torch {torch.__version__}): CUDA sampling not exercised")
    probe = oomwatch.probe.start(probe_dir, excepthooks=False)
    block = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    probe.sample_now()
    with pytest.raises(torch.OutOfMemoryError), probe.catch_oom():
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    probe.stop()
    record = ProbeDirReader(probe_dir).read_one(probe.path.name)
    cuda = record.samples[-1].cuda
    assert cuda is not None and int(cuda["allocated_bytes"]) >= 64 << 20
    assert int(cuda["num_ooms"]) >= 1
    (event,) = record.events
    assert event.requested_bytes == 1 << 50 and event.free_bytes is not None
    del block
