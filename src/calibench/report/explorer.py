"""``calibench explore``: an offline, interactive explorer of a finished run (issue 26).

Writes ``{results}/explorer/index.html`` and, beside it, the page's script, the plotting
library and the data, all as files that a browser loads from the folder itself (opened as
``file://``, no server, nothing fetched from elsewhere):

* ``plotly.min.js`` as the ``plotly`` Python package ships it (plotly.js: WebGL scatter
  plots, ``scattergl``, draw 32,768 points and stay responsive; heatmaps with hover);
* ``explorer.js``, the page's code: the files of ``explorer_js/`` in this package, one per
  concern (:data:`PAGE_SCRIPTS`), as one closure (:func:`page_script`);
* ``data/manifest.js``: the tables, their columns and how each column is encoded;
* ``data/{table}/rows.js``: each row's index, arch string and (TSS) the row of its measured
  isomorphism class; ``data/{table}/c{k}.js``: one column, loaded when the page shows it;
  ``data/{table}/rel{b}.js``: the reliability bins (from the shards) of a block of networks in a
  binary form (:func:`encode_reliability_block`), loaded when a point of that block is clicked;
  ``data/kendall.js``: the Kendall matrices;
  ``data/{table}/a{k}.js`` and ``k{k}.js``: what a row is (:func:`architecture_columns`),
  numeric (a TSS cell's operation counts) and categorical (uint16 codes into the manifest's
  ``categories``: a TSS edge's operation, an SSS layer's channels, the dataset, metadata);
  ``data/{table}/b{k}.js`` and ``d{k}.js``: with ``--compare RUN_B`` (issue 37, item 4), each
  column that differs between the runs as run B has it and as B - A, on run A's rows
  (:func:`compare_columns`).

A browser may not read files next to a ``file://`` page with ``fetch``, but it runs the
scripts the page names, so every data file is a script that hands its payload to the page
(``CB.col(...)``): gzip-compressed bytes in a string literal of a script read as
``x-user-defined`` (:func:`js_binary_string`). Columns are stored for the measured rows only
(a TSS table's rows share their class representative's values), as float16 with 8 of its
10 mantissa bits (:func:`encode_column`): every value to 3 significant digits, a relative
error of at most 0.2 %, enough for any plot; exact values are in the tables (SQL).
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import struct
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from calibench import integrity
from calibench.atomic import atomic_write
from calibench.analysis.registry import output_path
from calibench.analysis.tables import stage_order
from calibench.layout import (explorer_dir, explorer_page, explorer_sums, result_tables, shard_path, target_name)
from calibench.results.archstr import EDGE_NAMES, TSS_OPS, parse_sss, tss_edge_ops
from calibench.results.tables import check_result_table
from calibench.report.explorer_compare import compare_columns, compare_manifest
# the encoding's names, as the tests, benchmarks and the page's own readers reach them
from calibench.report.explorer_encoding import (MANTISSA_BITS, binary_script, decode_column,  # noqa: F401
                                                encode_column, round_significand, script)
from calibench.vocabulary import STAGES

log = logging.getLogger(__name__)

BLOCK = 256  # networks per reliability file
# Columns of a table that say what a row is (shown with a point, never plotted).
IDENTITY = ("space", "hp", "dataset", "arch_index", "measured_by", "arch_str", "seed", "nats_index")
# Provenance columns: strings and file facts, nothing to plot.
NOT_PLOTTED = ("config_hash", "logits_key", "logits_file", "source_bytes", "source_mtime", "calibench_version")
DEFAULT_AXES = ("accuracy", "pre_ece_15", "params")
MAX_CATEGORIES = 64  # a string column with more distinct values is not offered as a category
MISSING_CODE = 0xFFFF  # a categorical row without a category (an unparsable arch string, a missing value)
PLOTLY_JS = ("plotly", "package_data/plotly.min.js")


# ---------------------------------------------------------------- what the tables hold

def plotted_columns(names: Sequence[str], dtypes: Mapping[str, str]) -> list[str]:
    """The columns a scatter may show: numeric, not identity or provenance strings."""
    return [n for n in names if n not in IDENTITY and n not in NOT_PLOTTED and dtypes.get(n, "") in "fiub"]


def bin_count(name: str) -> int | None:
    """The bin count of a binned metric's column (``pre_ece_15``: 15; the metric registry's
    reading), None for any other column."""
    from calibench.metrics.registry import column

    found = column(name)
    return found.bins if found is not None else None


def kept_bins(table_bins: Sequence[int], bins: Sequence[int] | str | None) -> list[int]:
    """The bin counts of a table's binned metrics that the page holds: ``bins`` a list (those
    of them the table has), ``"all"``, or ``None`` / ``"auto"``: those of
    :data:`~calibench.config.settings.EXPLORER_BINS` it has, or all if it has none of them."""
    from calibench.config.settings import auto_explorer_bins

    if bins in (None, "auto"):
        bins = auto_explorer_bins(table_bins)
    if bins == "all":
        return sorted(table_bins)
    wanted = {int(b) for b in bins}
    return sorted(b for b in table_bins if b in wanted)


def bins_option(text: str) -> list[int] | str:
    """``calibench explore --bins``: bin counts (``5,15,100``), or ``all``, or ``auto`` alone
    (what :func:`kept_bins` takes); ValueError naming the wrong part."""
    asked = [b.strip() for b in text.split(",")]
    if any(b in ("all", "auto") for b in asked):
        if len(asked) > 1:
            raise ValueError("--bins takes bin counts (5,15,100), or all, or auto, alone")
        return asked[0]
    wrong = [b for b in asked if not b.isdigit() or int(b) < 1]
    if wrong:
        raise ValueError(f"--bins {wrong[0]}: not a bin count (a positive integer), all, or auto")
    return [int(b) for b in asked]


def column_group(name: str) -> str:
    """Where a column sits in the page's lists: its stage, or ``network`` (accuracy, params...)."""
    stage = name.split("_", 1)[0]
    return stage if stage in STAGES and "_" in name else "network"


def _codes(values: Sequence, order: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """Category names (``order``'s, else the values' own, sorted) and each value's code (uint16;
    :data:`MISSING_CODE` for None)."""
    names = list(order) if order is not None else sorted({v for v in values if v is not None})
    code_of = {name: k for k, name in enumerate(names)}
    return names, np.array([code_of.get(v, MISSING_CODE) if v is not None else MISSING_CODE for v in values],
                           dtype="<u2")


def _parsed(parse, arch_strs: Sequence[str]) -> list:
    """``parse`` of each arch string, None where it is malformed (``ValueError``)."""
    out = []
    for a in arch_strs:
        try:
            out.append(parse(a))
        except ValueError:
            out.append(None)
    return out


def architecture_columns(frame: pd.DataFrame) -> tuple[dict[str, np.ndarray], list[tuple[str, list[str], np.ndarray]]]:
    """What a table's rows are, as columns to colour, split or sort by (issue 37, item 3):
    numeric ``{name: values}`` (a TSS cell's count of each operation, ``ops_nor_conv_3x3``, 0-6)
    and categorical ``[(name, categories, codes)]``: a TSS cell's operation on each edge
    (``edge_1<-0``, ..., in :data:`~calibench.results.archstr.EDGE_NAMES` order, categories in
    ``TSS_OPS`` order), an SSS network's channels per layer (``channels_1`` ... ``channels_5``),
    the dataset, and a population's own string columns (metadata such as ``family``) with at
    most :data:`MAX_CATEGORIES` values. A malformed arch string leaves its row without a category."""
    numeric: dict[str, np.ndarray] = {}
    categorical: list[tuple[str, list[str], np.ndarray]] = []
    space = str(frame["space"].iloc[0]) if "space" in frame and len(frame) else ""
    arch = frame["arch_str"].astype(str).tolist() if "arch_str" in frame else []
    if space == "tss" and arch:
        edges = _parsed(tss_edge_ops, arch)
        for e, edge in enumerate(EDGE_NAMES):
            categorical.append((f"edge_{edge}",) + _codes([ops[e] if ops else None for ops in edges], TSS_OPS))
        for op in TSS_OPS:
            numeric[f"ops_{op}"] = np.array([ops.count(op) if ops else np.nan for ops in edges], dtype=float)
    elif space == "sss" and arch:
        layers = _parsed(parse_sss, arch)
        for k in range(5):
            values = [str(c[k]) if c else None for c in layers]
            order = sorted({v for v in values if v is not None}, key=int)
            categorical.append((f"channels_{k + 1}",) + _codes(values, order))
    if "dataset" in frame:
        categorical.append(("dataset",) + _codes(frame["dataset"].astype(str).tolist()))
    for name in frame.columns:
        if name in IDENTITY or name in NOT_PLOTTED or frame[name].dtype.kind not in "OSUb":
            continue
        values = [None if pd.isna(v) else str(v) for v in frame[name]]
        if 0 < len({v for v in values if v is not None}) <= MAX_CATEGORIES:
            categorical.append((name,) + _codes(values))
    return numeric, categorical


def _table_id(space: str, hp: str, dataset: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{target_name(space, hp)}_{dataset}")


def _hcs_columns(results: Path) -> pd.DataFrame | None:
    path = output_path(results, "hcs", "hcs")
    if not path.is_file():
        return None
    names = [n for n in pq.read_schema(path).names if n.startswith(("hcs_", "rank_hcs_"))]
    if not names:
        return None
    return pd.read_parquet(path, columns=["space", "hp", "dataset", "arch_index", *names])


# ---------------------------------------------------------------- reliability bins (from the shards)

def _reliability_of(path: Path, seed: int) -> dict | None:
    from calibench.results.shards import read_reliability

    try:
        found = read_reliability(path)
    except (OSError, ValueError, KeyError) as exc:  # a damaged shard: no diagram for it
        log.warning("explorer: no reliability bins from %s: %s", path, exc)
        return None
    rel = found.get(int(seed)) or (next(iter(found.values())) if found else None)
    if not rel:
        return None
    out = {}
    for stage, bins in rel.items():  # counts, mean confidence, accuracy as correct counts
        count = np.nan_to_num(np.asarray(bins["count"], float)).round().astype(np.int64)
        if not count.any():  # a stage without predictions (it failed): no diagram
            continue
        correct = (np.nan_to_num(np.asarray(bins["accuracy"], float)) * count).round().astype(np.int64)
        out[stage] = (count, np.asarray(bins["confidence"], float), correct)
    return out


REL_MAGIC = b"CBR2"


def expected_correct(count: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Each bin's correct count were its accuracy its mean confidence as stored, (i + q/255)/B:
    round(count (255 i + q) / (255 B)), in integers (the page computes the same)."""
    count, q = np.asarray(count, np.int64), np.asarray(q, np.int64)
    b = len(count)
    scale = 255 * b
    return (2 * count * (255 * np.arange(b) + q) + scale) // (2 * scale)


def encode_reliability_block(block: Mapping[int, Mapping[str, tuple]]) -> bytes:
    """The reliability bins of a block of networks, in the page's binary form (issue 37, item 7).

    ``block``: measured row -> stage -> (counts, mean confidences, correct counts), B equal-width
    bins each (:mod:`calibench.metrics.reliability`). Little-endian: ``CBR2``; uint8 W, the bytes
    of a stored number (2, or 4 where one exceeds 65,535); uint8 the number of stage names, each
    as uint8 length + ASCII; uint32 the networks; per network int32 its row, uint16 a mask of its
    stages (bit k: name k) and per stage uint16 B. Then the block's bins, all T of them in that
    order: the counts as W byte planes (T low bytes, then the next byte of each...), the correct
    counts as W byte planes of their zigzag difference from :func:`expected_correct` (0, 1, 2, 3
    ... for 0, -1, 1, -2 ...: small where a network is near calibrated), and T confidence bytes.
    A bin's mean confidence lies in its bin [i/B, (i+1)/B]; its byte q places it there:
    (i + q/255) / B, within 1/(510 B) of the value (empty bins: 0, no confidence). Planes and
    differences take a fifth off the gzip'd size of the plain numbers (BENCHMARKS.md)."""
    names = stage_order({stage for stages in block.values() for stage in stages})
    if len(names) > 16:  # a network's stages are a 16-bit mask
        raise ValueError(f"reliability bins of {len(names)} stages ({', '.join(names)}): at most 16 fit the form")
    head, counts, residuals, places = [], [], [], []
    for row in sorted(block):
        stages = block[row]
        head.append(struct.pack("<iH", int(row), sum(1 << k for k, n in enumerate(names) if n in stages)))
        for name in names:
            if name not in stages:
                continue
            count, conf, correct = stages[name]
            count = np.asarray(count).astype(np.int64)
            b = len(count)
            place = np.nan_to_num(np.asarray(conf, float) * b - np.arange(b), nan=0.0)
            q = np.where(count > 0, np.clip(np.round(place * 255), 0, 255), 0).astype(np.uint8)
            r = np.asarray(correct).astype(np.int64) - expected_correct(count, q)
            head.append(struct.pack("<H", b))
            counts.append(count)
            residuals.append(np.where(r >= 0, 2 * r, -2 * r - 1))
            places.append(q)
    counts = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    residuals = np.concatenate(residuals) if residuals else np.zeros(0, np.int64)
    top = int(max(counts.max(initial=0), residuals.max(initial=0)))
    width = 2 if top <= 0xFFFF else 4
    if top > 0xFFFFFFFF:
        raise ValueError(f"a reliability bin's count or correct count ({top}) does not fit four bytes")
    kind = np.dtype("<u2" if width == 2 else "<u4")

    def planes(values: np.ndarray) -> bytes:
        return values.astype(kind).view(np.uint8).reshape(-1, width).T.tobytes()

    parts = [REL_MAGIC, struct.pack("<BB", width, len(names))]
    parts += [struct.pack("<B", len(n)) + n.encode("ascii") for n in names]
    parts += [struct.pack("<I", len(block)), *head, planes(counts), planes(residuals),
              (np.concatenate(places) if places else np.zeros(0, np.uint8)).tobytes()]
    return b"".join(parts)


def reliability_blocks(results: Path, space: str, hp: str, dataset: str, measured: pd.DataFrame,
                       threads: int = 4) -> list[dict]:
    """The shards' reliability bins of the measured rows, BLOCK rows per dict (keys: the row's
    position among the measured rows); rows without a shard are left out."""
    paths = [shard_path(results, space, hp, dataset, int(i)) for i in measured["arch_index"]]
    seeds = measured["seed"].to_numpy() if "seed" in measured else np.zeros(len(paths), int)
    exist = [p.is_file() for p in paths]
    with ThreadPoolExecutor(max(1, threads)) as pool:
        found = list(pool.map(lambda a: _reliability_of(a[0], a[1]) if a[2] else None, zip(paths, seeds, exist)))
    blocks = [{} for _ in range(-(-len(paths) // BLOCK))]
    for row, rel in enumerate(found):
        if rel:
            blocks[row // BLOCK][row] = rel
    return blocks


# ---------------------------------------------------------------- one table

def export_table(path: Path, results: Path, data: Path, hcs: pd.DataFrame | None, threads: int = 4,
                 others: Mapping[tuple, tuple] | None = None, bins: Sequence[int] | str | None = None) -> dict | None:
    """Write one table's rows, columns and reliability blocks under ``data``; its manifest entry.
    ``bins``: the bin counts of the binned metrics written (:func:`kept_bins`); the manifest
    entry's ``bins`` are those, its ``table_bins`` every one the table holds.
    ``others``: (space, hp, dataset) -> (the comparison's
    :class:`~calibench.analysis.compare.TableResult`, run B's
    :class:`~calibench.analysis.compare.TableRef`), to add run B's side of this table where it
    has one (:func:`compare_columns`)."""
    frame = pd.read_parquet(path)
    if frame.empty:
        return None
    names = list(frame.columns)
    space, hp, dataset = (str(frame[k].iloc[0]) for k in ("space", "hp", "dataset"))
    tid = _table_id(space, hp, dataset)
    seed = ["seed"] if "seed" in frame else []  # a row is a (network, seed): seeds: [777, 888] gives two
    if hcs is not None:
        h = hcs[(hcs["space"] == space) & (hcs["hp"].astype(str) == hp) & (hcs["dataset"] == dataset)]
        frame = frame.merge(h.drop(columns=["space", "hp", "dataset"]), how="left",
                            on=["arch_index", *[c for c in seed if c in h]])
    index = frame["arch_index"].to_numpy(np.int64)
    rep_of = (frame["measured_by"].fillna(frame["arch_index"]).to_numpy(np.int64) if "measured_by" in frame
              else index)
    is_rep = index == rep_of
    measured = frame[is_rep].reset_index(drop=True)
    seeds = [frame[c].to_numpy() for c in seed]
    position = pd.Series(np.arange(len(measured)),
                         index=pd.MultiIndex.from_arrays([measured["arch_index"].to_numpy(np.int64),
                                                          *[measured[c].to_numpy() for c in seed]]))
    rep_row = position.reindex(pd.MultiIndex.from_arrays([rep_of, *seeds])).to_numpy()
    if np.isnan(rep_row).any():  # a row whose representative (same seed) has no row of its own
        raise ValueError(f"{path}: rows whose measured_by names no row of the table "
                         f"(arch_index {frame['arch_index'][np.isnan(rep_row)].head(3).tolist()})")
    out = data / tid
    out.mkdir(parents=True, exist_ok=True)
    labels = frame["arch_str"].astype(str) if "arch_str" in frame else frame["arch_index"].astype(str)
    rows = (frame["arch_index"].to_numpy("<i4").tobytes() + rep_row.astype("<i4").tobytes()
            + np.flatnonzero(is_rep).astype("<i4").tobytes() + "\n".join(labels).encode())
    (out / "rows.js").write_bytes(binary_script("rowdata", [tid], rows))
    dtypes = {n: frame[n].dtype.kind for n in frame.columns}
    table_bins = sorted({b for n in names if (b := bin_count(n)) is not None})
    page_bins = kept_bins(table_bins, bins)
    plotted = [n for n in plotted_columns(list(frame.columns), dtypes) if bin_count(n) in (None, *page_bins)]
    columns = []
    for k, name in enumerate(plotted):
        payload, meta = encode_column(measured[name].to_numpy(dtype=float))
        (out / f"c{k}.js").write_bytes(binary_script("col", [tid, k], payload))
        columns.append({"name": name, "file": f"c{k}", "group": column_group(name), **meta})
    numeric, categorical = architecture_columns(measured)
    taken = {c["name"] for c in columns}
    for name, values in numeric.items():
        if name not in taken:
            payload, meta = encode_column(values)
            file = f"a{len(columns)}"
            (out / f"{file}.js").write_bytes(binary_script("file", [tid, file], payload))
            columns.append({"name": name, "file": file, "group": "architecture", **meta})
    for name, categories, codes in categorical:
        if name not in taken:
            file = f"k{len(columns)}"
            (out / f"{file}.js").write_bytes(binary_script("file", [tid, file], codes.tobytes()))
            group = "architecture" if name.startswith(("edge_", "channels_")) else "network"
            columns.append({"name": name, "file": file, "group": group, "enc": "cat", "categories": categories})
    blocks = reliability_blocks(results, space, hp, dataset, measured, threads)
    rel_files = []
    for b, block in enumerate(blocks):
        if block:
            (out / f"rel{b}.js").write_bytes(binary_script("rel", [tid, b], encode_reliability_block(block)))
            rel_files.append(b)
    entry_compare, other = None, (others or {}).get((space, hp, dataset))
    if other is not None:
        plotted = [c["name"] for c in columns if c["group"] not in ("architecture",) and c.get("enc") != "cat"]
        added, entry_compare = compare_columns(measured, plotted, *other, out, len(columns), tid)
        columns += added
    stages = [s for s in STAGES if f"{s}_accuracy" in names]
    return {**({"compare": entry_compare} if entry_compare is not None else {}), "id": tid, "space": space,
            "hp": hp, "dataset": dataset, "n": int(len(frame)), "n_measured": int(len(measured)), "columns": columns,
            "stages": stages, "bins": page_bins, "table_bins": table_bins, "rel_blocks": rel_files, "block": BLOCK,
            "table": str(path.relative_to(results)) if path.is_relative_to(results) else str(path)}


# ---------------------------------------------------------------- Kendall matrices

def export_kendall(results: Path, data: Path) -> bool:
    """``analysis/kendall.parquet`` (when the run has it) as ``data/kendall.js``, column-wise."""
    path = output_path(results, "kendall", "kendall")
    if not path.is_file():
        return False
    k = pd.read_parquet(path)
    cols = {}
    for name in k.columns:
        s = k[name]
        if s.dtype.kind in "fi":
            cols[name] = [None if not math.isfinite(v) else round(float(v), 6) for v in s.to_numpy(dtype=float)]
        else:
            cols[name] = [None if pd.isna(v) else str(v) for v in s]
    (data / "kendall.js").write_bytes(binary_script("kendall", [], json.dumps(cols, separators=(",", ":")).encode()))
    return True


# ---------------------------------------------------------------- the whole explorer

def _copy_asset(src, dst: Path) -> None:
    """A packaged file (an ``importlib.resources`` traversable) written to ``dst`` atomically."""
    data = src.read_bytes()
    atomic_write(dst, lambda f: f.write(data))


# The page's code, one file per concern (explorer_js/{name}.js), in the order they are joined:
# each is a part of one closure (the functions of one may call those of another), so the page
# loads one script and the parts share their state without a global of their own.
PAGE_SCRIPTS = ("state", "loading", "helpers", "scatter", "network", "networks", "parcoords", "linked", "kendall",
                "methods", "compare", "start")


def page_script() -> bytes:
    """``explorer.js``: the parts of :data:`PAGE_SCRIPTS` in one closure, ``CB``, whose value
    is the ``EXPORTS`` of ``start.js`` (what the data files and the tests call)."""
    folder = resources.files("calibench.report").joinpath("explorer_js")
    body = "\n".join(folder.joinpath(f"{name}.js").read_text(encoding="utf-8") for name in PAGE_SCRIPTS)
    return ("// calibench explorer: the page's code (calibench/report/explorer.py writes the data it reads; the\n"
            "// code is calibench/report/explorer_js/*.js joined). Data files are scripts that call CB.<kind>(...);\n"
            "// they are loaded when the page needs them.\n'use strict';\n\nconst CB = (() => {\n"
            + body + "\n  return EXPORTS;\n})();\n").encode("utf-8")


def plotly_js():
    """plotly.js as the ``plotly`` package ships it (``plotly/package_data/plotly.min.js``)."""
    package, name = PLOTLY_JS
    found = resources.files(package).joinpath(name)
    if not found.is_file():
        raise FileNotFoundError(f"{package} has no {name}: reinstall plotly (pip install plotly)")
    return found


def replaced_manifest(results: str | Path) -> dict:
    """The manifest of the explorer a new one would replace under ``results`` (its demo flag and
    ``min_networks``, which the workflow's job set from the run's config); {} if there is none or
    it cannot be read."""
    path = explorer_dir(results) / "data" / "manifest.js"
    try:
        text = path.read_text()
    except OSError:
        return {}
    head, tail = "CB.manifest(", ");\n"
    if not (text.startswith(head) and text.endswith(tail)):
        return {}
    try:
        found = json.loads(text[len(head) : -len(tail)])
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def write_explorer(results: str | Path, tables: Sequence[str | Path] | None = None, demo: bool | None = None,
                   threads: int = 4, min_networks: int | None = None, compare: str | Path | None = None,
                   out: str | Path | None = None, columns: Sequence[str] | None = None,
                   bins: Sequence[int] | str | None = None) -> Path:
    """Write the explorer of the run under ``results`` (every table, or ``tables``); returns
    the page. Earlier data of the explorer is replaced, so nothing stale stays.
    ``min_networks``: Kendall cells on fewer networks are marked (default: the config schema's).
    ``compare``: run B (a results directory, a folder of tables, tao2024 CSVs: what
    ``calibench compare`` reads), shown against this run (:func:`compare_columns`), the
    comparison limited to ``columns`` (fnmatch patterns); the page goes to ``out``/explorer/
    (default: ``compare``'s own folder, ``./compare-{A}-vs-{B}/``), not into the run.
    ``bins``: the bin counts of the binned metrics in the page (:func:`kept_bins`; a bin count
    no table holds is a ``ValueError``). ``demo`` and ``min_networks`` left as None: what the
    explorer being replaced says (:func:`replaced_manifest`; a run's own explorer, written by the
    workflow from its config, keeps its mini-benchmark banner), else no banner and the config
    schema's default."""
    results = Path(results)
    before = replaced_manifest(results) if compare is None else {}
    if demo is None:
        demo = before.get("demo") is True
    if min_networks is None:
        from calibench.config.check import schema_default

        kept = before.get("min_networks")
        min_networks = kept if isinstance(kept, int) and not isinstance(kept, bool) and kept >= 1 \
            else schema_default("analysis", "min_networks")
    if not tables:
        from calibench.results.query import check_results_dir

        check_results_dir(results)
    paths = [Path(t) for t in tables] if tables else result_tables(results)
    for path in paths:  # every byte checked (integrity.verify), and each a result table
        check_result_table(path)
    if not paths:
        raise FileNotFoundError(f"no result tables under {results} (run the workflow first)")
    cmp, others = None, {}
    if compare is not None:
        from calibench.analysis.compare import compare_runs
        from calibench.report.compare_page import default_out
        from calibench.results.query import refuse_inside_runs

        option = "--out" if out is not None else "the default output folder (--out)"
        cmp = compare_runs(results, compare, columns)
        found = {t.key: t for t in cmp.tables if t.side == "both"}
        others = {key: (found[key], cmp.b.tables[key]) for key in found}
        out = Path(out) if out is not None else default_out(cmp)
        refuse_inside_runs(out, [results, compare], option, "a comparison's explorer goes beside compare's files")
    where = out if cmp is not None else results  # a comparison's page goes beside compare's files
    root = explorer_dir(where)
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    staging = root / "data.tmp"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    if bins not in (None, "auto", "all"):  # a bin count no table has: said before any table is written
        held = sorted({b for path in paths for n in pq.read_schema(path).names if (b := bin_count(n)) is not None})
        if not set(map(int, bins)) <= set(held):
            shutil.rmtree(staging)
            raise ValueError(f"bins {sorted(set(map(int, bins)) - set(held))}: no table has binned metrics at that "
                             f"bin count (they have {', '.join(map(str, held))})")
    hcs = _hcs_columns(results)
    entries = []
    for path in paths:
        log.info("explorer: %s", path)
        entry = export_table(path, results, staging, hcs, threads, others=others, bins=bins)
        if entry is not None:
            entries.append(entry)
    has_kendall = export_kendall(results, staging)
    manifest = {"tables": entries, "kendall": has_kendall, "demo": bool(demo), "stages": list(STAGES),
                "min_networks": int(min_networks),
                "mantissa_bits": MANTISSA_BITS, "defaults": list(DEFAULT_AXES), "results": results.resolve().name,
                **({"compare": compare_manifest(cmp)} if cmp is not None else {})}
    (staging / "manifest.js").write_text(script("manifest", manifest))
    old = root / "data.old"
    if old.exists():
        shutil.rmtree(old)
    if data.exists():
        data.replace(old)
    staging.replace(data)
    shutil.rmtree(old, ignore_errors=True)
    _copy_asset(plotly_js(), root / "plotly.min.js")
    code = page_script()
    atomic_write(root / "explorer.js", lambda f: f.write(code))
    page = explorer_page(where)
    _copy_asset(resources.files("calibench.report").joinpath("explorer.html"), page)
    # the content check of every file of the page (issue 33; `sha256sum -c SHA256SUMS` checks it too)
    sums = explorer_sums(where)
    # the files written here only: a file set aside beside them (``index.html.changed``, removed once
    # its rebuild passes) listed here would be missing at the next run's check, and set the page aside again
    written = [p for p in data.rglob("*") if p.is_file()] + [root / "plotly.min.js", root / "explorer.js", page]
    integrity.write_sums(sorted(written), sums)
    return page
