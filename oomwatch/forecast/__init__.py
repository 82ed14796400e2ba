"""Pre-OOM warning: time to a container's memory limit from its sampled timeline
and the kernel's pressure reports, as pure functions; the agent only wires them."""

from oomwatch.forecast.model import (
    DEFAULT_HORIZON_S,
    Forecast,
    Growth,
    Outlook,
    Pressure,
    outlook,
    unreclaimable_bytes,
)

__all__ = [
    "DEFAULT_HORIZON_S",
    "Forecast",
    "Growth",
    "Outlook",
    "Pressure",
    "outlook",
    "unreclaimable_bytes",
]
