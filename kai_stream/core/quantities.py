"""Kubernetes resource quantities ("500m", "16Gi", "1e3", 2.5) parsed exactly, and converted to our units.

``parse_quantity`` returns an exact ``Fraction`` in base units (cores, bytes, devices); the ``to_*`` helpers
round up to the integer units of the event schema (milli-units, bytes). Every error names the field.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["parse_quantity", "to_bytes", "to_milli"]

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_PATTERN = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")


def parse_quantity(value: str | int | float, field: str) -> Fraction:
    """Parse a Kubernetes quantity exactly; raise ``ValueError`` naming ``field`` when it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a quantity, got a boolean {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{field}: quantity must be finite, got {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected a quantity string or number, got {type(value).__name__}")
    text = value.strip()
    match = _PATTERN.match(text)
    if match is None:
        raise ValueError(f"{field}: {value!r} is not a valid quantity (e.g. '500m', '16Gi', '2', '1e3')")
    number, exponent, suffix = match.groups()
    amount = Fraction(number)
    if exponent:
        power = int(exponent[1:])
        if abs(power) > 30:
            raise ValueError(f"{field}: exponent of {value!r} is out of range")
        amount *= Fraction(10) ** power
    return amount * _SUFFIXES[suffix or ""]


def to_milli(value: str | int | float, field: str, *, allow_negative: bool = False) -> int:
    """A quantity in milli-units (CPU millicores, GPU milli-devices), rounded up."""
    amount = parse_quantity(value, field)
    if amount < 0 and not allow_negative:
        raise ValueError(f"{field}: quantity must not be negative, got {value!r}")
    return math.ceil(amount * 1000)


def to_bytes(value: str | int | float, field: str) -> int:
    """A memory quantity in bytes, rounded up."""
    amount = parse_quantity(value, field)
    if amount < 0:
        raise ValueError(f"{field}: quantity must not be negative, got {value!r}")
    return math.ceil(amount)
