"""EL2N and GraNd scores (Paul et al. 2021), averaged over independently seeded runs.

EL2N: ||softmax(f(x)) - onehot(y)||_2.  GraNd: the L2 norm of the per-example loss gradient
over all parameters, computed with `torch.func` (functional_call + grad under vmap) in eval
mode.  Per-example gradients cost `chunk x parameters` floats at once: `grand_chunk` is the
memory knob of the GraNd scenario.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from examples.pruning_trainer.data import Split
from examples.pruning_trainer.train import PhaseReport, TrainConfig, no_report, train

EVAL_CHUNK = 4096


@torch.no_grad()
def el2n(model: nn.Module, x: torch.Tensor, y: torch.Tensor, classes: int) -> torch.Tensor:
    model.eval()
    error = F.softmax(model(x), dim=1) - F.one_hot(y, classes).float()
    norms: torch.Tensor = error.norm(dim=1)
    return norms


def grand(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example gradient norms over every trainable parameter (one vmapped pass)."""
    model.eval()
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    squared = sum(g.flatten(1).pow(2).sum(1) for g in grads.values())
    assert isinstance(squared, torch.Tensor)
    return squared.sqrt()


@dataclass(frozen=True)
class Scores:
    el2n: torch.Tensor  # mean over runs, one per training example
    grand: torch.Tensor


def score(
    split: Split,
    runs: int,
    cfg: TrainConfig,
    grand_chunk: int,
    report: PhaseReport = no_report,
    first_seed: int = 1000,
) -> Scores:
    """Train `runs` models for `cfg.epochs` epochs from different seeds, score, average."""
    n = split.n_train
    index = torch.arange(n)
    el2n_sum = torch.zeros(n)
    grand_sum = torch.zeros(n)
    device = torch.device(cfg.device)
    for run in range(runs):
        model = train(split, index, first_seed + run, cfg, report, phase="score_train")
        for start in range(0, n, EVAL_CHUNK):
            rows = index[start : start + EVAL_CHUNK]
            report("el2n_scoring", epoch=run, step=start // EVAL_CHUNK, batch_size=len(rows))
            x, y = split.train_batch(rows).to(device), split.y_train[rows].to(device)
            el2n_sum[rows] += el2n(model, x, y, split.classes).cpu()
        for chunk, start in enumerate(range(0, n, grand_chunk)):
            rows = index[start : start + grand_chunk]
            report("grand_scoring", epoch=run, step=chunk, batch_size=len(rows))
            x, y = split.train_batch(rows).to(device), split.y_train[rows].to(device)
            grand_sum[rows] += grand(model, x, y).cpu()
    return Scores(el2n=el2n_sum / runs, grand=grand_sum / runs)
