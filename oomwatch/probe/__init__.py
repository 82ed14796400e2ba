"""In-process allocator probe and its flight recorder, and the daemon's side of reading it.

`start()` is all a training script needs; `oomwatch.probe.join` is what the daemon uses.
The training side (`oomwatch.probe.probe`) is imported at its first use (PEP 562
`__getattr__`): the agent imports this package for its schema and reader, and the probe's
sampler, socket server and CUDA snapshot would cost it ~1 MiB RSS for nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oomwatch.probe.probe import Probe, start

__all__ = ["Probe", "start"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from oomwatch.probe import probe

        return getattr(probe, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
