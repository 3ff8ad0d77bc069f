"""The paper's question 2 (Tao et al., ICLR 2024, Fig. 3, App. N): is calibration related to
robustness? An external per-architecture robustness table (for example the Jung et al. 2023
robustness dataset of NATS-Bench TSS) is joined to the TSS result tables and every
calibration metric (the OoD AUROCs we measure included) is correlated with every
robustness column, per top-k-by-accuracy population.

* :func:`load_robustness`: a CSV or parquet file, one row per TSS architecture, keyed by
  ``arch_index`` or ``arch_str``; numeric columns are kept.
* :func:`join_robustness`: the TSS rows of the result tables joined on that key.
* :func:`robustness_kendall`: tidy Kendall tau-b (with bootstrap intervals on request,
  :mod:`calibench.analysis.stats`) per (space, hp, dataset, population).
* :func:`robustness_plot`: Fig. 3: tau against the population size, one line per column.

Keys. ``arch_index``: the file's ``arch_index`` column (any row order) if it has one;
otherwise the file has no key column and data row i (0-based, after the header) is
architecture i, the layout of the Jung et al. export. ``arch_str``: the file's ``arch_str``
column, TSS cell strings (:func:`calibench.results.archstr.parse_tss`; compared in canonical
form, so spacing variants of one cell are one key). Either way a key must name a TSS
architecture (an index in ``0 .. 15624``, a valid cell string) and appear once.

A file's indices are NATS-Bench's: they are matched with the tables' ``nats_index`` (each
row's NATS-Bench index, recorded by the population), not with ``arch_index``, the archive's
own index (the mini benchmark's cells are 0, 1, ... of its own meta). A table whose rows have
no known NATS-Bench index is refused, naming it and ``key: arch_str``, which joins by the
cell; tables built before ``nats_index`` existed use ``arch_index`` where the population's
archive lists the whole TSS space (a NATS-Bench archive).

Which robustness value a network gets. The result tables hold one row per TSS index, the
copies of an isomorphism class repeating the measured representative (``measured_by``).
The join gives every row its own index's robustness values; the correlations use the
measured rows only (``arch_index == measured_by``, first seed, as
:func:`calibench.analysis.kendall.kendall_all`), i.e. the representative's own robustness values,
measured on the same weights as its calibration. A class whose representative has no
robustness row is left out (its copies' rows are still in the join).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.analysis import stats
from calibench.results.archstr import TSS_OPS, format_tss, parse_tss
from calibench.analysis.plots import pyplot

log = logging.getLogger(__name__)

__all__ = ["KEYS", "TSS_SIZE", "REFERENCE", "POPULATIONS", "load_robustness", "join_robustness",
           "robustness_columns", "robustness_kendall", "robustness_plot"]

KEYS = ("arch_index", "arch_str")
NATS_INDEX = "nats_index"             # the tables' NATS-Bench index, which a join by arch_index matches
TSS_SIZE = len(TSS_OPS) ** 6          # 15625 cells
REFERENCE = "pre_ece_15"              # Fig. 3: every column against ECE (15 bins, before recalibration)
POPULATIONS = (100, 1000, 5000, "all")
KENDALL_COLUMNS = ["space", "hp", "dataset", "kind", "population", "population_size", "metric", "robustness",
                   "tau", "lo", "hi", "n", "interval"]
_READERS = {".csv": "csv", ".csv.gz": "csv", ".parquet": "parquet", ".pq": "parquet"}
_PANDAS_INDEX = re.compile(r"^Unnamed: \d+$")  # how pandas names a header-less column (a written index)
_TABLE_KEYS = ("space", "hp", "dataset", "arch_index", "measured_by", "arch_str", "seed")


# ---------------------------------------------------------------- loading

def _read(path: Path) -> pd.DataFrame:
    name = path.name.lower()
    kind = next((r for ext, r in sorted(_READERS.items(), key=lambda e: -len(e[0])) if name.endswith(ext)), None)
    if kind is None:
        raise ValueError(f"robustness table {str(path)!r}: unknown file extension; expected one of "
                         f"{sorted(_READERS)}")
    if not path.is_file():
        raise FileNotFoundError(f"robustness table {str(path)!r}: no such file")
    try:
        return pd.read_csv(path) if kind == "csv" else pd.read_parquet(path)
    except Exception as e:  # a malformed file: say which
        raise ValueError(f"robustness table {str(path)!r}: cannot be read as {kind}: {e}") from None


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def _index_key(df: pd.DataFrame, where: str) -> np.ndarray:
    """The ``arch_index`` column, checked: integers in 0 .. TSS_SIZE - 1."""
    col = df["arch_index"]
    if not _numeric(col):
        bad = pd.to_numeric(col, errors="coerce").isna() & col.notna()
        row = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
        raise ValueError(f"{where}: key column 'arch_index' is not numeric (row {row}: {col.iloc[row]!r})")
    v = col.to_numpy(dtype=float)
    bad = ~np.isfinite(v) | (v != np.round(v)) | (v < 0) | (v >= TSS_SIZE)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{where}: key column 'arch_index', row {row}: {col.iloc[row]} is not a TSS "
                         f"architecture index (an integer in 0..{TSS_SIZE - 1}); {int(bad.sum())} such row(s)")
    return v.astype(np.int64)


def _canonical_tss(values, where: str) -> np.ndarray:
    """Canonical TSS cell strings; ValueError naming the first bad row."""
    cache: dict = {}
    out = []
    for row, s in enumerate(values):
        if s not in cache:
            if not isinstance(s, str):
                raise ValueError(f"{where}: key column 'arch_str', row {row}: {s!r} is not a TSS architecture "
                                 "string")
            try:
                cache[s] = format_tss(parse_tss(s.strip()))
            except ValueError as e:
                raise ValueError(f"{where}: key column 'arch_str', row {row}: {e}") from None
        out.append(cache[s])
    return np.array(out, dtype=object)


def _check_unique(keys: np.ndarray, key: str, where: str) -> None:
    s = pd.Series(keys)
    dup = s.duplicated(keep=False)
    if dup.any():
        first = s[dup].iloc[0]
        first = first.item() if hasattr(first, "item") else first
        rows = np.flatnonzero((s == first).to_numpy()).tolist()
        raise ValueError(f"{where}: duplicate key {key}={first!r} in rows {rows}; {int(s.duplicated().sum())} "
                         "duplicate row(s) in all: one row per architecture is expected")


def load_robustness(path: str | Path, key: str = "arch_index") -> pd.DataFrame:
    """Read a per-architecture robustness table (CSV or parquet, by extension: ``.csv``,
    ``.csv.gz``, ``.parquet``, ``.pq``).

    ``key``: ``arch_index`` (the file's ``arch_index`` column, rows in any order; or, if the
    file has none, data row i is architecture i) or ``arch_str`` (the file's ``arch_str``
    column of TSS cell strings, returned in canonical form). Returns the key column
    followed by the file's numeric (int or float, not bool) columns, in file order, one
    row per architecture, sorted by the key. Dropped, and named in a log line: the
    non-numeric columns, the other key column, and pandas' written-index columns
    (``Unnamed: 0``). ``df.attrs``: ``source`` (the path), ``key``.

    Raises FileNotFoundError (missing file) or ValueError naming the path and the key,
    column or row at fault: unknown extension, unreadable file, unknown key, no key column
    (``arch_str``), a key that is no TSS architecture, duplicate keys, no rows, no numeric
    column, a written-index column that disagrees with the row order.
    """
    path = Path(path)
    if key not in KEYS:
        raise ValueError(f"robustness table {str(path)!r}: unknown key {key!r}; expected one of {list(KEYS)}")
    df = _read(path)
    where = f"robustness table {str(path)!r} (key {key})"
    if df.columns.duplicated().any():
        raise ValueError(f"{where}: repeated column names {sorted(set(df.columns[df.columns.duplicated()]))}")
    df.columns = [str(c) for c in df.columns]
    if df.empty:
        raise ValueError(f"{where}: no rows")
    written_index = [c for c in df.columns if _PANDAS_INDEX.match(c)]
    if key == "arch_index":
        if "arch_index" in df.columns:
            keys = _index_key(df, where)
        else:
            if len(df) > TSS_SIZE:
                raise ValueError(f"{where}: no 'arch_index' column, so row i is architecture i, but the file has "
                                 f"{len(df)} rows (TSS has {TSS_SIZE}): row {TSS_SIZE} is no architecture")
            keys = np.arange(len(df), dtype=np.int64)
            for c in written_index:  # a pandas index written with the rows: it must be the row order
                v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
                if not np.array_equal(v, keys):
                    raise ValueError(f"{where}: no 'arch_index' column, so row i is architecture i, but column "
                                     f"{c!r} (a written index) is not 0, 1, 2, ...; name it 'arch_index' if it "
                                     "holds the architecture indices")
            log.info("%s: no 'arch_index' column: row i is architecture i (%d rows)", where, len(df))
    else:
        if "arch_str" not in df.columns:
            raise ValueError(f"{where}: no key column 'arch_str' (columns: {list(df.columns)})")
        keys = _canonical_tss(df["arch_str"].tolist(), where)
    _check_unique(keys, key, where)
    values = [c for c in df.columns if c not in KEYS and c not in written_index]
    numeric = [c for c in values if _numeric(df[c])]
    dropped = [c for c in df.columns if c not in numeric and c != key]
    if dropped:
        log.warning("%s: dropped column(s) that are not numeric or are keys: %s", where, dropped)
    if not numeric:
        raise ValueError(f"{where}: no numeric column besides the key (columns: {list(df.columns)})")
    out = pd.DataFrame({key: keys})
    out = pd.concat([out, df[numeric].reset_index(drop=True).astype(float)], axis=1)
    out = out.sort_values(key, kind="stable").reset_index(drop=True)
    out.attrs.update(source=str(path), key=key)
    log.info("%s: %d architectures, %d numeric column(s)", where, len(out), len(numeric))
    return out


# ---------------------------------------------------------------- join

def robustness_columns(df: pd.DataFrame) -> list[str]:
    """The robustness value columns: ``attrs['robustness_columns']`` of a
    :func:`join_robustness` result, else every column of a :func:`load_robustness` result
    but its key."""
    if "robustness_columns" in df.attrs:
        return list(df.attrs["robustness_columns"])
    return [c for c in df.columns if c not in KEYS]


def _nats_keys(tss: pd.DataFrame, where: str) -> np.ndarray:
    """The NATS-Bench index of each TSS row (the tables' ``nats_index``): a join by index pairs
    the file's indices with it, never with ``arch_index``, the archive's own (the mini
    benchmark's 0, 1, ... are other cells'). ValueError naming the table where it is unknown."""
    if NATS_INDEX in tss.columns:
        unknown = tss[NATS_INDEX].isna().to_numpy()
        if not unknown.any():
            return tss[NATS_INDEX].to_numpy(dtype=np.int64)
        first = tss[unknown].iloc[0]
        table = f"result table {first['space']}_{first['hp']}_{first['dataset']}"
        what = f"{int(unknown.sum())} of {len(tss)} TSS rows have no NATS-Bench index (nats_index null)"
    else:
        table, what = "the result tables", "no nats_index column (each row's NATS-Bench index)"
    raise ValueError(f"{where}: {table}: {what}, so a join by arch_index cannot pair their rows with the right cells; "
                     "join by the cell: robustness.key: arch_str")


def join_robustness(table_df: pd.DataFrame, robustness_df: pd.DataFrame, key: str | None = None,
                    datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """The TSS rows of ``table_df`` (result tables, one row per index and seed; ``datasets``:
    only these, if given) with the robustness values of their key appended (an inner join:
    rows whose key has no robustness row are dropped; table row order kept).

    ``key``: ``arch_index`` or ``arch_str`` (default: ``robustness_df.attrs['key']``); by
    ``arch_index`` the file's NATS-Bench indices match the tables' ``nats_index`` (refused,
    naming the table, where that is missing or null: the archive's own ``arch_index`` need not
    be NATS-Bench's). A
    robustness column named like a table column is renamed ``{name}_robustness`` (logged).
    ``attrs['robustness_columns']`` lists the appended columns. Logs how many table rows
    and measured networks matched; ValueError if none (or no TSS rows, or an unknown key).
    """
    key = key or robustness_df.attrs.get("key")
    source = robustness_df.attrs.get("source", "<data frame>")
    where = f"robustness table {source!r} (key {key})"
    if key not in KEYS:
        raise ValueError(f"{where}: unknown key {key!r}; expected one of {list(KEYS)}")
    if key not in robustness_df.columns:
        raise ValueError(f"{where}: the robustness data frame has no key column {key!r}")
    missing = [c for c in ("space", "dataset", "arch_index", "measured_by", key) if c not in table_df.columns]
    if missing:
        raise ValueError(f"{where}: the result table has no column(s) {missing}")
    tss = table_df[table_df["space"] == "tss"]
    if datasets is not None:
        tss = tss[tss["dataset"].isin(list(datasets))]
    if tss.empty:
        raise ValueError(f"{where}: the result tables have no TSS rows"
                         + (f" for datasets {list(datasets)}" if datasets is not None else ""))
    values = [c for c in robustness_df.columns if c != key and c not in KEYS]
    renamed = {c: f"{c}_robustness" for c in values if c in tss.columns}
    if renamed:
        log.warning("%s: column(s) named like result-table columns renamed: %s", where, renamed)
    rob = robustness_df[[key, *values]].rename(columns=renamed)
    if key == "arch_str":
        table_keys = _canonical_tss(tss["arch_str"].tolist(), "result table")
    else:
        table_keys = _nats_keys(tss, where)
    lookup = pd.Index(rob[key].to_numpy())
    if not lookup.is_unique:
        raise ValueError(f"{where}: duplicate keys in the robustness data frame")
    pos = lookup.get_indexer(table_keys)
    hit = pos >= 0
    n_measured = int((tss["arch_index"] == tss["measured_by"]).sum())
    matched_measured = int((hit & (tss["arch_index"] == tss["measured_by"]).to_numpy()).sum())
    if not hit.any():
        example_table = list(dict.fromkeys(table_keys[:3].tolist()))
        example_rob = rob[key].iloc[:3].tolist()
        raise ValueError(f"{where}: no row matches any architecture of the result tables ({len(tss)} TSS rows, "
                         f"{len(rob)} robustness rows); table keys e.g. {example_table}, robustness keys e.g. "
                         f"{example_rob}")
    unused = len(rob) - len(np.unique(pos[hit]))
    log.info("%s: %d of %d TSS table rows matched (%d of %d measured rows); %d robustness row(s) match no table "
             "row", where, int(hit.sum()), len(tss), matched_measured, n_measured, unused)
    out = tss[hit].reset_index(drop=True)
    appended = rob.drop(columns=[key]).iloc[pos[hit]].reset_index(drop=True)
    out = pd.concat([out, appended], axis=1)
    out.attrs = {"source": source, "key": key, "robustness_columns": list(appended.columns)}
    return out


# ---------------------------------------------------------------- Kendall tau

def _populations(populations) -> list:
    if isinstance(populations, (str, int)):
        populations = [populations]
    out = []
    for p in populations:
        if p == "all" or (isinstance(p, (int, np.integer)) and not isinstance(p, bool) and p >= 2):
            out.append(p if p == "all" else int(p))
        else:
            raise ValueError(f"population {p!r}: expected an integer >= 2 (top k by accuracy) or 'all'")
    return list(dict.fromkeys(out))


def _pairs(part: pd.DataFrame, rows: list[str], cols: list[str], resamples: int, seed: int,
           level: float) -> pd.DataFrame:
    """tau, lo, hi, n, interval of every (row, col), pairwise-complete rows (the stats NaN
    policy): percentile bootstrap intervals with ``resamples`` > 0, jackknife intervals
    (:func:`calibench.analysis.stats.kendall_jackknife`) otherwise."""
    if resamples > 0:
        return stats.kendall_cross_ci(part, rows, cols, resamples, seed, level)
    return stats.kendall_cross_ci(part, rows, cols, 1, seed, level, interval="jackknife")


def robustness_kendall(joined: pd.DataFrame, metrics: Sequence[str], robustness_columns: Sequence[str] | None = None,
                       populations: Sequence = POPULATIONS, by: str = "accuracy", resamples: int = 0, seed: int = 0,
                       level: float = 0.95, reference: str = REFERENCE) -> pd.DataFrame:
    """Kendall tau-b of calibration metrics against robustness columns, per population.

    Per (space, hp, dataset) of ``joined`` (:func:`join_robustness`), over its measured
    networks (``arch_index == measured_by``, the first seed of each), and per population:
    ``all`` of them, or the top k by ``by`` (``nlargest`` after sorting by ``arch_index``,
    so ties at the cut go to the lower index; networks with ``by`` NaN are in ``all``
    only; a top k only for k < the number of networks, as
    :func:`calibench.analysis.kendall.kendall_all`). Rows, tidy (``KENDALL_COLUMNS``):

    * ``kind = "robustness"``: every ``metric`` of ``metrics`` (calibration metrics, the
      OoD AUROC columns...) against every ``robustness`` column;
    * ``kind = "metric"``: Fig. 3's other lines: ``metric = reference`` (``pre_ece_15``)
      against every other metric of ``metrics``, named in ``robustness``. Together with
      the ``kind = "robustness"`` rows of the reference, the rows with
      ``metric == reference`` are Fig. 3 (:func:`robustness_plot`). ``reference`` is
      added to ``metrics`` (first) when ``joined`` has it and ``metrics`` does not.

    ``population``: ``all`` or ``top{k}``; ``population_size``: its number of networks;
    ``n``: the networks where both columns are defined (tau uses those). tau:
    :func:`calibench.analysis.stats.kendall_tau` (scipy's tau-b); NaN with fewer than two values or
    a constant column. ``lo``, ``hi``: percentile bootstrap interval at ``level`` from
    ``resamples`` resamples of the population's networks (:func:`stats.kendall_cross_ci`,
    ``seed``), or with ``resamples=0`` the jackknife interval; ``interval`` names which. A column with fewer than two values in a
    (space, hp, dataset) is left out there (e.g. OoD AUROCs outside CIFAR-10). ValueError
    naming a column that is in no row of ``joined``.
    """
    metrics = list(dict.fromkeys(metrics))
    if reference and reference not in metrics and reference in joined.columns:
        metrics.insert(0, reference)  # Fig. 3 is drawn against it
    rcols = list(dict.fromkeys(robustness_columns if robustness_columns is not None
                               else joined.attrs.get("robustness_columns", [])))
    if not rcols:
        raise ValueError("robustness_kendall: no robustness columns given (and none recorded by join_robustness)")
    if not metrics:
        raise ValueError("robustness_kendall: no metrics given")
    pops = _populations(populations)
    needed = ["space", "hp", "dataset", "arch_index", "measured_by", by, *metrics, *rcols]
    missing = [c for c in dict.fromkeys(needed) if c not in joined.columns]
    if missing:
        raise ValueError(f"robustness_kendall: no column(s) {missing} in the joined table")
    for c in dict.fromkeys([by, *metrics, *rcols]):
        if not _numeric(joined[c]):
            raise ValueError(f"robustness_kendall: column {c!r} is not numeric")
    resamples = int(resamples)
    out = []
    nets = joined[joined["arch_index"] == joined["measured_by"]]
    if "seed" in nets.columns:
        first = nets.groupby(["space", "hp", "dataset", "arch_index"])["seed"].transform("min") == nets["seed"]
        nets = nets[first]
    for (space, hp, dataset), group in nets.groupby(["space", "hp", "dataset"], sort=True):
        group = group.sort_values("arch_index", kind="stable")
        usable = {c for c in dict.fromkeys([*metrics, *rcols]) if group[c].notna().sum() > 1}
        m_use = [c for c in metrics if c in usable]
        r_use = [c for c in rcols if c in usable]
        others = [c for c in m_use if c != reference] if reference in usable else []
        for p in pops:
            if p == "all":
                part, label = group, "all"
            else:
                ranked = group.dropna(subset=[by])
                if len(ranked) <= p:
                    continue
                part, label = ranked.nlargest(p, by), f"top{p}"
            blocks = []
            if m_use and r_use:
                blocks.append(_pairs(part, m_use, r_use, resamples, seed, level).assign(kind="robustness"))
            if others:
                blocks.append(_pairs(part, [reference], others, resamples, seed, level).assign(kind="metric"))
            for b in blocks:
                out.append(b.rename(columns={"row": "metric", "col": "robustness"}).assign(
                    space=space, hp=hp, dataset=dataset, population=label, population_size=len(part)))
    if not out:
        return pd.DataFrame(columns=KENDALL_COLUMNS)
    res = pd.concat(out, ignore_index=True)[KENDALL_COLUMNS]
    return res.astype({"tau": float, "lo": float, "hi": float, "n": int, "population_size": int})


# ---------------------------------------------------------------- Fig. 3

_FAMILY_MAPS = ("Blues", "Reds", "Greens", "Purples", "Oranges", "Greys", "YlOrBr", "BuGn", "RdPu", "PuBu")
_THREAT = re.compile(r"^(.+?)_(Linf|L2|L1)_", re.IGNORECASE)


def _family(name: str, kind: str) -> str:
    """Line family: the attack (``fgsm``, ``pgd``, ``aa_apgd_ce``... before ``_Linf_``/``_L2_``),
    ``metric`` for the calibration metrics, ``clean`` for clean accuracy, else ``corruption``."""
    if kind == "metric":
        return "metric"
    m = _THREAT.match(name)
    if m:
        return m.group(1)
    return "clean" if "clean" in name.lower() else "corruption"


def _styles(lines: list[tuple[str, str]]) -> dict[str, dict]:
    """A colour per line: one sequential colour map per family, shades by order within it;
    calibration metrics dashed, categorical colours (Dark2)."""
    import matplotlib

    families: dict[str, list[str]] = {}
    for name, kind in lines:
        families.setdefault(_family(name, kind), []).append(name)
    styles = {}
    maps = iter(_FAMILY_MAPS * 4)
    markers = "os^vDP*Xph<>"
    for family, names in families.items():
        if family == "metric":
            colors = [matplotlib.colormaps["Dark2"](i % 8) for i in range(len(names))]
            for i, n in enumerate(names):
                styles[n] = {"color": colors[i], "linestyle": "--", "marker": markers[i % len(markers)]}
            continue
        if family == "clean":
            for i, n in enumerate(names):
                styles[n] = {"color": "black", "linestyle": "-", "marker": "o", "linewidth": 2.0}
            continue
        cmap = matplotlib.colormaps[next(maps)]
        shades = np.linspace(0.45, 0.95, len(names)) if len(names) > 1 else [0.75]
        for i, (n, s) in enumerate(zip(names, shades)):
            styles[n] = {"color": cmap(float(s)), "linestyle": "-", "marker": markers[i % len(markers)]}
    return styles


def _population_order(label: str, size: int) -> tuple:
    return (1, size) if label == "all" else (0, size)


def robustness_plot(kendall_df: pd.DataFrame, path: str | Path, reference: str = REFERENCE,
                    title: str = "") -> Path:
    """Fig. 3: Kendall tau against ``reference`` (``pre_ece_15``) per population, x = the
    population size (log scale), one line per robustness column and per other metric
    (the rows of :func:`robustness_kendall` with ``metric == reference``); one panel per
    (space, hp, dataset). Robustness columns are coloured by family (one colour map per
    attack, shades by order; clean accuracy black; corruptions one map), metrics dashed.
    Bootstrap intervals are drawn as error bars when present and there are at most 12
    lines. The legend sits outside the panels; the PNG is cut to fit everything
    (``bbox_inches='tight'``). ``title``: appended to the figure's title (e.g. a
    mini-benchmark warning). ValueError if ``kendall_df`` has no row for ``reference``."""
    plt = pyplot()

    path = Path(path)
    rows = kendall_df[kendall_df["metric"] == reference]
    if rows.empty:
        raise ValueError(f"robustness_plot: no Kendall rows against {reference!r} to draw")
    lines = list(dict.fromkeys(zip(rows["robustness"], rows["kind"])))
    styles = _styles(lines)
    groups = sorted(rows.groupby(["space", "hp", "dataset"]).groups)
    ncols = min(3, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    ncol = max(1, math.ceil(len(lines) / 24))  # legend columns; the figure is widened for them
    fig, grid = plt.subplots(nrows, ncols + 1, figsize=(5.2 * ncols + 2.2 * ncol, 3.8 * nrows + 0.4), squeeze=False,
                             gridspec_kw={"width_ratios": [5.2] * ncols + [2.2 * ncol]})
    axes, side = grid[:, :ncols], grid[:, ncols]
    for ax in side:
        ax.axis("off")
    intervals = rows["lo"].notna().any() and len(lines) <= 12
    handles = {}
    for ax, (space, hp, dataset) in zip(axes.flat, groups):
        part = rows[(rows["space"] == space) & (rows["hp"] == hp) & (rows["dataset"] == dataset)]
        sizes = sorted({(lab, int(s)) for lab, s in zip(part["population"], part["population_size"])},
                       key=lambda t: _population_order(*t))
        for name, kind in lines:
            line = part[(part["robustness"] == name) & (part["kind"] == kind)]
            if line.empty:
                continue
            line = line.sort_values("population_size", kind="stable")
            x, y = line["population_size"].to_numpy(float), line["tau"].to_numpy(float)
            st = styles[name]
            label = name.removeprefix("pre_") if kind == "metric" else name
            if intervals:  # each line's bars a little apart (log x: a factor) so that they do not hide each other
                x = x * 1.04 ** (lines.index((name, kind)) - (len(lines) - 1) / 2)
                err = np.vstack([y - line["lo"].to_numpy(float), line["hi"].to_numpy(float) - y])
                h = ax.errorbar(x, y, yerr=np.where(np.isfinite(err), err, 0), capsize=2, markersize=4,
                                linewidth=st.get("linewidth", 1.2), **{k: v for k, v in st.items()
                                                                     if k != "linewidth"})
            else:
                (h,) = ax.plot(x, y, markersize=4, linewidth=st.get("linewidth", 1.2),
                               **{k: v for k, v in st.items() if k != "linewidth"})
            handles.setdefault(label, h)
        ax.axhline(0.0, color="0.6", linewidth=0.8, zorder=0)
        ax.set_xscale("log")
        ticks = [s for _, s in sizes]
        ax.set_xticks(ticks, ["all" if lab == "all" else str(s) for lab, s in sizes], fontsize=7)
        ax.minorticks_off()
        if len(ticks) == 1:
            ax.set_xlim(ticks[0] / 2, ticks[0] * 2)
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(-1.05, min(lo, -0.05)), min(1.05, max(hi, 0.05)))
        ax.grid(alpha=0.3)
        ax.set_xlabel("population: top k networks by accuracy", fontsize=8)
        ax.set_ylabel(f"Kendall tau-b with {reference}", fontsize=8)
        n_all = [s for lab, s in sizes if lab == "all"]
        ax.set_title(f"{dataset} ({space}, hp {hp})" + (f", all = {n_all[0]} networks" if n_all else ""),
                     fontsize=9)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    # in a column of its own right of the panels (below the figure title); savefig's tight box takes it in
    side[0].legend(list(handles.values()), list(handles), loc="upper left", fontsize=7, ncol=ncol, frameon=False,
                   title=f"against {reference}", title_fontsize=8, borderaxespad=0.0)
    fig.suptitle(f"Question 2 (Fig. 3): Kendall tau of robustness and calibration metrics against {reference}"
                 + (f" {title}" if title else ""), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# ---------------------------------------------------------------- the robustness part



def _named(exc: Exception, path: str, key: str) -> ValueError:
    """``exc``'s message, naming the configured file and key if it does not already."""
    text = str(exc).strip("'\"") if isinstance(exc, KeyError) else str(exc)
    if str(path) not in text or f"key {key}" not in text:
        text = f"robustness table {str(path)!r} (key {key}): {text}"
    return ValueError(text)


def _index_full_space(tss: pd.DataFrame, results: Path) -> pd.DataFrame:
    """Tables built before they carried ``nats_index``: where the TSS population's archive
    lists the whole space (a NATS-Bench archive), its ``arch_index`` is NATS-Bench's index."""
    import json

    from calibench.layout import population_path

    if tss.empty or (NATS_INDEX in tss.columns and tss[NATS_INDEX].notna().all()):
        return tss
    doc_path = population_path(results, "tss")
    if doc_path.is_file() and len(json.loads(doc_path.read_text()).get("arch_strs") or []) == TSS_SIZE:
        return tss.assign(**{NATS_INDEX: tss["arch_index"]})
    return tss


def run(settings, tables, results: Path, plots: Path) -> dict:
    """Question 2 (Fig. 3), only with ``robustness.path`` configured: the robustness table
    joined to the TSS tables of ``robustness.datasets`` (default CIFAR-10, where robustness
    datasets are measured), every calibration metric against every robustness column per
    top-k population (``analysis/robustness_kendall.parquet``) and Fig. 3 under
    ``plots/robustness/``. A bad file, key or join raises ValueError naming the file and key."""
    from calibench.analysis.tables import load_tables, metric_candidates, metric_columns, nearest_bins
    from calibench.analysis.registry import output_path

    from calibench.config.check import schema_default

    options, bins = {**schema_default("robustness"), **settings["robustness"]}, settings["bins"]
    path, key, datasets = options["path"], options["key"], options["datasets"]
    try:
        table = load_robustness(path, key)
    except (OSError, ValueError) as exc:
        raise _named(exc, path, key) from None
    candidate = metric_candidates(bins)
    named = set(table.columns)  # a robustness column named like a table column is renamed in the join
    df = load_tables(tables, lambda c: candidate(c) or c in named)
    tss = _index_full_space(df[df["space"] == "tss"] if not df.empty else df, results)
    try:
        joined = join_robustness(tss, table, datasets=datasets)
    except (KeyError, ValueError) as exc:
        raise _named(exc, path, key) from None
    metrics = list(dict.fromkeys([*metric_columns(joined, bins), f"post_ece_{nearest_bins(bins)}"]))
    metrics = [m for m in metrics if m in joined.columns]
    kendall = robustness_kendall(joined, metrics, populations=(*settings["analysis"]["top_k"], "all"),
                                 resamples=int(options["resamples"]), seed=int(options["seed"]))
    kendall.to_parquet(output_path(results, "robustness", "kendall"), index=False)
    title = " [mini benchmark: not NATS-Bench results]" if settings.get("demo") else ""
    figure = robustness_plot(kendall, plots / "robustness_kendall.png", title=title)
    return {"plots": [(f"Question 2: Kendall tau of each metric and robustness column against ECE, by population "
                       f"size ({', '.join(datasets)})", figure)], "blocks": []}
