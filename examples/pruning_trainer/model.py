"""The model: an MLP (features -> hidden -> classes), seeded for reproducible runs."""

from __future__ import annotations

import torch
from torch import nn


def mlp(features: int, hidden: int, classes: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
