"""The enrich stage: every module of this package is one enricher, found by listing it.

A module here declares `ENRICHER = EnricherSpec(place, make, after)`: `make` builds the
enricher from the agent's `EnricherParts` (None: not on this node), `place` is its position
in the run order (lower first; no two equal; gaps of 100 leave room between), and `after`
names the enrichers whose facts it reads (each must exist and have a lower place).  The
agent lists the package once at start-up (`discover`, `pkgutil` over `__path__`, so the
built wheel finds the same modules) and refuses to start on a module that breaks these
rules, naming it.  Enrichers run on the loop's thread, in that order, before the diagnosis;
one with a `close()` is closed at shutdown.  What an enricher needs from another thread
comes as a value (ARCHITECTURE.md, "who produces which value").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from oomwatch.daemon.config import DaemonConfig
from oomwatch.daemon.forecast_stage import ForecastBook
from oomwatch.stages import ClosingEnricher, Enricher, EventLogger, KubeLink

__all__ = [
    "EnricherOrderError",
    "EnricherParts",
    "EnricherSpec",
    "MakeEnricher",
    "RegisteredEnricher",
    "discover",
    "make_enrichers",
    "order",
]


@dataclass(frozen=True, slots=True)
class EnricherParts:
    """What the agent has made that an enricher may be made from."""

    config: DaemonConfig
    kube: KubeLink | None  # None: standalone
    forecasts: ForecastBook  # the forecast's warnings, as the pipeline recorded them
    probe_join: ClosingEnricher | None  # the probe's allocator join (None: no probe directory)
    log: EventLogger


MakeEnricher = Callable[[EnricherParts], Enricher | None]


@dataclass(frozen=True, slots=True)
class EnricherSpec:
    """One module's enricher: how to make it and where it runs."""

    place: int  # lower runs first; unique across the package
    make: MakeEnricher
    after: tuple[str, ...] = ()  # enrichers (module names) whose facts this one reads


@dataclass(frozen=True, slots=True)
class RegisteredEnricher:
    """A spec under its module's name."""

    name: str
    spec: EnricherSpec


class EnricherOrderError(ValueError):
    """A module of the enrichers package that the agent cannot place; the message names it."""


def discover(package: str = __name__) -> list[RegisteredEnricher]:
    """Every public module of `package` (names starting with `_` are helpers), in run order."""
    path = importlib.import_module(package).__path__
    found = []
    for info in pkgutil.iter_modules(path):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        spec = getattr(module, "ENRICHER", None)
        if not isinstance(spec, EnricherSpec):
            raise EnricherOrderError(
                f"enricher module {module.__name__} declares no ENRICHER = EnricherSpec(...)"
            )
        found.append(RegisteredEnricher(info.name, spec))
    return order(found)


def order(found: Iterable[RegisteredEnricher]) -> list[RegisteredEnricher]:
    """`found` by place, once each rule holds: unique names and places, `after` known and
    earlier."""
    ranked = sorted(found, key=lambda r: (r.spec.place, r.name))
    by_name: dict[str, RegisteredEnricher] = {}
    for previous, this in zip([None, *ranked], ranked, strict=False):
        if this.name in by_name:
            raise EnricherOrderError(f"two enrichers are named {this.name!r}")
        if previous is not None and previous.spec.place == this.spec.place:
            raise EnricherOrderError(
                f"enrichers {previous.name!r} and {this.name!r} both take place {this.spec.place}"
            )
        by_name[this.name] = this
    for this in ranked:
        for needed in this.spec.after:
            if needed not in by_name:
                raise EnricherOrderError(
                    f"enricher {this.name!r} runs after {needed!r}, which is not an enricher"
                    f" (known: {', '.join(sorted(by_name))})"
                )
            if by_name[needed].spec.place >= this.spec.place:
                raise EnricherOrderError(
                    f"enricher {this.name!r} (place {this.spec.place}) runs after {needed!r},"
                    f" whose place {by_name[needed].spec.place} is not lower"
                )
    return ranked


def make_enrichers(
    parts: EnricherParts, registered: Iterable[RegisteredEnricher] | None = None
) -> list[Enricher]:
    """The enrichers this node runs, in order (`registered`: `discover()`'s list)."""
    made = (r.spec.make(parts) for r in (discover() if registered is None else registered))
    return [enricher for enricher in made if enricher is not None]
