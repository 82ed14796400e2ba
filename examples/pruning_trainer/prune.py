"""Which examples to keep: hardest by a score, easiest, or random; optionally per class."""

from __future__ import annotations

import torch

METHODS = ("el2n", "grand", "random", "easiest")


def keep_indices(
    scores: torch.Tensor,
    labels: torch.Tensor,
    keep_fraction: float,
    order: str,
    per_class: bool = False,
    seed: int = 0,
) -> torch.Tensor:
    """Indices of the kept examples, sorted; `order` is `hardest`, `easiest` or `random`.

    Per class keeps the same fraction of every class, so a score that ranks one class as
    all-easy cannot prune that class away (what goes wrong with scores taken too early).
    """
    groups = (
        [torch.nonzero(labels == c).flatten() for c in labels.unique()]
        if per_class
        else [torch.arange(labels.shape[0])]
    )
    gen = torch.Generator().manual_seed(seed)
    kept: list[torch.Tensor] = []
    for members in groups:
        count = round(keep_fraction * members.shape[0])
        if order == "random":
            ranked = members[torch.randperm(members.shape[0], generator=gen)]
        else:
            descending = order == "hardest"
            ranked = members[torch.argsort(scores[members], descending=descending, stable=True)]
        kept.append(ranked[:count])
    return torch.cat(kept).sort().values
