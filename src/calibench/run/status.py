"""`calibench status`: what is complete, missing, damaged or stale for the config, and what a
run would redo (the measurement plan a dry run of `calibench run` prints too); runs nothing."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from calibench import layout, vocabulary
from calibench.run.targets import _config_and_targets


def _recorded_settings(table: str) -> dict | None:
    """The measurement settings ``table`` recorded (its chunks'); None for a missing or damaged
    table (its status says so) or one from before tables recorded them."""
    from calibench.results.tables import table_metadata

    try:
        return table_metadata(table).get("settings")
    except Exception:  # noqa: BLE001 - a missing or damaged table: its status says so
        return None


def _settings_changed(config: dict, recorded: dict | None) -> str:
    """"settings changed: key: old → new; ..." between what a table recorded (``recorded``, its
    chunks' measurement settings: :func:`_recorded_settings`) and the config now; "" when none
    differs or nothing was recorded.
    Lambda, mu left to the search and the search's flag are not config keys."""
    from calibench.analysis.compare import flatten_settings
    from calibench.config.settings import LEFT_OUT_AT_DEFAULT, measurement_settings

    if not recorded:
        return ""
    old, new = flatten_settings(recorded), flatten_settings(measurement_settings(config))
    changes = []
    for key in list(new) + [k for k in old if k not in new]:
        absent = LEFT_OUT_AT_DEFAULT.get(key, "(absent)")
        before, after = old.get(key, absent), new.get(key, absent)
        searched = key.endswith((".lambda", ".mu")) and after == ""
        if before != after and not searched and not key.endswith(vocabulary.SEARCH_FLAG):
            changes.append(f"{key}: {before} → {after}")
    return "settings changed: " + "; ".join(changes) if changes else ""


# the search's settings (calibench.config.settings.odir_search_settings) by the config key that sets them
_SEARCH_KEYS = {"networks": "recalibration.odir.search.networks", "folds": "recalibration.odir.search.folds",
                "seed": "recalibration.odir.search.seed", "grid": "recalibration.odir.search.grid",
                "max_iterations": "recalibration.odir.search.max_iterations (or recalibration.max_iterations)",
                "tolerance": "recalibration.tolerance", "split.val_fraction": "temperature.val_fraction",
                "split.seed": "temperature.seed", "stages": "the searched stages (lambda, mu left null)",
                "fit_rules": "the fits' rules (this version of calibench)"}


def _search_changed(config: dict, table: str) -> str:
    """"the lambda, mu search reruns: key: old → new; ..." where the settings the table's search
    recorded differ from the config's (docs/recalibration.md, "Choosing lambda and mu"); "" when
    the config searches nothing, the search has not run (Snakemake plans it) or none differs."""
    from calibench import integrity
    from calibench.analysis.compare import flatten_settings
    from calibench.config.settings import odir_search_settings, odir_searched_stages

    if not odir_searched_stages(config):
        return ""
    target, _, dataset = Path(table).stem.rpartition("_")
    try:
        recorded = integrity.read_json(layout.odir_path(config["results"], target, dataset))["settings"]
    except Exception:  # noqa: BLE001 - missing or damaged: the run plans the search, repair says why
        return ""
    old, new = flatten_settings(recorded), flatten_settings(odir_search_settings(config))
    changes = [f"{_SEARCH_KEYS.get(k, k)}: {old.get(k, '(absent)')} → {new.get(k, '(absent)')}"
               for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return "the lambda, mu search reruns: " + "; ".join(changes) if changes else ""


class FitStages(NamedTuple):
    """What a measurement rerun of a table does stage by stage (:func:`_fit_stages`)."""

    refitted: list[str]  # fitted again
    reapplied: list[str]  # re-applied from the fit store and measured whole
    pre_again: bool  # pre (no fit) measured again
    kept: list[str]  # rows kept (measured at ``added`` bin counts only where there are some)
    added: list[int]
    has_fits: bool  # the config measures a stage with a fit


def _fit_stages(config: dict, table: str, recorded: dict | None) -> FitStages | None:
    """What a measurement rerun of ``table`` does stage by stage (docs/running.md, "The fit
    store"), from the settings the table recorded and the config now (``recorded``:
    :func:`_recorded_settings` of ``table``); None when nothing was recorded. Lambda, mu left to
    the search count as recorded."""
    from calibench.config.settings import measurement_settings, stage_fit_settings, stage_measurement_settings

    if not recorded:
        return None
    new = measurement_settings(config)
    for stage in vocabulary.ODIR_STAGES:
        given, before = new["recalibration"].get(stage), recorded.get("recalibration", {}).get(stage)
        if given and before:
            given.update({k: before.get(k) for k in ("lambda", "mu") if given.get(k) is None})
            given.setdefault(vocabulary.SEARCH_FLAG, before.get(vocabulary.SEARCH_FLAG))
    target, _, dataset = Path(table).stem.rpartition("_")
    space, hp = layout.split_target(target)
    stored = any(layout.fits_path(config["results"], space, hp, dataset, 0).parent.glob("*.parquet"))
    added = [b for b in new["bins"] if b not in recorded.get("bins", [])]
    was = recorded.get("stages", []) if _records_stage_keys(config["results"], space, hp, dataset) else []
    kept = [s for s in new["stages"] if s in was and (stored or s == "pre" or not added)
            and stage_measurement_settings(recorded, s) == stage_measurement_settings(new, s)]
    fitted = [s for s in new["stages"] if s != "pre" and s not in kept]
    held = _held_in_fit_store(config["results"], new, table, space, hp, dataset,
                              [s for s in fitted if s not in was]) if stored else set()
    same = [s for s in fitted if stored and (s in held or s in was and
                                             stage_fit_settings(recorded, s) == stage_fit_settings(new, s))]
    return FitStages([s for s in fitted if s not in same], same, "pre" in new["stages"] and "pre" not in kept, kept,
                     added, bool(fitted or any(s != "pre" for s in new["stages"])))


def _fit_plan(config: dict, table: str, recorded: dict | None) -> str:
    """:func:`_fit_stages` in words ("fits made again: ...; re-applied from the fit store and
    measured whole: ...; measured again (no fit): pre; rows kept: ..."); "" when nothing was
    recorded."""
    return _fit_plan_words(_fit_stages(config, table, recorded))


def _fit_plan_words(stages: FitStages | None) -> str:
    if stages is None:
        return ""
    parts = []
    if stages.has_fits:
        parts.append(f"fits made again: {', '.join(stages.refitted) or 'none'}")
    if stages.reapplied:
        parts.append(f"re-applied from the fit store and measured whole: {', '.join(stages.reapplied)}")
    if stages.pre_again:  # the stage without a fit
        parts.append("measured again (no fit): pre")
    kept, added = stages.kept, stages.added
    if kept and added:
        parts.append(f"measured at the new bin counts only ({', '.join(map(str, added))}): {', '.join(kept)}")
    elif kept:
        parts.append(f"rows kept: {', '.join(kept)}")
    return "; ".join(parts)


def _rerun_plan(config: dict, table: str, recorded: dict | None) -> str:
    """Why ``table``'s measurement reruns and what it does: the settings that changed
    (:func:`_settings_changed`, :func:`_search_changed`), then :func:`_fit_plan` and
    :func:`_after_search`; "" when no recorded setting differs from the config's."""
    search = _search_changed(config, table)
    said = "; ".join(filter(None, [_settings_changed(config, recorded), search]))
    if not said:
        return ""
    stages = _fit_stages(config, table, recorded)
    plan = _fit_plan_words(stages)
    after = _after_search(config, stages.refitted if stages else []) if search else ""
    return said + (f"; {plan}" if plan else "") + after


def _held_in_fit_store(results, settings: dict, table: str, space: str, hp: str, dataset: str,
                       stages: list[str]) -> set[str]:
    """Of ``stages`` (not in the table's recorded stages: a stage dropped, then added back), those
    whose fit under ``settings`` the fit store holds for the table's first network: its rerun
    re-applies them (the job checks each network's keys, :func:`calibench.store.fits.fit_keys`).
    Read from one fit file; set() where anything is missing or unreadable."""
    if not stages:
        return set()
    import pyarrow.parquet as pq

    from calibench.store import fits as fit_store
    from calibench.store.logits import read_labels

    try:
        first = pq.read_table(table, columns=["arch_index", "seed", "logits_key"]).slice(0, 1).to_pylist()
        if not first:
            return set()
        row = first[0]
        labels = layout.labels_path(results, dataset, space=None if space in vocabulary.NATS_SPACES else space)
        keys = fit_store.fit_keys({**settings, "stages": stages}, row["logits_key"],
                                  read_labels(labels).meta["labels_sha256"])
        held = fit_store.read_network_fits(layout.fits_path(results, space, hp, dataset, row["arch_index"]))
    except Exception:  # noqa: BLE001 - anything missing or damaged: the plan says fits made again, the job decides
        return set()
    own = held.get(row["seed"], {})
    return {s for s in stages if s in own and own[s].key == keys[s]}


def _records_stage_keys(results, space: str, hp: str, dataset: str) -> bool:
    """Whether the shards of a table record their stages' keys (a shard written before they did
    keeps no rows: it is measured whole); read from one shard's footer."""
    import pyarrow.parquet as pq

    from calibench.results.shards import MEASURED_KEY

    first = next(iter(layout.matching(layout.shard_path(results, space, hp, dataset, "*"))), None)
    try:
        return first is not None and MEASURED_KEY in (pq.read_schema(first).metadata or {})
    except Exception:  # noqa: BLE001 - a damaged shard is measured again: repair says so
        return False


def _measurement_plan(config: dict, tables: list[str]) -> list[str]:
    """For a dry run of ``calibench run``: each table whose recorded measurement settings differ
    from the config's, with the fitted stages its rerun fits again and those it re-applies from
    the fit store (what ``calibench status`` says of it)."""
    return [f"{table}: {said}" for table in tables if (said := _rerun_plan(config, table, _recorded_settings(table)))]


def _after_search(config: dict, refitted: list[str]) -> str:
    """What follows a search that reruns: its stages not ``refitted`` anyway (the plan's
    :func:`_fit_stages`) are fitted again only where it chooses another lambda, mu (the
    measure jobs compare each stage's key)."""
    from calibench.config.settings import odir_searched_stages

    stages = [s for s in odir_searched_stages(config) if s not in refitted]
    return f" ({', '.join(stages)}: fitted again where the search chooses another lambda, mu)" if stages else ""


def _failed_networks(results: Path, table: str) -> str:
    """"N network(s) failed: see results/failures/…" for a complete table; "" when none did."""
    import pyarrow.parquet as pq

    target, _, dataset = Path(table).stem.rpartition("_")
    failures = layout.failures_path(results, target, dataset)
    try:
        frame = pq.read_table(failures, columns=["arch_index"]).to_pandas()
    except Exception:  # noqa: BLE001 - no failures file (a table from before them) or a damaged one: repair says so
        return ""
    n = frame["arch_index"].nunique()
    return f"{n} network(s) failed: see {failures}" if n else ""


def _after_tables(target: str) -> bool:
    """An analysis part's manifest, the report or the explorer: built from every table."""
    return target.endswith(".html") or Path(target).parent.name == "parts"


def summary_plan(configfile: str, targets: list[str],
                 extra: list[str] = ()) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Snakemake's plan for ``targets`` as a dry run's ``--summary`` (it runs nothing): the
    finished process and its rows, each ``[output_file, date, rule, log-file(s), status, plan]``
    (the header left out; [] where Snakemake failed)."""
    cmd = [sys.executable, "-m", "snakemake", "--configfile", configfile, "--cores", "1", "--summary", "--dry-run",
           *targets, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    rows = [cells for line in proc.stdout.splitlines() if len(cells := line.split("\t")) >= 6
            and cells[0] != "output_file"] if proc.returncode == 0 else []
    return proc, rows


def _status(args: argparse.Namespace) -> int:
    """What is complete, missing, damaged or stale for the current config; runs nothing and
    changes no file under the results or the checkout (--summary as a dry run writes no run
    log under .snakemake/, though Snakemake drops a dry run's file-state cache there, as every
    run does; the repair check in planning mode)."""
    from calibench.analysis.registry import rule_name
    from calibench.report.page import left_out_of
    from calibench.run import repair

    config, targets = _config_and_targets(args)
    proc, summary = summary_plan(args.configfile, targets, args.snakemake_args)
    if proc.returncode != 0:  # Snakemake's message without its frames: what the Snakefile said
        # as a dry run Snakemake may say the Snakefile's error on stdout
        lines = [line.strip() for line in (proc.stderr + "\n" + proc.stdout).splitlines()
                 if line.strip() and not line.startswith("Using workflow specific profile")]
        start = max((i for i, line in enumerate(lines) if re.match(r"\w+(Error|Exception)\b", line)), default=0)
        if re.match(r"\w+ in file ", lines[start] if lines else ""):  # "WorkflowError in file X, line N:"
            start += 1
        said = [line for line in lines[start:] if not line.startswith('File "')]
        raise ValueError(" | ".join(said[:3]) or f"snakemake --summary failed (exit {proc.returncode})")
    rows = {cells[0]: (cells[-2], cells[-1]) for cells in summary if cells[0] in targets}  # status, plan
    results = Path(config["results"])
    changed = repair.changed_chunks(results, logits=bool(config["keep_logits"]))
    damaged = {str(table): why for table, why in repair.affected_tables(results, changed).items()}
    broken = repair.damaged_outputs(results, logits=bool(config["keep_logits"]))
    for path, cause, with_it in broken:  # a damaged table, or one built from a damaged file
        for target in {str(t) for t in [path, *with_it, *repair.affected_tables(results, [(m, []) for m in with_it])]}:
            damaged.setdefault(target, []).insert(0, f"{path}: {cause}")
    counts = {"complete": 0, "to run": 0}
    tables_to_run = settings_changed = False
    for target in targets:
        status, plan = rows.get(target, ("not planned", "?"))
        why_damaged = damaged.get(target)
        if _after_tables(target) and tables_to_run:  # analysis parts, report and explorer are built from every table
            plan, status = "update pending", "after its tables"
        # a setting only the measure jobs take (e.g. temperature.method) leaves the table's own rule as it
        # was, so --summary calls it complete; its recorded settings say otherwise
        recorded = _recorded_settings(target) if target.endswith(".parquet") and not why_damaged else None
        said = _rerun_plan(config, target, recorded) if target.endswith(".parquet") else ""
        word = "complete" if plan == "no update" and not why_damaged and not said else "to run"
        counts[word] += 1
        tables_to_run |= word == "to run" and target.endswith(".parquet")
        why = ("damaged: " + "; ".join(why_damaged[:2]) if why_damaged
               else status if status != "ok" else "a job before it reruns: a setting or an input changed")
        if word != "complete" and target.endswith(".parquet") and not why_damaged:
            why, settings_changed = said or why, settings_changed or bool(said)
        if word == "complete":  # a complete table still says which networks failed
            why = _failed_networks(results, target) if target.endswith(".parquet") else ""
        if target == str(layout.report_path(results)) and (left := left_out_of(target)):
            why += f"; the report there is partial, written without {', '.join(left)}"
        if Path(target).parent.name == "parts":  # an analysis part: its rule's name
            why = rule_name(Path(target).stem) + (f": {why}" if why else "")
        print(f"{word:9s} {target}" + (f"  ({why})" if why else ""))
    if settings_changed:  # what a measurement setting reruns (docs/running.md, "Results follow the config")
        print("a measurement setting changed: the measure job of each chunk of those tables reruns from the "
              "stored logits (no archive is read; the lambda, mu search too where its settings changed), then "
              "the tables, the analysis parts, the report and the explorer")
    page = layout.explorer_page(results)
    if str(page) not in targets and page.is_file() and not args.space and not args.dataset:
        print(f"not kept  {page}  (explorer: false, so no run updates it; it shows the tables it was written from: "
              f"delete {layout.explorer_dir(results)} if unwanted)")
    for manifest, reasons in changed:
        print(f"repair: {repair.describe(manifest, reasons, planning=True)}")
    for path, cause, _ in broken:
        print(f"repair: {path}: damaged ({cause}): a run sets it aside and rebuilds it")
    print(f"{counts['complete']} complete, {counts['to run']} to run: "
          + ("`calibench run` completes them" if counts["to run"] or changed or broken else "nothing to do"))
    return 0
