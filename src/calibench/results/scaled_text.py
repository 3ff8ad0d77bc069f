"""Text of a float column written divided by an integer, read back multiplied by it, with
every float64 coming back bit for bit (docs/tools.md, "Exchanging results with the published
calibration dataset (`--format tao2024`)").

``x / k * k`` in float64 is not always ``x`` (for k = 10, two neighbouring floats can even give
the same quotient), so the quotient is written as decimal text: the shortest float repr where
that comes back exactly, else the quotient to 21 significant digits, and read back by decimal
multiplication rounded once to float64. Missing values stay missing; other readers parse the
text as ordinary numbers.
"""

from __future__ import annotations

import decimal
import math

import numpy as np
import pandas as pd

_DIGITS = decimal.Context(prec=21)  # 21 significant digits: far below float64's half ulp (1.1e-16)
_EXACT = decimal.Context(prec=80)  # a product of a 21-digit text and an integer, exactly


def _times(text: str, k: int) -> float:
    return float(_EXACT.multiply(decimal.Decimal(text), decimal.Decimal(k)))


def divided_text(values, k: int) -> pd.Series:
    """``values / k`` as text that :func:`multiplied_values` turns back into ``values`` exactly;
    None (an empty CSV cell) where a value is missing."""
    out = []
    for x in np.asarray(values, dtype=float):
        if math.isnan(x):
            out.append(None)
        elif math.isinf(x) or x == 0.0:
            out.append(repr(float(x)))
        else:
            short = repr(float(x / k))
            out.append(short if _times(short, k) == x
                       else format(_DIGITS.divide(decimal.Decimal(float(x)), decimal.Decimal(k)), "g"))
    return pd.Series(out, dtype=object)


def multiplied_values(texts, k: int) -> np.ndarray:
    """The float64 nearest to each text times ``k`` (decimal arithmetic, one rounding); NaN where
    a cell is missing. A cell that is not a decimal number raises ValueError naming it."""
    out = np.empty(len(texts), dtype=float)
    for i, text in enumerate(texts):
        if text is None or (isinstance(text, float) and math.isnan(text)) or not str(text).strip():
            out[i] = math.nan
            continue
        try:
            out[i] = _times(str(text).strip(), k)
        except decimal.InvalidOperation:
            raise ValueError(f"row {i}: not a number: {text!r}") from None
    return out
