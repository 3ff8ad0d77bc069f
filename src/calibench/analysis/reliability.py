"""Reliability diagrams of measured networks (Guo et al. 2017, Fig. 1), from the bins every
shard stores per stage (:func:`calibench.results.shards.read_reliability`).

``calibench reliability --space tss --dataset cifar10 --arch 123`` finds the shard (a TSS
architecture through its isomorphism-class representative, the table's ``measured_by``),
prints the bins and draws one panel per stage: accuracy per bin as bars, the diagonal, and
the gap between accuracy and mean confidence shaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from calibench import layout
from calibench.analysis.registry import output_path
from calibench.results import shards
from calibench.analysis.plots import pyplot


def _choices(found: Sequence[str]) -> str:
    return ", ".join(found) if found else "none: run the workflow first"


def _measured(results: Path, space: str) -> dict[str, set[str]]:
    """{hp: datasets} with shards for ``space`` ("" for a population without schedules), read
    from the folder names only (never the shard files themselves)."""
    base = layout.shards_dir(results) / layout.partition(space, "")
    out: dict[str, set[str]] = {}
    for part in (base.iterdir() if base.is_dir() else []):
        key, value = layout.partition_of(part.name) or ("", "")
        if key == "hp" and part.is_dir():
            out[value] = {kv[1] for d in part.iterdir() if (kv := layout.partition_of(d.name)) and kv[0] == "dataset"}
        elif key == "dataset":
            out.setdefault("", set()).add(value)
    return out


def _hp_of(results: Path, space: str, dataset: str, hp: str | None) -> str:
    spaces = sorted(layout.partition_of(p.name)[1] for p in layout.shards_dir(results).glob(str(layout.partition("*", ""))))
    if space not in spaces:
        raise ValueError(f"--space {space}: no shards of it under {layout.shards_dir(results)} "
                         f"(spaces measured: {_choices(spaces)})")
    measured = _measured(results, space)
    datasets = sorted(set().union(*measured.values()))
    if dataset not in datasets:
        raise ValueError(f"--dataset {dataset}: not measured for space {space} (datasets: {_choices(datasets)})")
    if hp is not None:
        hps = sorted(h for h in measured if h)
        if str(hp) not in hps:
            raise ValueError(f"--hp {hp}: not measured for space {space} (hps: {_choices(hps)})")
        return str(hp)
    if dataset in measured.get("", set()):
        return ""  # a population beyond NATS-Bench: no schedule
    found = sorted(h for h, held in measured.items() if h and dataset in held)
    if len(found) != 1:
        raise ValueError(f"{layout.shards_dir(results) / layout.partition(space, '')}: "
                         f"{'no hp holds' if not found else f'hps {found} hold'} "
                         f"dataset {dataset}; give --hp")
    return found[0]


def _measured_by(results: Path, space: str, hp: str, dataset: str, arch: int) -> int:
    """The index whose shard holds ``arch`` (TSS: the class representative), from the table."""
    table = layout.table_path(results, layout.target_name(space, hp), dataset)
    if not table.is_file():
        return arch
    rows = pq.read_table(table, columns=["arch_index", "measured_by"],
                         filters=[("arch_index", "=", arch)]).to_pydict()
    if not rows["arch_index"]:
        present = pq.read_table(table, columns=["arch_index"]).column("arch_index").to_pylist()
        shown = ", ".join(str(i) for i in sorted(present)[:10]) + (" ..." if len(present) > 10 else "")
        raise ValueError(f"--arch {arch}: not in {table} ({len(present)} architectures: {shown})")
    return int(rows["measured_by"][0])


def load(results: str | Path, space: str, dataset: str, arch: int, hp: str | None = None,
         seed: int | None = None) -> dict:
    """``{"space", "hp", "dataset", "arch", "measured_by", "seed", "shard", "stages": {stage:
    {"count", "confidence", "accuracy"}}}`` of one network (the first seed unless given)."""
    results = Path(results)
    hp = _hp_of(results, space, dataset, hp)
    source = _measured_by(results, space, hp, dataset, int(arch))
    path = layout.shard_path(results, space, hp, dataset, source)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no shard for architecture {arch} ({space}, hp {hp}, {dataset})")
    by_seed = shards.read_reliability(path)
    if not by_seed:
        raise ValueError(f"{path}: written without reliability bins (an older calibench); rerun the measurement")
    if seed is None:
        seed = min(by_seed)
    if seed not in by_seed:
        raise KeyError(f"{path}: no seed {seed} (has {sorted(by_seed)})")
    return {"space": space, "hp": hp, "dataset": dataset, "arch": int(arch), "measured_by": source, "seed": seed,
            "shard": str(path), "stages": by_seed[seed]}


def ece_of_bins(rel: Mapping) -> float:
    """The ECE the bins give: ``sum_b count_b |accuracy_b - confidence_b| / N`` (NaN if empty)."""
    count = np.asarray(rel["count"], dtype=float)
    n = np.nansum(count)
    return float(np.nansum(count * np.abs(np.asarray(rel["accuracy"]) - np.asarray(rel["confidence"]))) / n) \
        if n else float("nan")


def as_text(found: Mapping) -> str:
    """The bins of every stage as a plain table."""
    lines = [f"{found['space']} hp {found['hp']} {found['dataset']} architecture {found['arch']}"
             + (f" (measured as {found['measured_by']})" if found["measured_by"] != found["arch"] else "")
             + f", seed {found['seed']}: top-label reliability, test part"]
    for stage, rel in found["stages"].items():
        ece = ece_of_bins(rel)
        lines.append(f"\n{stage} (ECE {ece:.4f}, {len(rel['count'])} bins)")
        lines.append("  bin        count  confidence  accuracy")
        width = 1.0 / len(rel["count"])
        for j, (c, conf, acc) in enumerate(zip(rel["count"], rel["confidence"], rel["accuracy"])):
            lines.append(f"  ({j * width:.2f}, {(j + 1) * width:.2f}] {int(c):7d}  {conf:10.4f}  {acc:8.4f}")
    return "\n".join(lines)


def draw(ax, rel: Mapping, title: str) -> None:
    """One diagram: accuracy bars, the diagonal, the gap to the mean confidence shaded (red
    where over-confident, orange where under-), and the share of samples per bin."""
    count, conf, acc = (np.asarray(rel[k], dtype=float) for k in ("count", "confidence", "accuracy"))
    b = len(count)
    left = np.arange(b) / b
    ax.bar(left, np.nan_to_num(acc), width=1 / b, align="edge", color="#4c72b0", edgecolor="white",
           linewidth=0.5, label="accuracy")
    filled = count > 0
    over = filled & (conf > acc)
    ax.bar(left[over], (conf - acc)[over], bottom=acc[over], width=1 / b, align="edge", color="#dd4444",
           alpha=0.45, hatch="//", edgecolor="#aa2222", linewidth=0.3, label="gap (over-confident)")
    under = filled & (conf < acc)
    ax.bar(left[under], (acc - conf)[under], bottom=conf[under], width=1 / b, align="edge", color="#f0a030",
           alpha=0.6, hatch="\\\\", edgecolor="#b06a00", linewidth=0.3, label="gap (under-confident)")
    ax.plot([0, 1], [0, 1], color="black", linewidth=0.8, linestyle="--")
    ax.plot(conf[filled], acc[filled], "o", color="black", markersize=2.5)
    n = count.sum()
    ece = ece_of_bins(rel)
    share = count / n if n else count
    ax.step(np.r_[left, 1.0], np.r_[share, share[-1:]], where="post", color="#777777", linewidth=0.8,
            label="share of samples")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("confidence")
    ax.set_title(f"{title}\nECE {ece:.3f}", fontsize=9)


def figure(panels: Sequence[tuple[str, Mapping]], title: str, path: str | Path) -> Path:
    """Diagrams side by side (one per (label, bins) panel), saved as PNG."""
    plt = pyplot()

    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols + 0.4, 3.9 * rows + 0.8), squeeze=False)
    for ax, (label, rel) in zip(axes.flat, panels):
        draw(ax, rel, label)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    axes[0][0].set_ylabel("accuracy")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor="#4c72b0", label="accuracy"),
               Patch(facecolor="#dd4444", alpha=0.45, hatch="//", edgecolor="#aa2222", label="gap (over-confident)"),
               Patch(facecolor="#f0a030", alpha=0.6, hatch="\\\\", edgecolor="#b06a00", label="gap (under-confident)"),
               Line2D([], [], color="#777777", linewidth=0.8, label="share of samples"),
               Line2D([], [], color="black", linewidth=0.8, linestyle="--", label="perfect calibration")]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # nothing clipped: long titles, legends below
    plt.close(fig)
    return path


def plot_network(found: Mapping, path: str | Path, stages: Sequence[str] | None = None) -> Path:
    """The diagrams of one network's stages (all it has unless ``stages`` says)."""
    chosen = list(stages or found["stages"])
    missing = [s for s in chosen if s not in found["stages"]]
    if missing:
        raise KeyError(f"{found['shard']}: no stage {missing} (has {list(found['stages'])})")
    title = f"{found['space']} {found['dataset']} architecture {found['arch']} (hp {found['hp']}, seed {found['seed']})"
    return figure([(s, found["stages"][s]) for s in chosen], title, path)


# ---------------------------------------------------------------- the reliability part



def best_and_worst(hcs_df, results: str | Path, beta: float, plots: Path) -> list[tuple[str, Path]]:
    """Reliability diagrams of the best and the worst network by HCS_beta of every table, pre
    and post side by side (from the shards' bins; a table without shards, e.g. imported, has
    none). ``hcs_df``: the HCS part's ``analysis/hcs.parquet``."""
    import logging

    col = f"hcs_{beta:g}"
    out = []
    for (space, hp, dataset), part in hcs_df.dropna(subset=[col]).groupby(["space", "hp", "dataset"]):
        ranked = part.sort_values([col, "arch_index"], ascending=[False, True], kind="stable")
        panels = []
        for label, row in (("best", ranked.iloc[0]), ("worst", ranked.iloc[-1])):
            try:
                found = load(results, space, dataset, int(row["arch_index"]), hp=str(hp))
            except (OSError, KeyError, ValueError) as exc:
                logging.getLogger(__name__).info("no reliability diagram for %s %s %s: %s", space, hp, dataset, exc)
                panels = []
                break
            for stage in ("pre", "post"):
                if stage in found["stages"]:
                    panels.append((f"{label} by HCS_{beta:g}: arch {int(row['arch_index'])}, {stage}\n"
                                   f"acc {row['accuracy']:.3f}, HCS {row[col]:.3f}", found["stages"][stage]))
        if panels:
            where = f"{space}, hp {hp}" if hp else str(space)
            path = figure(panels, f"{where}, {dataset}: reliability of the best and worst network",
                          plots / f"reliability_{layout.target_name(space, hp)}_{dataset}.png")
            out.append((f"Reliability, best and worst by HCS: {space} {dataset}", path))
    return out


def run(settings: Mapping, tables: Sequence[str | Path], results: Path, plots: Path) -> dict:
    """``settings``: the registry's settings (calibench.analysis.registry) of ``reliability``
    (the beta of the ranking); reads the HCS part's ``analysis/hcs.parquet``."""
    import pandas as pd

    from calibench.analysis.parts import read_manifest

    read_manifest(results, "hcs")  # hcs.parquet checked against the HCS part's record first
    hcs_df = pd.read_parquet(output_path(results, "hcs", "hcs"))
    return {"plots": best_and_worst(hcs_df, results, settings["beta"], plots), "blocks": []}
