"""In-process allocator probe and its flight recorder, and the daemon's side of reading it.

`start()` is all a training script needs; `oomwatch.probe.join` is what the daemon uses.
"""

from oomwatch.probe.probe import Probe, start

__all__ = ["Probe", "start"]
