"""Running the real `oomwatch report` entry point in tests (`Run`, its `--json` validated)
and the public corpus of kernel logs it reads (`corpus_files`, `corpus_file`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.contract import validate_report

# The repository's copy of the public corpus (identical logs to the shared one).
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


def corpus_files() -> list[Path]:
    """Every corpus log; a missing corpus is an error, never an empty (skipped) test set."""
    files = sorted(CORPUS.glob("*.log"))
    if not files:
        raise RuntimeError(f"public corpus not found: no *.log in {CORPUS}")
    return files


@dataclass
class Run:
    rc: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        """The `--json` document, validated against schemas/report.schema.json."""
        doc: dict[str, Any] = json.loads(self.out)
        validate_report(doc)
        return doc


ReportRun = Callable[..., Run]  # `report("--json", path)`: oomwatch report in-process


def corpus_file(corpus: Path, prefix: str) -> str:
    [path] = corpus.glob(f"{prefix}-*.log")
    return str(path)


def section_order(block: str, labels: list[str]) -> list[int]:
    """Line index of each label's first row (`  VERDICT`, `  findings:`, ...) in a text block."""
    lines = block.splitlines()
    return [
        next(n for n, line in enumerate(lines) if line.startswith(f"  {label}")) for label in labels
    ]
