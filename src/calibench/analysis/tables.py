"""What every analysis part reads from the result tables, and the vocabulary they share.

Each part (:mod:`calibench.analysis.parts`) reads only the columns it uses
(:func:`load_tables` with a column filter), so no part holds the whole width of the
tables (640 columns at full size) in memory. Selecting columns keeps each table's own
column order and row order, so the concatenation is the one of the full tables restricted
to those columns.

Stages are those of docs/recalibration.md ("Common rules"): ``pre`` (the network's own
softmax), ``post`` (temperature scaling) and ``vs, ms, dir, iso, hist, spline``; a part
uses the stages whose ``{stage}_accuracy`` column is in the tables.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from calibench.results.tables import table_key
from calibench.vocabulary import STAGES

log = logging.getLogger(__name__)

__all__ = ["STAGES", "STAGE_NAMES", "HCS_ECE", "KEYS", "BINNED_SUMMARY", "UNBINNED_SUMMARY",
           "label", "demo_suffix", "table_columns", "load_tables", "measured", "first_seed", "stages_present",
           "method_stages", "nearest_bins", "summary_metrics", "table_key", "nats_tables", "table_stages",
           "listed_stages", "group_stages",
           "binned", "metric_columns", "figure_bins", "metric_candidates", "top_populations", "stage_order"]

STAGE_NAMES = {"pre": "no recalibration: the network's softmax", "post": "temperature scaling", "vs": "vector scaling",
               "ms": "matrix scaling, ODIR", "dir": "Dirichlet calibration, ODIR",
               "iso": "isotonic regression, one-vs-rest", "hist": "histogram binning, one-vs-rest",
               "spline": "spline recalibration, Gupta et al. 2021"}
HCS_ECE = "pre_ece_15"  # the ECE of HCS (docs/metrics.md, "Harmonic Calibration Score")
# A network's identity in a table (results/tables.py, FIRST, its string and its NATS-Bench index).
KEYS = ("space", "hp", "dataset", "arch_index", "measured_by", "seed", "arch_str", "nats_index")
# The method-comparison metrics; the binned ones at the bin count nearest 15 (see summary_metrics).
BINNED_SUMMARY = ("ece", "cwce", "ace", "tace")
UNBINNED_SUMMARY = ("ksce", "nll", "brier", "accuracy")
# Fig. 4a's metric set of one stage (metric_columns): binned at one bin count, then unbinned.
FIGURE_BINNED = ("ece", "ece_em", "mce", "cwce", "cwce_em", "ace", "tace")
FIGURE_UNBINNED = ("ksce", "ks_top2", "ks_within_top2", "kdece", "mmce", "nll", "brier")
DEMO = " [mini benchmark: not NATS-Bench results]"


def label(space: str, hp: str) -> str:
    """How a figure names a table family: ``tss, hp 200``, or a population's name."""
    return f"{space}, hp {hp}" if hp else str(space)


def demo_suffix(settings) -> str:
    """The title suffix of a mini-benchmark run's figures: its numbers are not NATS-Bench's."""
    return DEMO if settings.get("demo") else ""


# ---------------------------------------------------------------- reading

def table_columns(paths: Sequence[str | Path]) -> list[str]:
    """Every column name of the tables, in order of first appearance (schemas only)."""
    return list(dict.fromkeys(c for p in paths for c in pq.read_schema(p).names))


def load_tables(paths: Sequence[str | Path], columns: Callable[[str], bool] | Iterable[str] | None = None
                ) -> pd.DataFrame:
    """The tables concatenated (empty tables left out); ``columns``: the names to read, or a
    test on a name (default: every column). A column one table lacks is NaN in its rows.
    With no row in any table: an empty frame with the key columns (:data:`KEYS`) and the
    tables' columns asked for, so that a part finds nothing to do instead of no column."""
    if columns is not None and not callable(columns):
        names = set(columns)
        columns = names.__contains__
    frames = []
    for p in paths:
        if columns is None:
            frame = pd.read_parquet(p)
        else:
            frame = pd.read_parquet(p, columns=[c for c in pq.read_schema(p).names if columns(c)])
        pa.default_memory_pool().release_unused()  # arrow's buffers, converted: give them back
        if not frame.empty:
            frames.append(frame)
    if frames:
        return pd.concat(frames, ignore_index=True)
    names = [c for c in dict.fromkeys([*KEYS, *table_columns(paths)]) if columns is None or columns(c)]
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("space", "hp", "dataset", "arch_str") else float)
                         for c in dict.fromkeys([*KEYS, *names])})


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """One row per measured network (drop TSS isomorph copies, which would add ties)."""
    return df[df["arch_index"] == df["measured_by"]]


def first_seed(nets: pd.DataFrame) -> pd.DataFrame:
    """One row per measured network: its first seed (as the Kendall matrices use)."""
    first = nets.groupby(["space", "hp", "dataset", "arch_index"])["seed"].transform("min") == nets["seed"]
    return nets[first]


def nats_tables(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """(the result tables of a NATS-Bench space, the names of the others): a population of
    one's own, or a table without rows, has no search space. A damaged table is named."""
    from calibench import integrity
    from calibench.vocabulary import NATS_SPACES

    def space_of(table: Path) -> str:
        with integrity.naming(table):
            return (table_key(table) or ("",))[0]

    kept = [t for t in paths if space_of(t) in NATS_SPACES]
    return kept, [t.stem for t in paths if t not in kept]


# ---------------------------------------------------------------- stages, bins, metrics

def stages_present(df: pd.DataFrame) -> list[str]:
    """The stages of :data:`STAGES` whose ``{stage}_accuracy`` column is in ``df``, in that order."""
    return [s for s in STAGES if f"{s}_accuracy" in df.columns]


def method_stages(df: pd.DataFrame) -> list[str]:
    """The post-hoc method stages in ``df``: every present stage except ``pre``."""
    return [s for s in stages_present(df) if s != "pre"]


def stage_order(stages) -> list[str]:
    """``stages`` in report order (:data:`STAGES`), any other after them by name."""
    present = set(stages)
    return [s for s in STAGES if s in present] + sorted(present - set(STAGES))


def nearest_bins(bins: Sequence[int], target: int = 15) -> int:
    """The configured bin count closest to ``target`` (15: Guo et al.'s and the paper's
    choice); of two equally close, the smaller."""
    if not bins:
        raise ValueError("no bin counts configured")
    return min(bins, key=lambda b: (abs(int(b) - target), int(b)))


def summary_metrics(bins: Sequence[int]) -> list[str]:
    """Column suffixes of the method comparison: ECE, cwCE (= SCE), ACE and TACE at the
    bin count nearest 15, then KS error (top-1), NLL, Brier score and accuracy."""
    b = nearest_bins(bins)
    return [f"{m}_{b}" for m in BINNED_SUMMARY] + list(UNBINNED_SUMMARY)


def table_stages(paths: Sequence[str | Path]) -> dict[tuple[str, str, str], list[str]]:
    """(space, hp, dataset) -> the stages of that result table, from its schema (a table that
    holds a stage whose fit failed on every network still lists it)."""
    out = {}
    for path in paths:
        key = table_key(path)
        if key is not None:
            names = pq.read_schema(path).names
            out[key] = [s for s in STAGES if f"{s}_accuracy" in names]
    return out


def listed_stages(stages_by_table, space, hp, dataset) -> list[str] | None:
    """A table's own stages from :func:`table_stages`; None (judge by the values) if unknown."""
    if stages_by_table is None:
        return None
    return stages_by_table.get((str(space), str(hp), str(dataset)))


def group_stages(part: pd.DataFrame, stages: Sequence[str], metric: str,
                 listed: Sequence[str] | None = None) -> list[str]:
    """The stages of one table with a ``{stage}_{metric}`` column: those of ``listed`` (the
    table's own stages, :func:`table_stages`) if given; otherwise those with at least one
    non-NaN value in ``part``, since a stage missing from one table of a concatenation is
    all NaN there (a stage that failed on every network of the table is then left out too,
    and logged)."""
    out = []
    for s in stages:
        col = f"{s}_{metric}"
        if col not in part.columns:
            continue
        if listed is not None:
            if s in listed:
                out.append(s)
            continue
        if part[col].isna().all():
            if len(part) and metric == "accuracy":
                log.info("%s: no values in this table (%d rows): not run or failed everywhere", col, len(part))
            continue
        out.append(s)
    return out


def binned(bins: Sequence[int], metric: str, stage: str = "pre") -> list[str]:
    """``{stage}_{metric}_{b}`` for every configured bin count ``b``."""
    return [f"{stage}_{metric}_{b}" for b in bins]


def figure_bins(bins: Sequence[int]) -> int:
    """The bin count of Fig. 4a's binned metrics: 15 if configured, else the first."""
    return 15 if 15 in bins else bins[0]


def metric_columns(df: pd.DataFrame, bins: Sequence[int], stage: str = "pre") -> list[str]:
    """The Fig. 4a metric set of one stage at 15 bins (or the first configured bin count)
    plus the rest; accuracy is the network's (``pre``) or the stage's own (a method may
    change the arg-max)."""
    b = figure_bins(bins)
    wanted = [f"{stage}_{m}_{b}" for m in FIGURE_BINNED]
    wanted += [f"{stage}_{m}" for m in FIGURE_UNBINNED]
    wanted += ["accuracy" if stage == "pre" else f"{stage}_accuracy"]
    wanted += [c for c in df.columns if c.startswith(f"{stage}_ood_auroc_")]
    return [c for c in wanted if c in df.columns and df[c].notna().sum() > 1]


def metric_candidates(bins: Sequence[int]) -> Callable[[str], bool]:
    """A column filter for :func:`load_tables`: the keys and every column a Kendall matrix
    may rank (:func:`metric_columns` of every stage, each stage's ECE at every bin count,
    the accuracies and OoD AUROCs)."""
    b = figure_bins(bins)
    names = set(KEYS) | {"accuracy"}
    for s in STAGES:
        names.add(f"{s}_accuracy")
        names.update(binned(bins, "ece", s))
        names.update(f"{s}_{m}_{b}" for m in FIGURE_BINNED)
        names.update(f"{s}_{m}" for m in FIGURE_UNBINNED)
    ood = re.compile(r"^[a-z]+_ood_auroc_")
    return lambda c: c in names or bool(ood.match(c))


def top_populations(df: pd.DataFrame, top_k: Sequence[int], by: str = "accuracy"):
    """``("all", df)``, then ``("top{k}", the k rows largest by ``by``)`` for each k below the rows."""
    yield "all", df
    for k in top_k:
        if len(df) > k:
            yield f"top{k}", df.nlargest(k, by)
