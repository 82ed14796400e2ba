"""On a GPU: GraNd with too large a chunk runs the GPU out of memory; the probe records the
CUDA OOM (phase, parsed sizes) and the allocator statistics of the samples before it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oomwatch.probe.reader import ProbeDirReader

REPO = Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason=f"CUDA not available (torch {torch.__version__}): the GPU path is not exercised here",
)


def test_cuda_oom_in_grand_scoring_is_recorded(tmp_path: Path) -> None:
    # 20,000 examples x 3.26M parameters x 4 bytes = 260 GB of per-example gradients at once.
    args = [
        "--dataset",
        "synthetic",
        "--synthetic-examples",
        "20000",
        "--features",
        "784",
        "--hidden",
        "4096",
        "--score-runs",
        "1",
        "--score-epochs",
        "1",
        "--grand-chunk",
        "20000",
        "--score-only",
        "--device",
        "cuda",
        "--probe-dir",
        str(tmp_path),
    ]
    run = subprocess.run(
        [sys.executable, "-m", "examples.pruning_trainer", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode != 0 and "OutOfMemoryError" in run.stderr, run.stderr[-2000:]
    (record,) = ProbeDirReader(tmp_path).read_all()
    (event,) = record.events
    assert event.framework == "torch-cuda" and event.phase == "grand_scoring"
    assert event.requested_bytes is not None and event.free_bytes is not None
    assert event.device is not None and event.device.startswith("cuda:")
    cuda = [s.cuda for s in record.samples if s.cuda]
    assert cuda and int(cuda[-1]["reserved_bytes"]) >= int(cuda[-1]["allocated_bytes"]) > 0
