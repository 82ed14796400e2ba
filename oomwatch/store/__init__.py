"""The incident store: one SQLite file per node (`database.IncidentStore`), bounded in bytes
and per pod (`limits`), never crash-looping on a file it cannot use (`upgrade` decides which
agent may open which schema; `opening` moves an unusable file aside), keeping what
`retention` says (age, counts, each pod's share).  `schema` holds the migrations, `keys`
how one recorded kill is told from another, `checkpoint` the agent's restart state,
`forecasts` the pre-OOM warnings table.

`IncidentStore` and its constants are importable from here; they load on first use, so the
pure modules that only need `limits` (the decoder) do not import SQLite.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oomwatch.store.checkpoint import Checkpoint as Checkpoint
    from oomwatch.store.database import DB_NAME as DB_NAME
    from oomwatch.store.database import IncidentStore as IncidentStore
    from oomwatch.store.opening import StoreError as StoreError
    from oomwatch.store.retention import CGROUP_SHARE_FORECASTS as CGROUP_SHARE_FORECASTS
    from oomwatch.store.retention import MAX_FORECASTS as MAX_FORECASTS
    from oomwatch.store.retention import POD_SHARE_KERNEL_KILLS as POD_SHARE_KERNEL_KILLS
    from oomwatch.store.retention import POD_SHARE_OTHER_INCIDENTS as POD_SHARE_OTHER_INCIDENTS
    from oomwatch.store.schema import SCHEMA_VERSION as SCHEMA_VERSION

_HOMES = {
    "Checkpoint": "oomwatch.store.checkpoint",
    "CGROUP_SHARE_FORECASTS": "oomwatch.store.retention",
    "DB_NAME": "oomwatch.store.database",
    "MAX_FORECASTS": "oomwatch.store.retention",
    "POD_SHARE_KERNEL_KILLS": "oomwatch.store.retention",
    "POD_SHARE_OTHER_INCIDENTS": "oomwatch.store.retention",
    "IncidentStore": "oomwatch.store.database",
    "StoreError": "oomwatch.store.opening",
    "SCHEMA_VERSION": "oomwatch.store.schema",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'oomwatch.store' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
