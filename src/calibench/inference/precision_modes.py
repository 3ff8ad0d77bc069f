"""The forward pass's arithmetic modes (config ``precision``, :mod:`calibench.inference.precision`)
and what a logits key records of one, without torch: the jobs that only write keys, labels
or a population (``calibench labels``, ``calibench population``) start without importing it."""

from __future__ import annotations

PRECISIONS = ("float32", "tf32x3", "tf32")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")


def precision_fields(precision: str) -> dict:
    """What the logits key records of the precision: nothing for ``float32`` (so logits stored
    before the setting existed stay valid), else the mode."""
    check_precision(precision)
    return {} if precision == "float32" else {"precision": precision}
