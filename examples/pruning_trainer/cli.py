"""Command line of the pruning trainer, including the memory-scenario flags.

    python -m examples.pruning_trainer --json                       # the digits table
    python -m examples.pruning_trainer --dataset synthetic --synthetic-examples 4096 \\
        --features 512 --hidden 1024 --grand-chunk 2048 --score-only  # GraNd needs GiBs

The oomwatch probe runs when `--probe-dir` or `OOMWATCH_PROBE_DIR` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch

from examples.pruning_trainer.data import Split, digits, synthetic
from examples.pruning_trainer.experiment import ExperimentConfig, Row, run_experiment
from examples.pruning_trainer.model import mlp, parameter_count
from examples.pruning_trainer.prune import METHODS
from examples.pruning_trainer.scores import score
from examples.pruning_trainer.train import PhaseReport, no_report


def _floats(text: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in text.split(","))
    if not all(0 < v < 1 for v in values):
        raise argparse.ArgumentTypeError("fractions are between 0 and 1, e.g. 0.3,0.5,0.7")
    return values


def _methods(text: str) -> tuple[str, ...]:
    values = tuple(text.split(","))
    if not set(values) <= set(METHODS):
        raise argparse.ArgumentTypeError(f"methods are some of {','.join(METHODS)}")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m examples.pruning_trainer",
        description="EL2N/GraNd data pruning (Paul et al. 2021) with oomwatch memory scenarios.",
    )
    data = p.add_argument_group("data")
    data.add_argument("--dataset", choices=("digits", "synthetic"), default="digits")
    data.add_argument("--synthetic-examples", type=int, default=10000, metavar="N")
    data.add_argument("--features", type=int, default=256, help="synthetic features")
    data.add_argument("--classes", type=int, default=10, help="synthetic classes")
    exp = p.add_argument_group("experiment")
    exp.add_argument("--hidden", type=int, default=128)
    exp.add_argument("--score-runs", type=int, default=5, help="seeds averaged for scores")
    exp.add_argument("--score-epochs", type=int, default=10, help="epochs before scoring")
    exp.add_argument("--retrain-epochs", type=int, default=100)
    exp.add_argument("--seeds", type=int, default=3, help="retraining seeds per cell")
    exp.add_argument("--fractions", type=_floats, default=(0.3, 0.5, 0.7), help="pruned")
    exp.add_argument("--methods", type=_methods, default=METHODS)
    exp.add_argument("--per-class", action="store_true", help="prune each class equally")
    exp.add_argument("--batch-size", type=int, default=64)
    exp.add_argument("--lr", type=float, default=1e-3)
    exp.add_argument("--score-only", action="store_true", help="stop after scoring")
    exp.add_argument("--no-full", action="store_true", help="skip the full-data baseline")
    exp.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: 1 for digits, whose MLP is too small to "
        "gain from more; up to 2 for synthetic)",
    )
    exp.add_argument("--json", action="store_true", help="print the table as JSON")
    exp.add_argument(
        "--device", default="cpu", help="torch device for model and batches, e.g. cuda"
    )
    mem = p.add_argument_group("memory scenarios")
    mem.add_argument(
        "--grand-chunk",
        type=int,
        default=256,
        metavar="N",
        help="examples per vmapped GraNd pass (N x parameters floats at once)",
    )
    mem.add_argument(
        "--leak-mb-per-step",
        type=float,
        default=0.0,
        metavar="MB",
        help="keep a tensor of MB alive per training step",
    )
    mem.add_argument(
        "--min-step-s",
        type=float,
        default=0.0,
        metavar="S",
        help="make each training step take at least S seconds, as a real model's does (with"
        " --leak-mb-per-step: a leak at a real pace rather than a burst)",
    )
    mem.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    mem.add_argument(
        "--shm",
        action="store_true",
        help="put the training rows in shared memory for the workers (shmem)",
    )
    mem.add_argument(
        "--cache-dataset",
        nargs="?",
        const="anon",
        choices=("anon", "file"),
        default=None,
        help="hold the synthetic training rows (else made per batch) in anonymous memory "
        "(anon, the default: the kernel cannot reclaim it without swap) or in a file mapped "
        "shared (file: page cache, which it can write back and reclaim instead of killing)",
    )
    mem.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="where --cache-dataset file writes its rows (default: the temp directory; "
        "on tmpfs they are shmem, not page cache)",
    )
    p.add_argument(
        "--probe-dir",
        default=os.environ.get("OOMWATCH_PROBE_DIR"),
        help="run the oomwatch probe writing here (default $OOMWATCH_PROBE_DIR)",
    )
    return p


def load(args: argparse.Namespace) -> Split:
    if args.dataset == "synthetic":
        return synthetic(
            args.synthetic_examples,
            args.features,
            args.classes,
            cache=args.cache_dataset,
            shared=args.shm,
            cache_dir=args.cache_dir,
        )
    split = digits()
    if args.shm:
        assert isinstance(split.x_train, torch.Tensor)
        split.x_train.share_memory_()
    return split


def _print_table(rows: list[Row], seeds: int, out: Any) -> None:
    print(
        f"{'pruned':>6}  {'method':<8} {'kept':>6}  accuracy % (mean ± std, {seeds} seeds)",
        file=out,
    )
    for row in rows:
        print(
            f"{row.fraction:>6.0%}  {row.method:<8} {row.kept:>6}  "
            f"{row.mean * 100:6.2f} ± {row.std * 100:.2f}",
            file=out,
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.shm and args.workers == 0:
        parser().error("--shm feeds DataLoader workers: give --workers N")
    if args.shm and args.cache_dataset == "file":
        parser().error("--shm and --cache-dataset file are two places for the same rows")
    threads = args.threads or (1 if args.dataset == "digits" else min(2, os.cpu_count() or 1))
    torch.set_num_threads(max(threads, 1))
    report: PhaseReport = no_report
    if args.probe_dir:
        import oomwatch.probe

        report = oomwatch.probe.start(args.probe_dir).set_phase
    report("load_data")
    split = load(args)
    cfg = ExperimentConfig(
        score_runs=args.score_runs,
        score_epochs=args.score_epochs,
        retrain_epochs=args.retrain_epochs,
        seeds=args.seeds,
        fractions=args.fractions,
        methods=args.methods,
        per_class=args.per_class,
        batch_size=args.batch_size,
        lr=args.lr,
        hidden=args.hidden,
        grand_chunk=args.grand_chunk,
        workers=args.workers,
        leak_mb_per_step=args.leak_mb_per_step,
        min_step_s=args.min_step_s,
        device=args.device,
    )
    params = parameter_count(mlp(split.features, args.hidden, split.classes, 0))
    print(
        f"{args.dataset}: {split.n_train} training examples, {params} parameters; GraNd "
        f"chunk {args.grand_chunk} needs ~{args.grand_chunk * params * 4 / 2**20:.0f} MiB",
        file=sys.stderr,
    )
    if args.score_only:
        scores = score(
            split, cfg.score_runs, cfg.train_config(cfg.score_epochs), cfg.grand_chunk, report
        )
        rows: list[Row] = []
    else:
        scores, rows = run_experiment(split, cfg, report, include_full=not args.no_full)
    summary = {
        name: {"mean": float(s.mean()), "max": float(s.max()), "finite": bool(s.isfinite().all())}
        for name, s in (("el2n", scores.el2n), ("grand", scores.grand))
    }
    report("done")
    if args.json:
        json.dump(
            {
                "dataset": args.dataset,
                "train_examples": split.n_train,
                "config": {k: v for k, v in vars(args).items() if k != "probe_dir"},
                "scores": summary,
                "rows": [r.to_dict() for r in rows],
            },
            sys.stdout,
            indent=2,
        )
        print()
    elif rows:
        _print_table(rows, cfg.seeds, sys.stdout)
    else:
        print(json.dumps(summary))
    return 0
