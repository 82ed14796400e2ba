"""The memory-scenario flags do what they say, and the trainer reports its phases to the probe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from examples.pruning_trainer.cli import main
from examples.pruning_trainer.data import digits, synthetic
from examples.pruning_trainer.train import TrainConfig, train
from oomwatch.probe.reader import ProbeDirReader

REPO = Path(__file__).resolve().parents[2]


def test_leak_keeps_a_tensor_per_step() -> None:
    split = digits()
    cfg = TrainConfig(epochs=1, leak_mb_per_step=2.0)
    train(split, torch.arange(split.n_train), 0, cfg)
    steps = -(-split.n_train // cfg.batch_size)
    assert len(cfg.leaked) == steps
    # distinct live storage, written (so resident): RSS deltas are blurred by malloc reuse
    assert len({t.data_ptr() for t in cfg.leaked}) == steps
    assert sum(t.untyped_storage().nbytes() for t in cfg.leaked) == steps * (2 << 20)
    assert all(bool(t[-1] == 1) for t in cfg.leaked)


def test_workers_read_rows_from_shared_memory() -> None:
    split = synthetic(512, 32, shared=True)
    assert isinstance(split.x_train, torch.Tensor) and split.x_train.is_shared()
    steps: list[int | None] = []

    def report(phase: str, **where: int | None) -> None:
        steps.append(where.get("step"))

    train(split, torch.arange(512), 0, TrainConfig(epochs=1, workers=2), report)
    assert split.x_train.is_shared()
    assert steps == [0, *range(1, 9)]  # the epoch start, then 512 rows / batch 64 by workers


def test_shm_needs_workers() -> None:
    with pytest.raises(SystemExit):
        main(["--dataset", "synthetic", "--shm"])


def test_the_trainer_reports_its_phases_to_the_probe(tmp_path: Path) -> None:
    args = [
        "--dataset",
        "synthetic",
        "--synthetic-examples",
        "256",
        "--features",
        "16",
        "--hidden",
        "32",
        "--score-runs",
        "1",
        "--score-epochs",
        "1",
        "--retrain-epochs",
        "1",
        "--seeds",
        "1",
        "--fractions",
        "0.5",
        "--methods",
        "el2n",
        "--grand-chunk",
        "64",
        "--cache-dataset",
        "--probe-dir",
        str(tmp_path),
    ]
    subprocess.run(
        [sys.executable, "-m", "examples.pruning_trainer", *args],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (record,) = ProbeDirReader(tmp_path).read_all()
    phases = [s.phase for s in record.samples]
    # each phase change is written at once, so even a sub-second run shows every phase
    for phase in (
        "load_data",
        "score_train",
        "el2n_scoring",
        "grand_scoring",
        "retrain",
        "evaluate",
        "done",
    ):
        assert phase in phases
    grand = next(s for s in record.samples if s.phase == "grand_scoring")
    assert grand.batch_size == 64 and grand.step == 0


def test_shared_rows_show_in_the_probe_and_workers_in_the_measurement(tmp_path: Path) -> None:
    rows_bytes = 40000 * 64 * 4  # 10 MiB of training rows in shared memory
    args = [
        "--seconds",
        "120",
        "--probe-dir",
        str(tmp_path),
        "--",
        "--dataset",
        "synthetic",
        "--synthetic-examples",
        "40000",
        "--features",
        "64",
        "--hidden",
        "16",
        "--workers",
        "2",
        "--shm",
        "--batch-size",
        "512",
        "--threads",
        "1",
        "--score-runs",
        "1",
        "--score-epochs",
        "2",
        "--score-only",
    ]
    run = subprocess.run(
        [sys.executable, "-m", "examples.pruning_trainer.memory", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
    )
    (record,) = ProbeDirReader(tmp_path).read_all()
    # Phase changes are written at once: load_data before the rows exist, score_train as the
    # workers start, so the probe's shmem_bytes shows the rows arrive (the trainer's own).
    first = {s.phase: s for s in reversed(record.samples)}
    load, score = first["load_data"], first["score_train"]
    assert load.shmem_bytes is not None and load.shmem_bytes < rows_bytes // 4
    assert score.shmem_bytes is not None and score.shmem_bytes >= rows_bytes
    lines = {line.split()[0]: line for line in run.stdout.splitlines()}
    assert {"load_data", "score_train"} <= set(lines)
    assert "workers' private dirty 0" not in lines["score_train"], run.stdout


def _mapping_of(address: int) -> tuple[str, dict[str, int]]:
    """The /proc/self/smaps entry holding `address`: its header line and its kB fields."""
    header, found = "", False
    fields: dict[str, int] = {}
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                if found:
                    break
                low, high = (int(x, 16) for x in first.split("-"))
                header, fields, found = line.strip(), {}, low <= address < high
            elif found and line.rstrip().endswith("kB"):
                fields[first.rstrip(":")] = int(line.split()[1])
    assert found, f"no mapping holds {address:#x}"
    return header, fields


def test_a_file_cache_is_page_cache_not_anonymous_memory(tmp_path: Path) -> None:
    split = synthetic(20000, 256, cache="file", cache_dir=str(tmp_path))
    assert isinstance(split.x_train, torch.Tensor)
    header, kb = _mapping_of(split.x_train.data_ptr())
    assert str(tmp_path / "pruning-rows-") in header and header.endswith("(deleted)")
    assert list(tmp_path.iterdir()) == []  # unlinked once mapped: a kill leaves nothing
    assert kb["Rss"] >= 20000 * 256 * 4 // 1024 and kb["Anonymous"] == 0  # page cache
    rows = torch.tensor([0, 4095, 4096, 19999])
    anon = synthetic(20000, 256, cache="anon")
    torch.testing.assert_close(split.train_batch(rows), anon.train_batch(rows))


def test_file_cache_and_shm_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        main(["--dataset", "synthetic", "--workers", "1", "--shm", "--cache-dataset", "file"])
