"""The datasets: scikit-learn's bundled digits, and a synthetic one sized by flags.

Nothing is downloaded.  Digits gets the 70/30 stratified split and standardisation used in
the measurements; the synthetic set exists for memory experiments, so its size is free and
its examples are a pure function of their index (generated per batch unless cached).  A
cache is held where the kernel charges it differently: anonymous memory (`anon`), a file
mapped shared (`file`: page cache, which the kernel can reclaim), or shared memory (`shm`).
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from typing import Literal

import torch

Storage = Literal["anon", "file", "shm"]


@dataclass(frozen=True)
class Split:
    """Train/test tensors; `x_train` may be generated per batch (see `SyntheticFeatures`)."""

    x_train: torch.Tensor | SyntheticFeatures
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int

    @property
    def n_train(self) -> int:
        return int(self.y_train.shape[0])

    @property
    def features(self) -> int:
        return int(self.x_test.shape[1])

    def train_batch(self, index: torch.Tensor) -> torch.Tensor:
        if isinstance(self.x_train, torch.Tensor):
            return self.x_train[index]
        return self.x_train.rows(index)


def digits(seed: int = 0) -> Split:
    """8x8 digits (1,797 images): 70/30 stratified split, features standardised on train."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(
        bunch.data, bunch.target, test_size=0.3, stratify=bunch.target, random_state=seed
    )
    x_train = torch.tensor(x_tr, dtype=torch.float32)
    x_test = torch.tensor(x_te, dtype=torch.float32)
    mean = x_train.mean(0)
    std = x_train.std(0).clamp_min(1e-6)
    return Split(
        x_train=(x_train - mean) / std,
        y_train=torch.tensor(y_tr, dtype=torch.long),
        x_test=(x_test - mean) / std,
        y_test=torch.tensor(y_te, dtype=torch.long),
        classes=10,
    )


class SyntheticFeatures:
    """Example i: its class mean plus a deterministic pseudo-noise, sin(i*freq + phase).

    Cheap to regenerate for any index, so the dataset costs no memory unless cached.
    """

    def __init__(self, features: int, classes: int, seed: int, noise: float = 1.5) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.means = torch.randn(classes, features, generator=gen)
        self.freqs = torch.rand(features, generator=gen) * 1000.0 + 1.0
        self.phases = torch.rand(features, generator=gen) * 2 * math.pi
        self.classes = classes
        self.noise = noise

    def labels(self, index: torch.Tensor) -> torch.Tensor:
        return index % self.classes

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        angle = index.to(torch.float64).unsqueeze(1) * self.freqs.to(torch.float64)
        noise = torch.sin(angle + self.phases.to(torch.float64)).to(torch.float32)
        return self.means[self.labels(index)] + self.noise * noise

    def materialise(
        self, index: torch.Tensor, storage: Storage = "anon", directory: str | None = None
    ) -> torch.Tensor:
        """All rows of `index` in one float32 tensor held in `storage`, built in blocks (no
        float64 copy of the whole set, whose temporaries would dwarf a small dataset)."""
        shape = (int(index.shape[0]), int(self.means.shape[1]))
        if storage == "file":
            out = _file_backed(shape, directory)
        else:
            out = torch.empty(shape)
            if storage == "shm":
                out.share_memory_()  # before a page is touched: every page is shmem
        for start in range(0, out.shape[0], _BLOCK_ROWS):
            out[start : start + _BLOCK_ROWS] = self.rows(index[start : start + _BLOCK_ROWS])
        return out


_BLOCK_ROWS = 4096  # x 512 features: 16 MiB float64 temporaries per block


def _file_backed(shape: tuple[int, int], directory: str | None) -> torch.Tensor:
    """A tensor on a file mapped shared: its pages are page cache charged to this cgroup.

    The file is unlinked once mapped, so a killed trainer leaves nothing behind.  On tmpfs
    (/dev/shm, an emptyDir of medium Memory) the same pages would be shmem instead.
    """
    fd, path = tempfile.mkstemp(prefix="pruning-rows-", dir=directory)
    try:
        os.ftruncate(fd, shape[0] * shape[1] * 4)
        flat = torch.from_file(path, shared=True, size=shape[0] * shape[1], dtype=torch.float32)
    finally:
        os.close(fd)
        os.unlink(path)
    return flat.view(shape)


def synthetic(
    examples: int,
    features: int,
    classes: int = 10,
    seed: int = 0,
    cache: Storage | None = None,
    shared: bool = False,
    cache_dir: str | None = None,
) -> Split:
    """`examples` training rows (+20 % test rows); `cache` materialises the training rows in
    that storage, `shared` in shared memory (for DataLoader workers); `cache_dir` is where
    a `file` cache goes (default: the temp directory)."""
    gen = SyntheticFeatures(features, classes, seed)
    train_index = torch.arange(examples)
    test_index = torch.arange(examples, examples + max(examples // 5, classes))
    x_train: torch.Tensor | SyntheticFeatures = gen
    if cache is not None or shared:
        x_train = gen.materialise(train_index, "shm" if shared else cache or "anon", cache_dir)
    return Split(
        x_train=x_train,
        y_train=gen.labels(train_index),
        x_test=gen.materialise(test_index),
        y_test=gen.labels(test_index),
        classes=classes,
    )
