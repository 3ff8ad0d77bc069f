"""Architecture search over a result table, by accuracy or by HCS (Tao et al., ICLR 2024,
App. F and Table 1): does searching for HCS_beta instead of accuracy find networks that
are about as accurate and better calibrated?

The result table of one (space, hp, dataset) is the oracle: querying an architecture
returns its row. Three searchers:

* regularised evolution (Real et al., AAAI 2019): a population of random architectures;
  each step samples ``sample`` members uniformly (with replacement), mutates the best of
  them and puts the child in the population in place of the oldest member (aging);
* local search (White et al., UAI 2021): from a random architecture, query all its
  neighbours and move to the best one while that improves; at a local optimum restart
  from a random architecture not yet queried;
* random search: ``budget`` distinct architectures drawn uniformly.

Neighbours (= mutations): TSS, one of the 6 edges takes another of the 5 operations
(24 neighbours); SSS, one of the 5 layers takes another of the 8 channel counts
(35 neighbours). The searcher reports the best architecture it queried.

Protocol defaults (docs/tools.md, "NAS on HCS"): budget 100 queries, where the budget counts *distinct*
architectures (asking again for one already queried is free); evolution population 20,
tournament sample 5; local search from random starts; 100 repeats, repeat ``r`` seeded
``numpy.random.default_rng(seed + r)`` with base seed 0 (the same seeds for every
algorithm and objective). Objectives are maximised except the error-like columns (a name
part ece, mce, cwce, ace, tace, ksce, ks, kdece, mmce, nll, brier, error or loss), which
are minimised; ``maximize`` overrides. ``hcs_<beta>`` is
``calibench.metrics.scores.hcs(accuracy, pre_ece_15, beta)`` (docs/metrics.md) unless the table holds a
column of that name.

Architectures the table lacks: a mutation or neighbour that is not in the table (or
whose objective is NaN: a failed measurement) is skipped without spending budget and
another is drawn, so a mutation is uniform over the parent's neighbours present in the
table; a parent without any present neighbour is replaced by a uniformly random
architecture of the table. Evolution cannot stall: after ``population`` children in a
row that were all queried before, the next child is a random unqueried architecture. A
run stops after ``min(budget, architectures in the table)`` distinct queries, so where the
budget reaches the table's size every algorithm and run queries every architecture: Table 1
then holds one ``exhaustive`` row per objective, the table's optimum, instead of identical
repeats (issue 25). A table
with several rows per architecture (seeds) is reduced to the mean over its rows, HCS
computed per row first (as ``calibench.analysis.hcs.hcs_table``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from calibench.results.archstr import SSS_CHANNEL_CHOICES, TSS_OPS, parse_sss, parse_tss
from calibench.analysis.tables import HCS_ECE
from calibench.atomic import atomic_write
from calibench.metrics.hcs import hcs
from calibench.metrics import registry

log = logging.getLogger(__name__)

ALGORITHMS = ("evolution", "local", "random")
OBJECTIVES = ("accuracy", "hcs_1", "hcs_2", "hcs_3")
METRICS = ("accuracy", "pre_ece_15", "hcs_1", "hcs_2", "hcs_3", "pre_mmce", "pre_ksce")
BUDGET, REPEATS, SEED, POPULATION, SAMPLE = 100, 100, 0, 20, 5
# Per space: (number of positions, choices per position).
_SHAPE = {"tss": (6, len(TSS_OPS)), "sss": (5, len(SSS_CHANNEL_CHOICES))}
_HCS = re.compile(r"hcs_(\d+(?:\.\d*)?|\.\d+)")
# Name parts (split at "_") of the error-like columns, which are minimised (docs/metrics.md names).
_MINIMISED_PARTS = {"ece", "mce", "cwce", "ace", "tace", "ksce", "ks", "kdece", "mmce", "nll", "brier", "error",
                    "loss"}
_PERCENT_PARTS = {"accuracy", "ece", "mmce", "ksce", "ace", "tace", "cwce", "sce", "hcs"}


# ---------------------------------------------------------------- architectures as integer codes

@lru_cache(maxsize=None)
def _strings(space: str) -> tuple[str, ...]:
    """The canonical string of every code: digit ``d`` (least significant first) is the
    operation of edge ``d`` (TSS, string order) or the channel index of layer ``d`` (SSS)."""
    positions, radix = _SHAPE[space]
    if space == "tss":
        out = []
        for code in range(radix ** positions):
            o = [TSS_OPS[(code // radix ** d) % radix] for d in range(positions)]
            out.append(f"|{o[0]}~0|+|{o[1]}~0|{o[2]}~1|+|{o[3]}~0|{o[4]}~1|{o[5]}~2|")
        return tuple(out)
    names = [str(c) for c in SSS_CHANNEL_CHOICES]
    return tuple(":".join(names[(code // radix ** d) % radix] for d in range(positions))
                 for code in range(radix ** positions))


@lru_cache(maxsize=None)
def _code_of(space: str) -> dict[str, int]:
    return {s: i for i, s in enumerate(_strings(space))}


def _encode(arch_str: str, space: str) -> int:
    code = _code_of(space).get(arch_str)
    if code is not None:
        return code
    positions, radix = _SHAPE[space]  # not canonical: parse (raises ValueError naming a malformed string)
    if space == "tss":
        digits = [TSS_OPS.index(op) for node in parse_tss(arch_str) for op, _ in node]
    else:
        digits = [SSS_CHANNEL_CHOICES.index(c) for c in parse_sss(arch_str)]
    return sum(d * radix ** i for i, d in enumerate(digits))


def _space_of(arch_str: str) -> str:
    return "tss" if "~" in arch_str else "sss"


def _neighbour_codes(codes: np.ndarray, space: str) -> np.ndarray:
    """(n, positions * (radix - 1)) codes of the neighbours, position-major, choices ascending."""
    positions, radix = _SHAPE[space]
    codes = np.asarray(codes, np.int64)
    powers = radix ** np.arange(positions, dtype=np.int64)
    digits = (codes[:, None] // powers) % radix  # (n, positions)
    choices = np.arange(radix, dtype=np.int64)
    cand = codes[:, None, None] + (choices[None, None, :] - digits[:, :, None]) * powers[None, :, None]
    keep = choices[None, None, :] != digits[:, :, None]
    return cand[keep].reshape(len(codes), positions * (radix - 1))


def neighbours(arch_str: str, space: str | None = None) -> list[str]:
    """Every architecture one mutation away: TSS, one edge's operation changed (24); SSS,
    one layer's channel count changed (35). Canonical strings."""
    space = space or _space_of(arch_str)
    if space not in _SHAPE:
        raise ValueError(f"space {space!r}: expected 'tss' or 'sss'")
    strings = _strings(space)
    return [strings[c] for c in _neighbour_codes(np.array([_encode(arch_str, space)]), space)[0]]


# ---------------------------------------------------------------- the table as an oracle

def _maximised(name: str) -> bool:
    """The registry's direction (:mod:`calibench.metrics.registry`, as ``top`` sorts); for a
    column it does not know (a user's), error-like names are minimised."""
    better = registry.higher_is_better(name)
    if better is not None:
        return better
    return not set(name.lower().split("_")) & _MINIMISED_PARTS


def _values(df: pd.DataFrame, name: str, required: bool) -> np.ndarray | None:
    """Per row: column ``name``, or HCS_beta for ``hcs_<beta>``; None (or ValueError naming
    the missing column when ``required``) if the table cannot give it."""
    if name in df.columns:
        try:
            return df[name].to_numpy(dtype=float)
        except (TypeError, ValueError):
            if required:
                raise ValueError(f"objective column {name!r} is not numeric") from None
            return None
    m = _HCS.fullmatch(name)
    if m:
        missing = [c for c in ("accuracy", HCS_ECE) if c not in df.columns]
        if not missing:
            return hcs(df["accuracy"].to_numpy(dtype=float), df[HCS_ECE].to_numpy(dtype=float), float(m.group(1)))
        if required:
            raise ValueError(f"objective {name!r} needs column(s) {missing} (HCS from accuracy and {HCS_ECE}), "
                             f"which the table lacks")
        return None
    if required:
        raise ValueError(f"objective {name!r}: no such column in the table (and not hcs_<beta>)")
    return None


@dataclass
class _Oracle:
    """One row per architecture: its code, string, index and the needed values."""

    space: str
    codes: np.ndarray
    arch_str: np.ndarray  # object
    arch_index: np.ndarray | None
    values: dict[str, np.ndarray]


def _oracle(df: pd.DataFrame, objectives: Sequence[str], metrics: Sequence[str]) -> _Oracle:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"expected a pandas DataFrame, got {type(df).__name__}")
    if "arch_str" not in df.columns:
        raise ValueError("the table has no 'arch_str' column")
    if df.empty:
        raise ValueError("the table is empty: no architecture to search")
    for col in ("space", "hp", "dataset"):
        if col in df.columns and df[col].nunique(dropna=True) > 1:
            raise ValueError(f"column {col!r} holds several values {sorted(map(str, df[col].dropna().unique()))}: "
                             f"search one (space, hp, dataset) table at a time")
    strings = df["arch_str"].astype(str).to_numpy()
    space = None
    if "space" in df.columns and df["space"].notna().any():
        space = str(df["space"].dropna().iloc[0])
        if space not in _SHAPE:
            raise ValueError(f"space {space!r} is not a NATS-Bench space (tss, sss): NAS searches those spaces only")
    space = space or _space_of(strings[0])
    lookup = _code_of(space)
    codes = np.fromiter((lookup.get(s, -1) for s in strings), np.int64, len(strings))
    for i in np.flatnonzero(codes < 0):
        codes[i] = _encode(strings[i], space)
    values = {name: _values(df, name, required=True) for name in dict.fromkeys(objectives)}
    for name in metrics:
        if name not in values:
            v = _values(df, name, required=False)
            if v is not None:
                values[name] = v
    index = df["arch_index"].to_numpy() if "arch_index" in df.columns else None
    first = pd.unique(codes)
    if len(first) == len(codes):
        return _Oracle(space, codes, strings, index, values)
    frame = pd.DataFrame(values)
    frame["_code"] = codes
    means = frame.groupby("_code", sort=False).mean()  # NaN-skipping mean over an architecture's rows
    pos = pd.Series(np.arange(len(codes))).groupby(codes, sort=False).first().loc[first].to_numpy()
    return _Oracle(space, first.astype(np.int64), strings[pos], None if index is None else index[pos],
                   {k: means.loc[first, k].to_numpy(dtype=float) for k in values})


@dataclass
class _Landscape:
    """The architectures with a value for one objective; scores are maximised."""

    rows: np.ndarray  # position in the oracle of each architecture here
    score: np.ndarray
    nbr: np.ndarray  # (n, m): present neighbours first, then -1
    count: np.ndarray  # present neighbours per architecture

    @property
    def n(self) -> int:
        return len(self.rows)


def _landscape(oracle: _Oracle, objective: str, maximize: bool) -> _Landscape:
    v = oracle.values[objective]
    rows = np.flatnonzero(~np.isnan(v))
    if len(rows) == 0:
        raise ValueError(f"objective {objective!r}: no architecture of the table has a value")
    if len(rows) < len(v):
        log.info("%s: %d of %d architectures have no value and are left out of the search",
                 objective, len(v) - len(rows), len(v))
    positions, radix = _SHAPE[oracle.space]
    lookup = np.full(radix ** positions, -1, np.int64)
    lookup[oracle.codes[rows]] = np.arange(len(rows))
    nbr = lookup[_neighbour_codes(oracle.codes[rows], oracle.space)]
    order = np.argsort(nbr < 0, axis=1, kind="stable")
    nbr = np.take_along_axis(nbr, order, axis=1)
    score = v[rows] if maximize else -v[rows]
    return _Landscape(rows, score, nbr, (nbr >= 0).sum(axis=1))


# ---------------------------------------------------------------- the searchers (positions in a landscape)

def _random_unqueried(rng: np.random.Generator, queried: np.ndarray, used: int) -> int:
    n = len(queried)
    if 2 * used < n:
        while True:
            p = int(rng.integers(n))
            if not queried[p]:
                return p
    free = np.flatnonzero(~queried)
    return int(free[rng.integers(len(free))])


def _random_search(land: _Landscape, budget: int, rng: np.random.Generator, **_) -> np.ndarray:
    return rng.choice(land.n, size=min(budget, land.n), replace=False)


def _evolution(land: _Landscape, budget: int, rng: np.random.Generator, population: int = POPULATION,
               sample: int = SAMPLE) -> np.ndarray:
    """Regularised evolution (Real et al. 2019, Alg. 1), aging by a ring buffer."""
    n, budget = land.n, min(budget, land.n)
    score, nbr, count = land.score, land.nbr, land.count
    queried = np.zeros(n, bool)
    pop = rng.choice(n, size=min(population, budget), replace=False)
    queried[pop] = True
    order = pop.tolist()
    size, head, stall = len(pop), 0, 0
    block, at = 256, 256
    while len(order) < budget:
        if at == block:  # random numbers in blocks: one call per 256 steps
            draws, at = rng.random((block, sample + 1)), 0
        u = draws[at]
        at += 1
        cand = pop[(u[:sample] * size).astype(np.intp)]
        parent = cand[np.argmax(score[cand])]
        if stall >= population:
            child = _random_unqueried(rng, queried, len(order))
        else:
            k = count[parent]
            child = nbr[parent, int(u[sample] * k)] if k else int(u[sample] * n)
        if queried[child]:
            stall += 1
        else:
            queried[child] = True
            order.append(child)
            stall = 0
        pop[head] = child
        head = (head + 1) % size
    return np.asarray(order, np.int64)


def _local_search(land: _Landscape, budget: int, rng: np.random.Generator, **_) -> np.ndarray:
    """Best-improvement hill climbing with random restarts (White et al. 2021)."""
    n, budget = land.n, min(budget, land.n)
    score, nbr, count = land.score, land.nbr, land.count
    queried = np.zeros(n, bool)
    order: list[int] = []
    while len(order) < budget:
        cur = _random_unqueried(rng, queried, len(order))
        queried[cur] = True
        order.append(cur)
        while len(order) < budget and count[cur]:
            nb = nbr[cur, rng.permutation(count[cur])]  # random order: ties and a budget cut
            fresh = ~queried[nb]
            if fresh.any():
                room = budget - len(order)
                if fresh.sum() > room:  # the budget ends inside this neighbourhood
                    keep = ~fresh | (np.cumsum(fresh) <= room)
                    nb, fresh = nb[keep], fresh[keep]
                new = nb[fresh]
                queried[new] = True
                order.extend(new.tolist())
            best = nb[np.argmax(score[nb])]
            if score[best] <= score[cur]:
                break
            cur = best
    return np.asarray(order, np.int64)


_SEARCHERS = {"evolution": _evolution, "local": _local_search, "random": _random_search}


def _check(algorithms: Sequence[str], budget: int, repeats: int, population: int, sample: int) -> None:
    for a in algorithms:
        if a not in _SEARCHERS:
            raise ValueError(f"algorithm {a!r}: expected one of {ALGORITHMS}")
    for name, value in (("budget", budget), ("repeats", repeats), ("population", population), ("sample", sample)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _found(land: _Landscape, order: np.ndarray) -> int:
    """The landscape position of the best queried architecture (the first queried among equals)."""
    return int(order[np.argmax(land.score[order])])


@dataclass(frozen=True)
class SearchResult:
    arch_str: str
    arch_index: int | None
    value: float  # the objective's value of the found architecture
    queries: int  # distinct architectures queried


def search(df: pd.DataFrame, objective: str = "accuracy", algorithm: str = "evolution", *, budget: int = BUDGET,
           seed: int = SEED, population: int = POPULATION, sample: int = SAMPLE,
           maximize: bool | None = None) -> SearchResult:
    """One search run over the table ``df`` with ``numpy.random.default_rng(seed)``."""
    _check([algorithm], budget, 1, population, sample)
    oracle = _oracle(df, [objective], ())
    land = _landscape(oracle, objective, _maximised(objective) if maximize is None else maximize)
    order = _SEARCHERS[algorithm](land, budget, np.random.default_rng(seed), population=population, sample=sample)
    row = land.rows[_found(land, order)]
    return SearchResult(str(oracle.arch_str[row]), None if oracle.arch_index is None else int(oracle.arch_index[row]),
                        float(oracle.values[objective][row]), len(order))


# ---------------------------------------------------------------- Table 1

def nas_table(df: pd.DataFrame, objectives: Sequence[str] = OBJECTIVES, algorithms: Sequence[str] = ALGORITHMS,
              budget: int = BUDGET, repeats: int = REPEATS, seed: int = SEED, *, population: int = POPULATION,
              sample: int = SAMPLE, metrics: Sequence[str] = METRICS,
              maximize: Mapping[str, bool] | None = None, collapse: bool = True) -> pd.DataFrame:
    """Tao et al. Table 1: one row per (algorithm, objective) with the mean and sd (ddof 1)
    over ``repeats`` runs of each metric of the found architecture (``{m}_mean``,
    ``{m}_sd``; ``metrics`` the table cannot give are left out, the objectives are always
    in), ``hit_rate`` (share of runs that found an architecture with the best value of the
    objective), ``queries_mean``, and the architecture found most often (``top_arch``,
    ``top_arch_index``, ``top_arch_share``; ties: the one found first) and ``exhaustive``
    (False). Where ``budget`` reaches the objective's architectures (and ``collapse``), every
    run would query them all: one row with algorithm ``exhaustive``, ``exhaustive`` True,
    the optimum's metrics (``_sd`` NaN), hit rate 1, ``repeats`` 1 (:func:`_optimum_row`)."""
    objectives, algorithms = list(objectives), list(algorithms)
    if not objectives or not algorithms:
        raise ValueError("need at least one objective and one algorithm")
    _check(algorithms, budget, repeats, population, sample)
    oracle = _oracle(df, objectives, metrics)
    shown = [m for m in dict.fromkeys([*metrics, *objectives]) if m in oracle.values]
    maximize = dict(maximize or {})
    rows = []
    for objective in objectives:
        up = maximize.get(objective, _maximised(objective))
        land = _landscape(oracle, objective, up)
        best = land.score.max()
        if collapse and budget >= land.n:
            rows.append(_optimum_row(oracle, land, objective, up, budget, seed, shown))
            continue
        for algorithm in algorithms:
            run = _SEARCHERS[algorithm]
            found = np.empty(repeats, np.int64)
            queries = np.empty(repeats, np.int64)
            for r in range(repeats):
                order = run(land, budget, np.random.default_rng(seed + r), population=population, sample=sample)
                found[r], queries[r] = _found(land, order), len(order)
            picked = land.rows[found]
            row = {"algorithm": algorithm, "objective": objective, "maximize": up, "budget": budget,
                   "repeats": repeats, "seed": seed, "architectures": land.n}
            for m in shown:
                v = oracle.values[m][picked]
                row[f"{m}_mean"] = float(np.nanmean(v)) if not np.isnan(v).all() else np.nan
                row[f"{m}_sd"] = float(np.nanstd(v, ddof=1)) if np.count_nonzero(~np.isnan(v)) > 1 else np.nan
            row["hit_rate"] = float(np.mean(land.score[found] == best))
            row["queries_mean"] = float(queries.mean())
            uniq, first, counts = np.unique(picked, return_index=True, return_counts=True)
            top = uniq[np.lexsort((first, -counts))[0]]
            row["top_arch"] = str(oracle.arch_str[top])
            row["top_arch_index"] = None if oracle.arch_index is None else int(oracle.arch_index[top])
            row["top_arch_share"] = float(counts.max() / repeats)
            row["exhaustive"] = False
            rows.append(row)
    return pd.DataFrame(rows)


def _optimum_row(oracle: _Oracle, land: _Landscape, objective: str, up: bool, budget: int, seed: int,
                 shown: Sequence[str]) -> dict:
    """The row of an exhaustive search: the best architecture of the landscape (the first in
    table order among equals), as every algorithm's every run would find it."""
    top = land.rows[_found(land, np.arange(land.n))]
    row = {"algorithm": "exhaustive", "objective": objective, "maximize": up, "budget": budget, "repeats": 1,
           "seed": seed, "architectures": land.n}
    for m in shown:
        row[f"{m}_mean"], row[f"{m}_sd"] = float(oracle.values[m][top]), np.nan
    row.update({"hit_rate": 1.0, "queries_mean": float(land.n), "top_arch": str(oracle.arch_str[top]),
                "top_arch_index": None if oracle.arch_index is None else int(oracle.arch_index[top]),
                "top_arch_share": 1.0, "exhaustive": True})
    return row


def _percent(metric: str) -> bool:
    return bool(set(metric.lower().split("_")) & _PERCENT_PARTS)


def _display(table: pd.DataFrame) -> tuple[list[str], list[list[str]], str]:
    """Header, rows of cells (mean ± sd per metric: accuracy, calibration errors and HCS in
    %; hit rate; the most often found architecture and its share) and the protocol line."""
    metrics = [c[:-5] for c in table.columns if c.endswith("_mean") and f"{c[:-5]}_sd" in table.columns
               and c != "queries_mean"]
    head = ["algorithm", "objective", *[f"{m} (%)" if _percent(m) else m for m in metrics], "hit rate",
            "most often found (share)"]
    exhaustive = table["exhaustive"].astype(bool) if "exhaustive" in table else pd.Series(False, table.index)
    protocol = ""
    searched = table[~exhaustive]
    if len(searched):
        t = searched.iloc[0]
        seed, repeats = int(t["seed"]), int(t["repeats"])
        protocol = (f"Mean ± sd over {repeats} runs (seeds {seed}..{seed + repeats - 1}), "
                    f"budget {int(t['budget'])} distinct architectures.")
    if exhaustive.any():
        t = table[exhaustive].iloc[0]
        which = "" if exhaustive.all() else f" for {', '.join(table.loc[exhaustive, 'objective'])}"
        protocol = (protocol + " " if protocol else "") + (
            f"Exhaustive{which}: the budget ({int(t['budget'])} distinct architectures) reaches all "
            f"{int(t['architectures'])} architectures of the table, so every algorithm and run queries every one; "
            f"the optimum is shown instead of identical repeats.")

    def cell(mean, sd, pct):
        if pd.isna(mean):
            return "–"
        k = 100.0 if pct else 1.0
        fmt = "{:.2f}" if pct else "{:.4g}"
        return fmt.format(mean * k) + ("" if pd.isna(sd) else " ± " + fmt.format(sd * k))

    rows = []
    for i, r in table.iterrows():
        values = [cell(r[f"{m}_mean"], r[f"{m}_sd"], _percent(m)) for m in metrics]
        if exhaustive[i]:
            rows.append([str(r["algorithm"]), str(r["objective"]), *values, "optimum", f"{r['top_arch']} (optimum)"])
            continue
        rows.append([str(r["algorithm"]), str(r["objective"]), *values, f"{100 * r['hit_rate']:.0f}%",
                     f"{r['top_arch']} ({100 * r['top_arch_share']:.0f}%)"])
    return head, rows, protocol


def nas_markdown(table: pd.DataFrame, title: str | None = None) -> str:
    """``table`` of :func:`nas_table` as a Markdown table: mean ± sd per metric (accuracy,
    calibration errors and HCS in %), the most often found architecture and its share."""
    head, rows, protocol = _display(table)
    lines = []
    if title:
        lines += [f"### {title}", ""]
    if protocol:
        lines += [protocol, ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        arch, share = r[-1].rsplit(" (", 1)
        lines.append("| " + " | ".join([*r[:-1], f"`{arch.replace('|', chr(92) + '|')}` ({share}"]) + " |")
    return "\n".join(lines) + "\n"


def nas_html(table: pd.DataFrame, title: str | None = None) -> str:
    """The same table as :func:`nas_markdown`, as an HTML fragment."""
    import html

    head, rows, protocol = _display(table)
    out = [f"<h4>{html.escape(title)}</h4>"] if title else []
    if protocol:
        out.append(f"<p>{html.escape(protocol)}</p>")
    out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
               + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
               + "</table>")
    return "".join(out)


def run_nas(table_path: str | Path, out_path: str | Path, *, objectives: Sequence[str] = OBJECTIVES,
            algorithms: Sequence[str] = ALGORITHMS, budget: int = BUDGET, repeats: int = REPEATS, seed: int = SEED,
            population: int = POPULATION, sample: int = SAMPLE) -> pd.DataFrame:
    """:func:`nas_of_table`, then :func:`write_nas` to ``out_path`` (CSV) and beside it (.md)."""
    result = nas_of_table(table_path, objectives=objectives, algorithms=algorithms, budget=budget, repeats=repeats,
                          seed=seed, population=population, sample=sample)
    write_nas(result, table_path, out_path)
    return result


def nas_of_table(table_path: str | Path, *, objectives: Sequence[str] = OBJECTIVES,
                 algorithms: Sequence[str] = ALGORITHMS, budget: int = BUDGET, repeats: int = REPEATS,
                 seed: int = SEED, population: int = POPULATION, sample: int = SAMPLE) -> pd.DataFrame:
    """:func:`nas_table` of one result table (parquet), nothing written."""
    import pyarrow.parquet as pq

    names = pq.read_schema(table_path).names
    wanted = {"space", "hp", "dataset", "arch_index", "arch_str", "accuracy", HCS_ECE, *METRICS, *objectives}
    df = pd.read_parquet(table_path, columns=[c for c in names if c in wanted])
    return nas_table(df, objectives, algorithms, budget, repeats, seed, population=population, sample=sample)


def write_nas(result: pd.DataFrame, table_path: str | Path, out_path: str | Path) -> None:
    """:func:`run_nas`'s CSV and Markdown of ``result``."""
    table_path, out_path = Path(table_path), Path(out_path)
    def csv(f):
        f.write(result.to_csv(index=False).encode())

    def md(f):
        f.write(nas_markdown(result, title=f"NAS by accuracy and HCS: {table_path.stem}").encode())

    atomic_write(out_path, csv)
    atomic_write(out_path.with_suffix(".md"), md)


# ---------------------------------------------------------------- the NAS part



def nas_tables(df: pd.DataFrame, options: Mapping | None = None) -> pd.DataFrame:
    """Tao et al. Table 1 for every result table (:func:`nas_table` over all its
    architectures): space, hp, dataset, then the NAS columns. ``options`` (``analysis.nas``):
    repeats, budget, seed; the protocol's defaults otherwise."""
    options = dict(options or {})
    out = []
    for (space, hp, dataset), part in df.groupby(["space", "hp", "dataset"]):
        if part["accuracy"].notna().sum() < 2:
            continue
        t = nas_table(part, repeats=int(options.get("repeats", REPEATS)), budget=int(options.get("budget", BUDGET)),
                      seed=int(options.get("seed", SEED)))
        out.append(t.assign(space=space, hp=str(hp), dataset=dataset))
    if not out:
        return pd.DataFrame(columns=["space", "hp", "dataset"])
    res = pd.concat(out, ignore_index=True)
    return res[["space", "hp", "dataset", *[c for c in res.columns if c not in ("space", "hp", "dataset")]]]


def nas_tables_html(result: pd.DataFrame) -> str:
    """:func:`nas_html` of every table of :func:`nas_tables`, in (space, hp, dataset) order."""
    if result.empty:
        return ""
    return "".join(nas_html(part.drop(columns=["space", "hp", "dataset"]), f"{space} hp {hp}, {dataset}")
                   for (space, hp, dataset), part in result.groupby(["space", "hp", "dataset"], sort=True))


def run(settings: Mapping, tables: Sequence[str | Path], results: Path, plots: Path) -> dict:
    """The NAS part (NATS-Bench spaces only): ``analysis/nas.csv`` and the report's tables.
    ``settings``: the registry's settings (calibench.analysis.registry) of ``nas``."""
    from calibench.analysis.tables import KEYS, load_tables
    from calibench.analysis.registry import output_path
    from calibench.vocabulary import NATS_SPACES

    wanted = {*KEYS, "accuracy", HCS_ECE, *METRICS, *OBJECTIVES}
    df = load_tables(tables, wanted)
    nats = df[df["space"].isin(NATS_SPACES)] if not df.empty else pd.DataFrame(columns=["space", "hp", "dataset"])
    result = nas_tables(nats, settings["analysis"].get("nas", {}))
    result.to_csv(output_path(results, "nas", "nas"), index=False)
    return {"plots": [], "blocks": [("nas", 20, nas_tables_html(result))]}


__all__ = ["ALGORITHMS", "OBJECTIVES", "METRICS", "SearchResult", "neighbours", "search", "nas_table",
           "nas_markdown", "nas_html", "run_nas", "nas_of_table", "write_nas", "nas_tables", "nas_tables_html", "run"]
