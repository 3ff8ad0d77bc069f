"""`calibench run` and `calibench status`: the workflow driven through Snakemake, with the
results directory held for the run (:mod:`calibench.run.runlock`), one progress line per
rule (:mod:`calibench.run.progress`) and a summary of this run."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from calibench import layout

DEFAULT_CONFIG = "config/config.yaml"  # the Snakefile's `configfile:`; --configfile values go over it


def _merged_config(configfile: str) -> dict:
    """The configuration Snakemake will see: the default file, then ``configfile`` over it
    (nested keys merged, as Snakemake does)."""

    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    from calibench.config.check import load_yaml

    config = load_yaml(DEFAULT_CONFIG) if Path(DEFAULT_CONFIG).is_file() else {}
    return merge(config, load_yaml(configfile))


def _config_and_targets(args: argparse.Namespace) -> tuple[dict, list[str]]:
    """The merged configuration (checked) and the targets of --space/--dataset (every table
    and the report without them); ValueError for a user's mistake."""
    from calibench.config.check import SCHEMA, ConfigError, check
    from calibench.config.check import schema_default
    from calibench.config.settings import population_datasets, targets as all_targets

    try:
        config = _merged_config(args.configfile)
        if Path(DEFAULT_CONFIG).is_file() and Path(SCHEMA).is_file():
            # before Snakemake: the schema's defaults are not filled in, so required keys are
            # those the files must give
            check(config, [f for f in dict.fromkeys([DEFAULT_CONFIG, args.configfile]) if Path(f).is_file()])
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    results = config["results"]
    named = all_targets(config)
    known = sorted({space for space, _ in named.values()})
    unknown = sorted(set(args.space or []) - set(known))
    if unknown:
        raise ValueError(f"--space {', '.join(unknown)}: not in this config (spaces and populations: {', '.join(known)})")
    targets = [str(layout.table_path(results, name, d)) for name, (space, _) in named.items()
               if not args.space or space in args.space
               for d in population_datasets(config, space) if not args.dataset or d in args.dataset]
    if not targets:
        raise ValueError("no result table matches --space/--dataset in this config")
    if not args.space and not args.dataset:
        targets.append(str(layout.report_path(results)))
        if config.get("explorer", schema_default("explorer")):
            targets.append(str(layout.explorer_page(results)))
    return config, targets


def _status(args: argparse.Namespace) -> int:
    """What is complete, missing, damaged or stale for the current config; runs nothing and
    changes no file (Snakemake's --summary, and the repair check in planning mode)."""
    from calibench.run import repair

    config, targets = _config_and_targets(args)
    cmd = [sys.executable, "-m", "snakemake", "--configfile", args.configfile, "--cores", "1", "--summary",
           *targets, *args.snakemake_args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-3:]
        raise ValueError("snakemake --summary failed: " + " | ".join(tail))
    rows = {}
    for line in proc.stdout.splitlines():
        cells = line.split("\t")
        if len(cells) >= 6 and cells[0] in targets:
            rows[cells[0]] = (cells[-2], cells[-1])  # status, plan
    results = Path(config["results"])
    changed = repair.changed_chunks(results, logits=bool(config["keep_logits"]))
    damaged = {str(table): why for table, why in repair.affected_tables(results, changed).items()}
    broken = repair.damaged_outputs(results)
    for path, cause, with_it in broken:  # a damaged table, or one built from a damaged file
        for target in {str(t) for t in [path, *with_it, *repair.affected_tables(results, [(m, []) for m in with_it])]}:
            damaged.setdefault(target, []).insert(0, f"{path}: {cause}")
    counts = {"complete": 0, "to run": 0}
    tables_to_run = False
    for target in targets:
        status, plan = rows.get(target, ("not planned", "?"))
        why_damaged = damaged.get(target)
        if target.endswith(".html") and tables_to_run:  # the report and the explorer are built from every table
            plan, status = "update pending", "after its tables"
        word = "complete" if plan == "no update" and not why_damaged else "to run"
        counts[word] += 1
        tables_to_run |= word == "to run" and target.endswith(".parquet")
        why = ("damaged: " + "; ".join(why_damaged[:2]) if why_damaged
               else status if status != "ok" else "a job before it reruns: a setting or an input changed")
        print(f"{word:9s} {target}" + (f"  ({why})" if word != "complete" and why else ""))
    for manifest, reasons in changed:
        print(f"repair: {repair.describe(manifest, reasons, planning=True)}")
    for path, cause, _ in broken:
        print(f"repair: {path}: damaged ({cause}): a run sets it aside and rebuilds it")
    print(f"{counts['complete']} complete, {counts['to run']} to run: "
          + ("`calibench run` completes them" if counts["to run"] or changed or broken else "nothing to do"))
    return 0


def _run(args: argparse.Namespace) -> int:
    """A thin wrapper over snakemake: targets from --space/--dataset, everything else passed on.

    It holds the results directory for the run (:mod:`calibench.run.runlock`): a second run on
    the same results stops with a message and touches nothing, and a Snakemake lock left
    by a killed run (kill -9, OOM, a lost login node) is released, with a log line.
    """
    from calibench.run.runlock import RunInUse, run_guard

    try:
        config, targets = _config_and_targets(args)
    except ValueError as exc:
        print(f"calibench: {exc}", file=sys.stderr)
        return 2
    results = config["results"]
    cmd = [sys.executable, "-m", "snakemake", "--configfile", args.configfile, "--cores", str(args.cores)]
    if args.profile:
        cmd += ["--profile", args.profile]
    cmd += targets + args.snakemake_args
    try:
        with run_guard(Path.cwd(), Path(results), cmd) as guard:
            print("+", " ".join(cmd), flush=True)
            started = time.time()
            code, progress, log_file = _follow(cmd, guard.pass_fds, Path(results), verbose=args.verbose)
    except RunInUse as exc:
        logging.getLogger("calibench").error("%s", exc)
        return 3
    from calibench.results import failures

    tables = [t for t in targets if t.endswith(".parquet")]
    told = [failures.failed_jobs_summary(Path.cwd(), since=started - 1) if code != 0 else "",
            failures.terminal_summary(results, tables),
            failures.underdetermined_summary(tables, bool((config.get("analysis") or {}).get("include_underdetermined")))]
    for text in told:
        if text:
            print(text, file=sys.stderr, flush=True)
    ran, failed = progress.jobs()
    computed, skipped = _networks_measured(Path(results), since=started - 1)
    print(f"calibench: {ran} job(s) run" + (f", {failed} failed" if failed else "")
          + f" in {time.time() - started:.0f} s; networks measured: {computed}, already measured: {skipped}; "
          f"Snakemake's log: {log_file}", flush=True)
    if code == 0 and str(layout.report_path(results)) in targets:
        print(f"report: {layout.report_path(results).resolve()}")
    if code == 0 and str(layout.explorer_page(results)) in targets:
        print(f"explorer: {layout.explorer_page(results).resolve()}")
    return code


def _follow(cmd: list[str], pass_fds, results: Path, verbose: bool):
    """Run Snakemake with its output going whole to ``logs/snakemake/run-*.log`` (and the
    terminal if ``verbose``), one progress line per rule on the terminal otherwise."""
    from calibench.run.progress import RunProgress

    log_file = layout.log_path(results, f"snakemake/run-{time.strftime('%Y%m%dT%H%M%S')}")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    progress = RunProgress(lambda text: print(text, flush=True), lambda text: print(text, file=sys.stderr, flush=True))
    tail: list[str] = []
    with open(log_file, "w") as log, subprocess.Popen(cmd, pass_fds=pass_fds, stdout=subprocess.PIPE,
                                                      stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        for line in proc.stdout:
            log.write(line)
            if verbose:
                print(line, end="", flush=True)
            else:
                progress.feed(line)
                tail = (tail + [line.rstrip()])[-12:]
        code = proc.wait()
    if code != 0 and not verbose and not any(progress.jobs()):  # stopped before any job: say why
        print("\n".join(t for t in tail if t.strip()), file=sys.stderr, flush=True)
    return code, progress, log_file


def _networks_measured(results: Path, since: float) -> tuple[int, int]:
    """Networks this run's measurement chunks computed, and those they found measured."""
    computed = skipped = 0
    for manifest in layout.matching(layout.measure_manifest(results, "*", "*", "*")):
        try:
            if manifest.stat().st_mtime < since:
                continue
            summary = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        computed += int(summary.get("computed", 0))
        skipped += int(summary.get("skipped", 0))
    return computed, skipped
