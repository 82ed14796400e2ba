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
    assert steps == list(range(1, 9))  # 512 rows / batch 64, delivered by the workers


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
