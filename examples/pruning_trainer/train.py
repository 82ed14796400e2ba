"""Training and evaluation, with the memory behaviours the scenarios switch on.

`leak_mb_per_step` keeps a tensor alive per step (the classic "appended the loss with its
graph to a list"); `workers` feeds batches through DataLoader worker processes, which hand
them back through shared memory.  Every step tells the probe where training is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from examples.pruning_trainer.data import Split
from examples.pruning_trainer.model import mlp

# phase name, epoch, step, batch size: `Probe.set_phase` or a no-op.
PhaseReport = Callable[..., None]


def no_report(phase: str, **where: int | None) -> None:
    """The phase report when no probe runs."""


@dataclass
class TrainConfig:
    epochs: int
    batch_size: int = 64
    lr: float = 1e-3
    hidden: int = 128
    workers: int = 0
    leak_mb_per_step: float = 0.0
    # A step takes at least this long (a real model's step takes 0.1-1 s; this MLP's takes
    # microseconds, so its leak would fill any limit in a second, a spike, not a leak).
    min_step_s: float = 0.0
    device: str = "cpu"  # "cuda" runs model and batches on the GPU; data stays on the host
    leaked: list[torch.Tensor] = field(default_factory=list)  # the leak scenario's victims


class _Rows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Per-example access for DataLoader workers (rows generated or read in the worker)."""

    def __init__(self, split: Split, index: torch.Tensor) -> None:
        self.split = split
        self.index = index

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.index[i : i + 1]
        return self.split.train_batch(row)[0], self.split.y_train[row][0]


def _batches(
    split: Split, index: torch.Tensor, cfg: TrainConfig, gen: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    if cfg.workers > 0:
        loader = DataLoader(
            _Rows(split, index),
            batch_size=cfg.batch_size,
            shuffle=True,
            generator=gen,
            num_workers=cfg.workers,
        )
        yield from loader
        return
    order = index[torch.randperm(index.shape[0], generator=gen)]
    for start in range(0, order.shape[0], cfg.batch_size):
        rows = order[start : start + cfg.batch_size]
        yield split.train_batch(rows), split.y_train[rows]


def train(
    split: Split,
    index: torch.Tensor,
    seed: int,
    cfg: TrainConfig,
    report: PhaseReport = no_report,
    phase: str = "train",
) -> nn.Module:
    """Train a fresh MLP (seeded) on the examples `index` with Adam; returns it in eval mode."""
    device = torch.device(cfg.device)
    model = mlp(split.features, cfg.hidden, split.classes, seed).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=True)
    gen = torch.Generator().manual_seed(seed)
    step = 0
    started_s = time.monotonic()
    leak_elems = int(cfg.leak_mb_per_step * (1 << 20) / 4)
    model.train()
    for epoch in range(cfg.epochs):
        # Said before the first batch: DataLoader workers start (and take memory) right here.
        report(phase, epoch=epoch, step=step, batch_size=cfg.batch_size)
        for x_host, y_host in _batches(split, index, cfg, gen):
            x, y = x_host.to(device), y_host.to(device)
            optimiser.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimiser.step()
            step += 1
            if leak_elems:
                cfg.leaked.append(torch.ones(leak_elems, device=device))
            if cfg.min_step_s > 0:
                time.sleep(max(0.0, started_s + step * cfg.min_step_s - time.monotonic()))
            report(phase, epoch=epoch, step=step, batch_size=int(y.shape[0]))
    model.eval()
    return model


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    device = next(model.parameters()).device
    return float((model(x.to(device)).argmax(1) == y.to(device)).float().mean())
