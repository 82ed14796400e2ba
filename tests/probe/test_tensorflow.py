"""The TensorFlow adapter, against a real TensorFlow (tensorflow-cpu in CI)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("tensorflow not installed (pip install tensorflow-cpu)", allow_module_level=True)

# Run in a child: TensorFlow takes seconds and hundreds of MB to import, and stays imported.
SCRIPT = """
import json, sys
import tensorflow as tf
import oomwatch.probe
from oomwatch.probe.reader import ProbeDirReader

probe = oomwatch.probe.start(sys.argv[1], excepthooks=False)
probe.set_phase("predict", step=3, batch_size=1 << 40)
try:
    with probe.catch_oom():
        tf.zeros([1 << 40], dtype=tf.float32)  # 4 TiB: refused by the allocator, not the kernel
except tf.errors.ResourceExhaustedError:
    pass
probe.stop()
record = ProbeDirReader(probe.path.parent).read_one(probe.path.name)
ev = record.events[0]
print(json.dumps({"framework": ev.framework, "requested": ev.requested_bytes,
                  "device": ev.device, "phase": ev.phase, "message": ev.message,
                  "tf_sample": record.samples[-1].tf, "events": len(record.events)}))
"""


def test_resource_exhausted_is_recorded_and_memory_info_is_safe(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["events"] == 1 and result["framework"] == "tensorflow"
    assert "OOM when allocating tensor with shape[1099511627776]" in result["message"]
    assert result["requested"] == 4 << 40 and result["device"] == "CPU:0"
    assert result["phase"] == "predict"
    # get_memory_info supports GPUs/TPUs; on CPU-only TensorFlow it raises, so no tf sample.
    tf_sample = result["tf_sample"]
    assert tf_sample is None or {"device", "current_bytes", "peak_bytes"} <= set(tf_sample)
