"""EL2N and GraNd on real digits: finite, deterministic per seed, GraNd equal to a loop."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from examples.pruning_trainer.data import SyntheticFeatures, digits, synthetic
from examples.pruning_trainer.prune import keep_indices
from examples.pruning_trainer.scores import el2n, grand, score
from examples.pruning_trainer.train import TrainConfig, train


def test_scores_are_finite_and_deterministic_per_seed() -> None:
    split = digits()
    first = score(split, runs=2, cfg=TrainConfig(epochs=2), grand_chunk=300)
    again = score(split, runs=2, cfg=TrainConfig(epochs=2), grand_chunk=300)
    other = score(split, runs=2, cfg=TrainConfig(epochs=2), grand_chunk=300, first_seed=5)
    for values in (first.el2n, first.grand):
        assert values.shape == (split.n_train,)
        assert bool(values.isfinite().all()) and bool((values >= 0).all())
    assert torch.equal(first.el2n, again.el2n) and torch.equal(first.grand, again.grand)
    assert not torch.equal(first.el2n, other.el2n)
    # EL2N is bounded by sqrt(2) (two probability vectors), and it ranks examples like GraNd.
    assert float(first.el2n.max()) <= 2**0.5
    rank = torch.corrcoef(
        torch.stack(
            [first.el2n.argsort().argsort().float(), first.grand.argsort().argsort().float()]
        )
    )[0, 1]
    assert rank > 0.5


def test_grand_matches_a_per_example_loop() -> None:
    split = digits()
    model = train(split, torch.arange(split.n_train), seed=3, cfg=TrainConfig(epochs=2))
    features = _tensor(split.x_train)
    x, y = features[:24], split.y_train[:24]
    expected = []
    for xi, yi in zip(x, y, strict=True):
        model.zero_grad()
        F.cross_entropy(model(xi.unsqueeze(0)), yi.unsqueeze(0)).backward()
        squares = [p.grad.pow(2).sum() for p in model.parameters() if p.grad is not None]
        expected.append(torch.sqrt(torch.stack(squares).sum()))
    torch.testing.assert_close(grand(model, x, y), torch.stack(expected), rtol=1e-5, atol=1e-6)
    # and chunking does not change a score
    x, y = features[:100], split.y_train[:100]
    whole = grand(model, x, y)
    parts = torch.cat([grand(model, x[i : i + 7], y[i : i + 7]) for i in range(0, 100, 7)])
    torch.testing.assert_close(whole, parts, rtol=1e-5, atol=1e-6)


def test_el2n_is_the_softmax_error_norm() -> None:
    split = digits()
    model = train(split, torch.arange(split.n_train), seed=1, cfg=TrainConfig(epochs=1))
    x, y = _tensor(split.x_train)[:5], split.y_train[:5]
    with torch.no_grad():
        p = F.softmax(model(x), 1)
    expected = torch.stack([torch.linalg.norm(p[i] - F.one_hot(y[i], 10)) for i in range(5)])
    torch.testing.assert_close(el2n(model, x, y, 10), expected)


def test_keep_indices_hardest_easiest_random_and_per_class() -> None:
    scores = torch.tensor([0.9, 0.1, 0.8, 0.2, 0.7, 0.3])
    labels = torch.tensor([0, 0, 0, 1, 1, 1])
    assert keep_indices(scores, labels, 0.5, "hardest").tolist() == [0, 2, 4]
    assert keep_indices(scores, labels, 0.5, "easiest").tolist() == [1, 3, 5]
    per_class = keep_indices(scores, labels, 0.34, "hardest", per_class=True)
    assert per_class.tolist() == [0, 4]  # one of each class, not the two hardest overall
    rand = keep_indices(scores, labels, 0.5, "random", seed=3)
    assert (
        len(rand) == 3
        and rand.tolist() == keep_indices(scores, labels, 0.5, "random", seed=3).tolist()
    )


def test_synthetic_rows_are_a_function_of_the_index() -> None:
    lazy = synthetic(20000, 4)
    cached = synthetic(20000, 4, cache="anon")  # built in blocks of 4096 rows
    rows = torch.tensor([0, 7, 4095, 4096, 19999])
    torch.testing.assert_close(lazy.train_batch(rows), cached.train_batch(rows))
    assert isinstance(cached.x_train, torch.Tensor) and cached.x_train.shape == (20000, 4)
    assert not isinstance(lazy.x_train, torch.Tensor)


def _tensor(features: torch.Tensor | SyntheticFeatures) -> torch.Tensor:
    """The digits split holds its features as a tensor (synthetic ones may not)."""
    assert isinstance(features, torch.Tensor)
    return features
