"""Headless Debian Chromium for the report tests: load a page offline, dump its DOM or take a
screenshot; a test without Chromium is skipped with the reason."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

# Where `OOMWATCH_SCREENSHOTS=DIR pytest ...` leaves the screenshots for a person to look at.
KEEP_DIR = os.environ.get("OOMWATCH_SCREENSHOTS")


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium not installed (apt-get install chromium)")


def browse(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )


def dom(binary: str, tmp_path: Path, page: Path) -> str:
    result = browse(binary, tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.decode()


def screenshot(binary: str, tmp_path: Path, page: Path, width: int, height: int) -> Path:
    """A PNG of the page in a `width` x `height` window (kept in KEEP_DIR when set)."""
    shot = tmp_path / f"{page.stem}-{width}x{height}.png"
    result = browse(
        binary,
        tmp_path / f"profile-{shot.stem}",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--screenshot={shot}",
        page.as_uri(),
    )
    if result.returncode != 0 or not shot.is_file():
        pytest.fail(f"chromium could not take the screenshot: {result.stderr[-2000:]!r}")
    if KEEP_DIR:
        Path(KEEP_DIR).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(KEEP_DIR) / shot.name)
    return shot
