"""The pruning experiment: score, prune at each fraction by each method, retrain, evaluate."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from examples.pruning_trainer.data import Split
from examples.pruning_trainer.prune import METHODS, keep_indices
from examples.pruning_trainer.scores import Scores, score
from examples.pruning_trainer.train import PhaseReport, TrainConfig, accuracy, no_report, train


@dataclass(frozen=True)
class ExperimentConfig:
    score_runs: int = 5
    score_epochs: int = 10
    retrain_epochs: int = 100
    seeds: int = 3
    fractions: tuple[float, ...] = (0.3, 0.5, 0.7)  # fraction of the training set pruned
    methods: tuple[str, ...] = METHODS
    per_class: bool = False
    batch_size: int = 64
    lr: float = 1e-3
    hidden: int = 128
    grand_chunk: int = 256
    workers: int = 0
    leak_mb_per_step: float = 0.0
    min_step_s: float = 0.0
    device: str = "cpu"
    train: TrainConfig = field(init=False)

    def __post_init__(self) -> None:
        unknown = set(self.methods) - set(METHODS)
        if unknown:
            raise ValueError(f"unknown pruning methods {sorted(unknown)}; known: {METHODS}")
        object.__setattr__(self, "train", self.train_config(self.retrain_epochs))

    def train_config(self, epochs: int) -> TrainConfig:
        return TrainConfig(
            epochs=epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            hidden=self.hidden,
            workers=self.workers,
            leak_mb_per_step=self.leak_mb_per_step,
            min_step_s=self.min_step_s,
            device=self.device,
        )


@dataclass(frozen=True)
class Row:
    fraction: float  # pruned
    method: str
    accuracies: tuple[float, ...]  # one per retraining seed
    kept: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.accuracies)

    @property
    def std(self) -> float:
        return statistics.stdev(self.accuracies) if len(self.accuracies) > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "fraction": self.fraction,
            "method": self.method,
            "mean_accuracy": round(self.mean * 100, 2),
            "std_accuracy": round(self.std * 100, 2),
            "accuracies": [round(a * 100, 2) for a in self.accuracies],
            "kept": self.kept,
        }


def _ranking(method: str, scores: Scores) -> tuple[torch.Tensor, str]:
    if method == "grand":
        return scores.grand, "hardest"
    if method == "easiest":
        return scores.el2n, "easiest"
    return scores.el2n, "random" if method == "random" else "hardest"


def retrain_rows(
    split: Split,
    scores: Scores,
    cfg: ExperimentConfig,
    report: PhaseReport = no_report,
    include_full: bool = True,
) -> list[Row]:
    """Full-data baseline, then each (fraction, method), each retrained from `cfg.seeds` seeds.

    Random pruning draws a new subset for every seed, so its spread covers the subset too.
    """
    cells: list[tuple[float, str]] = [(0.0, "full")] if include_full else []
    cells += [(fraction, method) for fraction in cfg.fractions for method in cfg.methods]
    rows: list[Row] = []
    for fraction, method in cells:
        accuracies = []
        for seed in range(cfg.seeds):
            if method == "full":
                kept = torch.arange(split.n_train)
            else:
                ranking, order = _ranking(method, scores)
                kept = keep_indices(
                    ranking, split.y_train, 1 - fraction, order, cfg.per_class, seed=seed
                )
            model = train(split, kept, seed, cfg.train, report, phase="retrain")
            report("evaluate", epoch=None, step=None, batch_size=None)
            accuracies.append(accuracy(model, split.x_test, split.y_test))
        rows.append(Row(fraction, method, tuple(accuracies), int(kept.shape[0])))
    return rows


def run_experiment(
    split: Split, cfg: ExperimentConfig, report: PhaseReport = no_report, include_full: bool = True
) -> tuple[Scores, list[Row]]:
    scores = score(
        split, cfg.score_runs, cfg.train_config(cfg.score_epochs), cfg.grand_chunk, report
    )
    return scores, retrain_rows(split, scores, cfg, report, include_full)
