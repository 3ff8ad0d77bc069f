"""How the explorer's data files hold a table's values (docs/tools.md, "Look at a run"): a
column as float16 with :data:`MANTISSA_BITS` of its 10 mantissa bits (3 significant digits),
high bytes then low bytes; each file a script that hands the page gzip-compressed bytes in a
string literal. Pure functions; :mod:`calibench.report.explorer` writes the files."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping, Sequence

import numpy as np

MANTISSA_BITS = 8  # of float16's 10: values to 3 significant digits


def round_significand(values: np.ndarray, bits: int) -> np.ndarray:
    """``values`` rounded (to nearest, ties to even) to ``bits`` significant bits after the
    leading one; NaN and the infinities as they are."""
    mantissa, exponent = np.frexp(np.asarray(values, dtype=float))  # mantissa in [0.5, 1)
    return np.ldexp(np.round(np.ldexp(mantissa, bits + 1)), exponent - bits - 1)


def encode_column(values: np.ndarray, mantissa_bits: int = MANTISSA_BITS) -> tuple[bytes, dict]:
    """A column as bytes and how to read them: float16 scaled by a power of two (``exp``, so
    that the largest magnitude sits below 2**15) with ``mantissa_bits`` of its 10 mantissa bits
    kept (a relative error of at most 2**-(mantissa_bits + 1), 0.2 % at 8), high bytes then low
    bytes (they compress better apart); float32 where float16's exponent cannot span the column."""
    v = np.asarray(values, dtype=float)
    finite = np.isfinite(v)
    mags = np.abs(v[finite & (v != 0)])
    if mags.size and mags.max() / mags.min() > 2.0 ** 28:
        return v.astype("<f4").tobytes(), {"enc": "f32"}
    exp = int(math.ceil(math.log2(mags.max() / 2.0 ** 15))) if mags.size else 0
    with np.errstate(invalid="ignore"):
        rounded = np.where(finite, round_significand(v, mantissa_bits), v)
    half = (rounded / 2.0 ** exp).astype("<f2").view("<u2")  # exact, but for subnormals (below 2**-14)
    planes = half.astype("<u2").view(np.uint8).reshape(-1, 2).T
    return planes.tobytes(), {"enc": "f16", "exp": exp}


def decode_column(data: bytes, meta: Mapping, n: int) -> np.ndarray:
    """The values :func:`encode_column` stored, as the page reads them."""
    if meta["enc"] == "f32":
        return np.frombuffer(data, "<f4", count=n).astype(float)
    planes = np.frombuffer(data, np.uint8).reshape(2, n)
    half = np.ascontiguousarray(planes.T).view("<u2").reshape(n)
    return half.view("<f2").astype(float) * 2.0 ** meta["exp"]


def js_binary_string(data: bytes) -> bytes:
    """``data`` as the body of a JS string literal in a file read as ``x-user-defined`` (bytes
    0x80-0xFF are characters U+F780-U+F7FF, the page keeps their low byte): only the quote, the
    backslash and the line ends are escaped, about 2 % more than the bytes, where base64 adds 33 %."""
    return (data.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
            .replace(b"\r", b"\\r"))


def binary_script(call: str, args: Sequence, payload: bytes) -> bytes:
    """A data file: ``CB.call(args..., "<gzip of payload>")``, the page's loader checks the length."""
    packed = gzip.compress(payload, compresslevel=6, mtime=0)
    head = "".join(json.dumps(a, separators=(",", ":"), allow_nan=False) + "," for a in args)
    return f"CB.{call}({head}{len(packed)},\"".encode() + js_binary_string(packed) + b'");\n'


def script(call: str, *args) -> str:
    """A data file of plain JSON arguments (the manifest): one call of the page's loader."""
    return f"CB.{call}({','.join(json.dumps(a, separators=(',', ':'), allow_nan=False) for a in args)});\n"
