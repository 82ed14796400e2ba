"""The store-version helpers: the uncapped store holds every victim, as older agents wrote."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from support.store_versions import uncapped_group_kill_store


def test_the_uncapped_store_keeps_every_victim_of_each_group_kill(tmp_path: Path) -> None:
    uncapped_group_kill_store(tmp_path, incidents=1)
    [database] = tmp_path.glob("*.db")
    with sqlite3.connect(database) as db:
        [(data,)] = db.execute("SELECT data FROM incidents").fetchall()
    doc = json.loads(data)
    assert doc["group_kill"] and len(doc["victims"]) == 20_000 and len(doc["tasks"]) == 300
