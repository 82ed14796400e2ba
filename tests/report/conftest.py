"""Fixtures for the report tests: `report(...)` runs `oomwatch report` in-process, `corpus`
is the public corpus (support.report_cli)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.report_cli import CORPUS, ReportRun, Run, corpus_files

from oomwatch.cli import main as cli_main


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> ReportRun:
    def run(*args: str) -> Run:
        rc = cli_main(["report", *args])
        captured = capsys.readouterr()
        return Run(rc, captured.out, captured.err)

    return run


@pytest.fixture
def corpus() -> Path:
    corpus_files()
    return CORPUS
