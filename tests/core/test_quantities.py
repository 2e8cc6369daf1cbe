"""Kubernetes quantities parse exactly; bad ones name the field."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kai_stream.core.quantities import parse_quantity, to_bytes, to_milli


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        (2, Fraction(2)),
        (0.25, Fraction(1, 4)),
        ("16Gi", Fraction(16 * 2**30)),
        ("1e3", Fraction(1000)),
        ("1.5k", Fraction(1500)),
        ("128974848", Fraction(128974848)),
        ("129e6", Fraction(129_000_000)),
        ("123Mi", Fraction(123 * 2**20)),
        ("100n", Fraction(1, 10**7)),
        (".5", Fraction(1, 2)),
    ],
)
def test_parses(text: str | int | float, value: Fraction) -> None:
    assert parse_quantity(text, "f") == value


@pytest.mark.parametrize("text", ["", "abc", "5 Gi", "1.2.3", "Gi", "5XB", "1e99999"])
def test_rejects_naming_the_field(text: str) -> None:
    with pytest.raises(ValueError, match=r"spec\.cpu"):
        parse_quantity(text, "spec.cpu")


def test_conversions_round_up_and_refuse_negatives() -> None:
    assert to_milli("250m", "f") == 250
    assert to_milli("1", "f") == 1000
    assert to_milli("0.0001", "f") == 1
    assert to_bytes("1Ki", "f") == 1024
    with pytest.raises(ValueError, match="negative"):
        to_milli("-1", "f")
    with pytest.raises(ValueError, match="negative"):
        to_bytes("-1", "f")
