"""The keys the summary groups and joins pods and jobs by: a 64-bit hash of the text (pod uid, job name).

Polars groups pods by an integer much faster than by their uid text (benchmarks/README.md). A second hash of the same
text with another seed checks each group: a group holding two different texts (two texts with one key) shows
two check values, and the summary is then computed again on the texts themselves (``Keys(hashed=False)``, the
check a constant). A pod without a job is its own job, so job names and pod uids are hashed alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

__all__ = ["HASHED", "TEXT", "Keys"]

_KEY_SEED = 0x6B61692D73747265
_CHECK_SEED = 0x616D2D6B65797321
_ROW = 1 << 64


@dataclass(frozen=True)
class Keys:
    """How text identities become group keys: hashed (default) or the text itself."""

    hashed: bool = True

    def key(self, column: str) -> pl.Expr:
        """The group key of ``column`` (null where the text is null)."""
        text = pl.col(column)
        return pl.when(text.is_not_null()).then(text.hash(_KEY_SEED)) if self.hashed else text

    def check(self, column: str) -> pl.Expr:
        """The check value of ``column``: equal texts give equal values (a constant when not hashed)."""
        text = pl.col(column)
        if not self.hashed:
            return pl.when(text.is_not_null()).then(pl.lit(0, pl.UInt64))
        return pl.when(text.is_not_null()).then(text.hash(_CHECK_SEED))

    def first(self, column: str) -> pl.Expr:
        """In a group_by of rows numbered by ``row``: the first non-null key of ``column`` (``unpack`` it). Hashed,
        the least (row, key) packed in 128 bits: polars' ``first(ignore_nulls=True)`` keeps a growing list per
        group and took about twice the memory traffic of the per-pod ``group_by``'s other aggregations."""
        if not self.hashed:
            return pl.col(column).first(ignore_nulls=True)
        return (pl.col("row").cast(pl.Int128) * _ROW + pl.col(column).cast(pl.Int128)).min()

    def unpack(self, column: str) -> pl.Expr:
        """The key aggregated by ``first``."""
        return (pl.col(column) % _ROW).cast(pl.UInt64) if self.hashed else pl.col(column)

    @staticmethod
    def group_check(check: str) -> list[pl.Expr]:
        """Aggregations of a group_by by key: the group's check value (``check``) and its maximum."""
        return [pl.col(check).min(), pl.col(check).max().alias(f"{check}_max")]

    @staticmethod
    def clash(check: str) -> pl.Expr:
        """After ``group_check``: whether the group holds two different texts."""
        return pl.col(check) != pl.col(f"{check}_max")


HASHED = Keys()
TEXT = Keys(hashed=False)
