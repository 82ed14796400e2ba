"""The CI-sized pruning run on digits: the paper's claim at a size CI can afford (~10 s)."""

from __future__ import annotations

import json

import pytest

from examples.pruning_trainer.cli import main
from examples.pruning_trainer.data import digits
from examples.pruning_trainer.experiment import ExperimentConfig, run_experiment


@pytest.mark.slow
def test_el2n_pruning_keeps_accuracy_and_hardest_beat_easiest() -> None:
    cfg = ExperimentConfig(
        score_runs=3,
        score_epochs=10,
        retrain_epochs=50,
        seeds=3,
        fractions=(0.5,),
        methods=("el2n", "random", "easiest"),
    )
    scores, rows = run_experiment(digits(), cfg, include_full=False)
    by_method = {row.method: row for row in rows}
    assert {r.kept for r in rows} == {628}
    el2n, rand, easiest = (by_method[m].mean * 100 for m in ("el2n", "random", "easiest"))
    assert el2n >= rand - 0.5, (el2n, rand)
    assert el2n - easiest >= 3.0, (el2n, easiest)
    assert bool(scores.el2n.isfinite().all()) and bool(scores.grand.isfinite().all())


def test_json_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "--score-runs",
            "1",
            "--score-epochs",
            "1",
            "--retrain-epochs",
            "1",
            "--seeds",
            "2",
            "--fractions",
            "0.3,0.7",
            "--methods",
            "el2n,grand,random",
            "--json",
        ]
    )
    assert code == 0
    table = json.loads(capsys.readouterr().out)
    cells = [(r["fraction"], r["method"]) for r in table["rows"]]
    assert cells == [
        (0.0, "full"),
        (0.3, "el2n"),
        (0.3, "grand"),
        (0.3, "random"),
        (0.7, "el2n"),
        (0.7, "grand"),
        (0.7, "random"),
    ]
    for row in table["rows"]:
        assert len(row["accuracies"]) == 2
        assert 0 <= row["mean_accuracy"] <= 100 and row["std_accuracy"] >= 0
    assert table["scores"]["grand"]["finite"] and table["scores"]["el2n"]["finite"]
