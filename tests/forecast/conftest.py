"""Real-kernel fixtures for the forecast tests."""

from oomwatch.lab.fixtures import memcg_v1, scratch  # noqa: F401
