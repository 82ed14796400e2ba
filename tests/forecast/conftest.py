"""Real-kernel fixtures for the forecast tests."""

from lab_fixtures import memcg_v1, scratch  # noqa: F401
