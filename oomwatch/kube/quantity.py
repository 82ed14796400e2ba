"""Kubernetes resource quantities ("512Mi", "1G", "1.5e9", "100m") as whole bytes.

Memory requests and limits arrive as quantity strings; the Event note and the incident
compare them with the kernel's kB figures, so they are parsed exactly (no float drift for
the common suffixes) and rounded up like the API server does for memory.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A quantity string that is not valid Kubernetes syntax."""


def parse_quantity_bytes(text: str) -> int:
    """Parse a quantity into bytes, rounding fractions up (as memory quantities are)."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(f"not a Kubernetes quantity: {text!r}")
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise QuantityError(f"not a Kubernetes quantity: {text!r}") from exc
    if match.group("bin"):
        value = number * _BINARY[match.group("bin")]
    elif match.group("exp"):
        exponent = int(match.group("exp")[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"quantity exponent out of range: {text!r}")
        value = number.scaleb(exponent)
    else:
        value = number * _DECIMAL[match.group("dec") or ""]
    return math.ceil(value)


def quantity_bytes_or_none(value: object) -> int | None:
    """Like `parse_quantity_bytes`, but None for absent or malformed values (API input)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    try:
        return parse_quantity_bytes(value)
    except QuantityError:
        return None
