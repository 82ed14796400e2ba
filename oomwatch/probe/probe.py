"""The in-process probe: a 1 Hz sampler thread writing the trainer's flight recorder.

Two lines in a training script:

    probe = oomwatch.probe.start()
    probe.set_phase("grand_scoring", epoch=3, step=120, batch_size=256)

A probe must never be the reason training fails: if the directory cannot be written it logs
one warning and records nothing.  Framework OOMs are recorded synchronously (the process may
die right after), from `catch_oom()`, `record_oom(exc)`, or the uncaught-exception hooks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from oomwatch.probe.handoff import RingServer
from oomwatch.probe.oom_messages import (
    ParsedOom,
    parse_tf_oom,
    parse_torch_oom,
    torch_device_type,
)
from oomwatch.probe.ring import FILE_SUFFIX, RingWriter
from oomwatch.probe.sampler import (
    RollupBudget,
    TensorFlowMemory,
    cuda_allocator_stats,
    process_memory,
)
from oomwatch.probe.schema import (
    MAX_MESSAGE,
    MAX_TEXT,
    FrameworkOomEvent,
    ProbeMeta,
    ProbeSample,
    to_payload,
)
from oomwatch.probe.snapshot import cuda_snapshot

log = logging.getLogger("oomwatch.probe")

DEFAULT_DIR = "/var/run/oomwatch/probe"
ENV_DIR = "OOMWATCH_PROBE_DIR"
ENV_POD_UID = "OOMWATCH_POD_UID"
ENV_POD_NAME = "OOMWATCH_POD_NAME"
ENV_NAMESPACE = "OOMWATCH_POD_NAMESPACE"
ENV_CONTAINER = "OOMWATCH_CONTAINER_NAME"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def own_memory_cgroup(proc_cgroup_text: str) -> str | None:
    """The memory cgroup path from `/proc/self/cgroup` (v1 `N:memory:/p`, else v2 `0::/p`)."""
    unified = None
    for line in proc_cgroup_text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            return path
        if hierarchy == "0" and controllers == "":
            unified = path
    return unified


def flight_record_name(
    pod_uid: str | None, container: str | None, comm: str, pid: int, rank: int | None = None
) -> str:
    """`<pod uid>.<container>.ring` in a pod (`.r<local rank>.ring` for one of several ranks
    in the container: each rank its own file, which its restart renames); else
    `local.<comm>.<pid>.ring`."""
    if pod_uid and container:
        ranked = f".r{rank}" if rank is not None else ""
        name = f"{_UNSAFE.sub('_', pod_uid)[:64]}.{_UNSAFE.sub('_', container)[:63]}{ranked}"
        return name + FILE_SUFFIX
    return f"local.{_UNSAFE.sub('_', comm)[:15] or 'proc'}.{pid}{FILE_SUFFIX}"


def _int_env(env: Callable[[str], str | None], name: str) -> int | None:
    value = env(name)
    return int(value) if value is not None and value.isdigit() and len(value) < 10 else None


def distributed_identity(env: Callable[[str], str | None] = os.environ.get) -> dict[str, Any]:
    """Rank, local rank, world size, the launch and the visible devices, from what torchrun
    (TORCHELASTIC_*), Kubeflow's PyTorchJob (MASTER_ADDR/PORT) or Slurm (SLURM_JOB_ID) set;
    empty outside a distributed launch.  Ranks of one launch share `job_id`; a restart of the
    workers (TORCHELASTIC_RESTART_COUNT) is a launch of its own."""
    rank = _int_env(env, "RANK")
    world = _int_env(env, "WORLD_SIZE")
    if rank is None or world is None:
        return {}
    run_id = env("TORCHELASTIC_RUN_ID")
    if run_id in (None, "", "none"):
        run_id = env("SLURM_JOB_ID") or (
            f"{env('MASTER_ADDR')}:{env('MASTER_PORT')}" if env("MASTER_ADDR") else None
        )
    attempt = env("TORCHELASTIC_RESTART_COUNT") or "0"
    return {
        "rank": rank,
        "local_rank": _int_env(env, "LOCAL_RANK"),
        "world_size": world,
        "job_id": _clip(f"{run_id}/{attempt}") if run_id else None,
        "visible_devices": _clip(env("CUDA_VISIBLE_DEVICES")),
    }


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _pid_namespace() -> int | None:
    """The inode of this process's pid namespace: it says whether `pid` is a host pid."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _clip(text: str | None, limit: int = MAX_TEXT) -> str | None:
    return None if text is None else text[:limit]


class Probe:
    """Samples memory at `interval_s` into a flight-recorder file; see `start()`."""

    def __init__(
        self,
        directory: Path,
        *,
        interval_s: float = 1.0,
        pod_uid: str | None = None,
        pod_name: str | None = None,
        namespace: str | None = None,
        container: str | None = None,
        distributed: dict[str, Any] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._phase: tuple[str | None, int | None, int | None, int | None] = (
            None,
            None,
            None,
            None,
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tf = TensorFlowMemory()
        self._rollup = RollupBudget()
        self._failed_once = False
        pid = os.getpid()
        comm = (_read("/proc/self/comm") or "").strip() or "python"
        self.meta = ProbeMeta(
            pid=pid,
            comm=comm[:MAX_TEXT],
            started_wall_s=time.time(),
            started_mono_s=time.monotonic(),
            boot_id=_clip((_read("/proc/sys/kernel/random/boot_id") or "").strip() or None),
            cgroup=_clip(own_memory_cgroup(_read("/proc/self/cgroup") or ""), 512),
            pod_uid=_clip(pod_uid),
            pod_name=_clip(pod_name),
            namespace=_clip(namespace),
            container=_clip(container),
            pid_ns=_pid_namespace(),
            **(distributed if distributed is not None else distributed_identity()),
        )
        local_rank = self.meta.local_rank if self.meta.local_rank is not None else self.meta.rank
        self.path = directory / flight_record_name(pod_uid, container, comm, pid, local_rank)
        self._writer: RingWriter | None = None
        self._server: RingServer | None = None
        previous = self.path.with_suffix(".prev" + FILE_SUFFIX)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if pod_uid and container and self.path.exists():
                # The previous run of this container (perhaps the one just OOM-killed) stays
                # readable until the daemon has seen it.
                os.replace(self.path, previous)
            self._writer = RingWriter(str(self.path), to_payload(self.meta))
        except (OSError, ValueError) as exc:
            log.warning("oomwatch probe disabled: cannot write %s: %s", self.path, exc)
        if self._writer is not None:
            try:  # the agent's way to the 0600 files (oomwatch.probe.handoff)
                stem = self.path.name[: -len(FILE_SUFFIX)]
                self._server = RingServer(str(directory), stem, [str(self.path), str(previous)])
            except OSError as exc:
                log.warning("oomwatch probe: no socket for the agent in %s: %s", directory, exc)
        self._thread = threading.Thread(target=self._run, name="oomwatch-probe", daemon=True)

    @property
    def enabled(self) -> bool:
        return self._writer is not None

    def set_phase(
        self,
        phase: str,
        *,
        epoch: int | None = None,
        step: int | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Say where training is; a new phase name is written at once, steps at the next tick."""
        changed = phase != self._phase[0]
        self._phase = (phase[:MAX_TEXT], epoch, step, batch_size)
        if changed:
            self.sample_now()

    def sample(self) -> ProbeSample:
        """Take one sample (does not write it)."""
        memory = process_memory(self._rollup)
        phase, epoch, step, batch_size = self._phase
        return ProbeSample(
            wall_s=time.time(),
            mono_s=time.monotonic(),
            rss_bytes=memory.rss_bytes,
            uss_bytes=memory.uss_bytes,
            anon_bytes=memory.anon_bytes,
            anon_huge_bytes=memory.anon_huge_bytes,
            shmem_bytes=memory.shmem_bytes,
            swap_bytes=memory.swap_bytes,
            phase=phase,
            epoch=epoch,
            step=step,
            batch_size=batch_size,
            cuda=cuda_allocator_stats(),
            tf=self._tf.read(),
        )

    def sample_now(self) -> None:
        """Take and write a sample now; never raises (a failing sampler logs once)."""
        if self._writer is None:
            return
        try:
            sample = self.sample()
            with self._lock:
                if self._writer is not None:
                    self._writer.write_sample(to_payload(sample))
        except Exception as exc:  # the probe must not break training
            if not self._failed_once:
                self._failed_once = True
                log.warning("oomwatch probe: sampling failed: %s", exc)

    def record_oom(self, exc: BaseException) -> bool:
        """Record `exc` if it is a framework OOM (CUDA or TensorFlow); True if it was one."""
        kind = framework_of(exc)
        if kind is None or self._writer is None:
            return False
        message = str(exc)
        parsed: ParsedOom = (
            parse_tf_oom(message) if kind == "tensorflow" else parse_torch_oom(message)
        )
        phase, epoch, step, batch_size = self._phase
        event = FrameworkOomEvent(
            wall_s=time.time(),
            mono_s=time.monotonic(),
            framework=kind,
            message=message[:MAX_MESSAGE],
            device=_clip(parsed.device),
            requested_bytes=parsed.requested_bytes,
            free_bytes=parsed.free_bytes,
            total_bytes=parsed.total_bytes,
            allocated_bytes=parsed.allocated_bytes,
            reserved_unallocated_bytes=parsed.reserved_unallocated_bytes,
            phase=phase,
            epoch=epoch,
            step=step,
            batch_size=batch_size,
            snapshot=cuda_snapshot(parsed.device) if kind == "torch-cuda" else None,
        )
        try:
            self._write_event(event)
        except (OSError, ValueError) as write_error:
            log.warning("oomwatch probe: could not record a framework OOM: %s", write_error)
            return False
        self.sample_now()
        return True

    def _write_event(self, event: FrameworkOomEvent) -> None:
        with self._lock:
            if self._writer is None:
                return
            try:
                self._writer.write_event(to_payload(event))
            except ValueError:  # too long for a slot: keep the message's head...
                short = replace(event, message=event.message[:200])
                try:
                    self._writer.write_event(to_payload(short))
                except ValueError:  # ...and then the snapshot's totals only
                    totals = {
                        k: v for k, v in (event.snapshot or {}).items() if k != "largest_segments"
                    } or None
                    self._writer.write_event(to_payload(replace(short, snapshot=totals)))

    @contextlib.contextmanager
    def catch_oom(self) -> Iterator[None]:
        """Record a framework OOM raised inside the block, then let it propagate."""
        try:
            yield
        except BaseException as exc:
            self.record_oom(exc)
            raise

    def install_excepthooks(self) -> None:
        """Record framework OOMs that nobody catches, in the main thread or any other."""
        previous_sys = sys.excepthook
        previous_threading = threading.excepthook

        def sys_hook(
            kind: type[BaseException], exc: BaseException, tb: TracebackType | None
        ) -> None:
            self.record_oom(exc)
            previous_sys(kind, exc, tb)

        def thread_hook(args: threading.ExceptHookArgs) -> None:
            if args.exc_value is not None:
                self.record_oom(args.exc_value)
            previous_threading(args)

        sys.excepthook = sys_hook
        threading.excepthook = thread_hook

    def start(self) -> Probe:
        if self._writer is not None and not self._thread.is_alive():
            self.sample_now()
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and close the file (the file stays for the post-mortem)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self._server is not None:
                self._server.close()
                self._server = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_now()


def framework_of(exc: BaseException) -> str | None:
    """The framework (schema `Framework`) whose OOM error `exc` is, or None.

    torch raises one `OutOfMemoryError` for every device; its message says which (`CUDA out
    of memory`, `XPU ...`, `MPS backend ...`), and one that names none is plain `torch`.
    """
    torch: Any = sys.modules.get("torch")
    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        device_type = torch_device_type(str(exc))
        return f"torch-{device_type}" if device_type else "torch"
    tf: Any = sys.modules.get("tensorflow")
    if tf is not None and isinstance(exc, tf.errors.ResourceExhaustedError):
        return "tensorflow"
    return None


def start(
    directory: str | Path | None = None,
    *,
    interval_s: float = 1.0,
    excepthooks: bool = True,
    env: Callable[[str], str | None] = os.environ.get,
) -> Probe:
    """Start the probe: directory and pod identity come from the environment by default.

    `OOMWATCH_PROBE_DIR` (default /var/run/oomwatch/probe), `OOMWATCH_POD_UID`,
    `OOMWATCH_POD_NAME`, `OOMWATCH_POD_NAMESPACE` (downward API) and `OOMWATCH_CONTAINER_NAME`
    (a literal in the manifest: the downward API cannot give the container name); in a
    distributed launch, the rank and the launch (`distributed_identity`).
    """
    probe = Probe(
        Path(directory or env(ENV_DIR) or DEFAULT_DIR),
        interval_s=interval_s,
        pod_uid=env(ENV_POD_UID),
        pod_name=env(ENV_POD_NAME),
        namespace=env(ENV_NAMESPACE),
        container=env(ENV_CONTAINER),
        distributed=distributed_identity(env),
    )
    if excepthooks and probe.enabled:
        probe.install_excepthooks()
    return probe.start()
