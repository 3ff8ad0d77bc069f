"""Command line: ``run``, ``query``, ``top``, ``make-minibench``, and the workflow's job steps.

The job steps (``population``, ``labels``, ``infer-chunk``, ``odir-search``, ``measure-chunk``,
``build-table``, ``analysis-part``, ``report``) are what the Snakemake rules call; their code is in
:mod:`calibench.run.job_steps`, their options are parsed here.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from calibench import __version__, integrity, layout
from calibench.run.job_steps import (_analysis_part, _build_table, _infer_chunk, _labels, _measure_chunk, _odir_search,
                                     _population, _report)
from calibench.run.status import _status
from calibench.run.targets import DEFAULT_CONFIG
from calibench.run.workflow import _repair_command, _run


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _positive(value: str, expected: str) -> int:
    """``value`` as an integer of at least 1; argparse's error saying ``expected`` otherwise."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
    return number


def _seed(value: str) -> int:
    """An argparse type: a seed, an integer of at least 0 (argparse names the option)."""
    if value.strip().lstrip("+").isdigit():
        return int(value)
    raise argparse.ArgumentTypeError(f"expected a seed (an integer >= 0), got {value!r}")


def _count(what: str):
    """An argparse type: a positive integer, the error naming ``what``."""
    return lambda value: _positive(value, f"a positive number of {what}")


def _group_setting(value: str) -> int | str:
    return value if value == "auto" else _positive(value, "a positive integer or auto")


class _Parser(argparse.ArgumentParser):
    """A command-line mistake in two lines, exit 2: what is wrong, and where the options are."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists the options)\n")


def _cores(value: str) -> int | str:
    """``--cores``: a positive number (Snakemake would take 0 and run nothing), or ``all``."""
    return value if value == "all" else _positive(value, "a positive number of cores or 'all'")


def _logits(args: argparse.Namespace) -> int:
    """What the logits store holds: one line per (space, hp, dataset), or every file."""
    from calibench.store.logits import list_store

    if not Path(args.results).is_dir():
        raise ValueError(f"--results {args.results}: " + ("not a directory" if Path(args.results).exists()
                                                          else "no such directory"))
    df = list_store(args.results)
    if df.empty:
        print(f"no logits stored under {layout.logits_dir(args.results)}")
        return 0
    if "problem" in df.columns:
        for _, row in df[df["problem"].notna()].iterrows():
            print(f"unreadable: {row['problem']}")
        df = df[df["problem"].isna()]
    if args.files:
        cols = ["space", "hp", "dataset", "arch_index", "arch_str", "seeds", "sets", "n_test", "classes", "bytes", "key"]
        print(df[cols].to_string(index=False))
    else:
        summary = df.groupby(["space", "hp", "dataset"]).agg(
            networks=("arch_index", "size"), seeds=("seeds", lambda s: ",".join(sorted(set(",".join(s).split(","))))),
            sets=("sets", "first"), n_test=("n_test", "first"), classes=("classes", "first"),
            mb=("bytes", lambda b: round(b.sum() / 1e6, 2)), mb_per_network=("bytes", lambda b: round(b.mean() / 1e6, 3)))
        print(summary.reset_index().to_string(index=False))
    print(f"total: {len(df)} files, {df['bytes'].sum() / 1e6:.1f} MB under {layout.logits_dir(args.results)}")
    return 0


def _provenance(args: argparse.Namespace) -> int:
    from calibench.results.provenance import provenance_summary as summary

    for table in args.tables:
        if not Path(table).is_file():
            raise FileNotFoundError(f"{table}: " + ("a directory, not a table" if Path(table).is_dir() else "no such table"))
        integrity.verify([table])  # a damaged table is said so, not summarised
        with integrity.naming(table):
            print(summary(table))
    return 0


def _query(args: argparse.Namespace) -> int:
    from calibench.results.query import run_query

    run_query(args.sql, results=args.results, output=args.output)
    return 0


def _top(args: argparse.Namespace) -> int:
    from calibench.results.query import top

    top(args.space, args.dataset, args.by, args.n, results=args.results, ascending=args.ascending, hp=args.hp)
    return 0


# Commands a person types (not the workflow's job steps, whose tracebacks go to the job log):
# a mistake (a bad value, a missing file) is one or two lines and exit 2; --debug or
# CALIBENCH_DEBUG=1 shows the traceback.
USER_COMMANDS = {"run", "query", "provenance", "top", "reliability", "nas", "export", "import", "logits",
                 "screenshot", "make-minibench", "status", "repair", "compare", "explore"}
# The workflow's job steps: each rule's command; `calibench --help` names them apart from the user's.
JOB_COMMANDS = ("population", "labels", "infer-chunk", "odir-search", "measure-chunk", "build-table", "analysis-part",
                "report")


def _n_test(text: str) -> int | dict[str, int]:
    """``make-minibench --n-test``: ``300`` (every dataset) or ``cifar10=500,cifar100=300,...``
    (the spec checks that every dataset is named once)."""
    if "=" not in text:
        return _positive(text, "a positive number of test images, or DATASET=N,...")
    sizes = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or name.strip() in sizes:
            raise argparse.ArgumentTypeError(f"{text!r}: expected N or DATASET=N,DATASET=N,... (each dataset once)")
        sizes[name.strip()] = _positive(value, f"a positive number of {name.strip()} test images")
    return sizes


def _make_minibench(args: argparse.Namespace) -> int:
    from calibench.runtime import keep_freed_memory
    from calibench.sources import make_minibench

    keep_freed_memory()
    sizes = {name: getattr(args, name) for name in ("n_tss", "n_sss", "n_test", "n_train", "seed")}
    if args.real_size:
        sizes["real_size"] = True
    if args.tss_hp12_weights:
        sizes["tss_hp12_weights"] = True
    start = time.perf_counter()
    out = make_minibench(args.out, {name: value for name, value in sizes.items() if value is not None},
                         progress=not args.quiet, workers=args.workers)
    print(f"mini benchmark (synthetic, NOT NATS-Bench results) written to {out} in {time.perf_counter() - start:.1f} s")
    return 0


def _reliability(args: argparse.Namespace) -> int:
    from calibench.analysis import reliability

    out = Path(args.out) if args.out else None
    if out is not None and not out.is_dir() and not out.parent.is_dir():
        raise ValueError(f"--out {out}: no directory {out.parent}")
    found = reliability.load(args.results, args.space, args.dataset, args.arch, hp=args.hp, seed=args.seed)
    if args.stages is not None and not args.stages.strip(","):
        raise ValueError("--stages: name at least one stage (pre,post,...), or leave the option out for every stage")
    stages = args.stages.split(",") if args.stages else None
    default = layout.reliability_path(args.results, layout.target_name(args.space, found["hp"]), args.dataset,
                                      args.arch)
    path = reliability.plot_network(found, out / default.name if out is not None and out.is_dir() else out or default,
                                    stages)
    if stages:
        found = {**found, "stages": {s: found["stages"][s] for s in stages}}
    print(reliability.as_text(found))
    print(f"\ndiagram: {path}")
    return 0


def _screenshot(args: argparse.Namespace) -> int:
    from calibench.report.screenshot import BrowserNotFound, RenderError, check_rendered

    if args.out and Path(args.out).suffix.lower() != ".png":
        raise ValueError(f"--out {args.out}: the screenshot is a PNG: name it *.png")
    try:
        result = check_rendered(args.report, args.out, width=args.width)
    except RenderError as exc:
        print(f"calibench screenshot: {exc}", file=sys.stderr)
        return 1
    except (BrowserNotFound, OSError, RuntimeError) as exc:
        print(f"calibench screenshot: {exc}", file=sys.stderr)
        return 2
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"{result.png}: {result.page_width} x {result.page_height} px page, {result.images} images loaded, "
          f"{result.colours} colours")
    return 0


def _nas(args: argparse.Namespace) -> int:
    from calibench.analysis.nats import nas

    tables = [Path(t) for t in args.tables]
    if not tables:  # every NATS-Bench table of the run; a population of one's own has no search space
        from calibench.analysis.tables import nats_tables
        from calibench.results.query import check_results_dir

        tables, skipped = nats_tables(layout.result_tables(check_results_dir(args.results)))
        if skipped:
            print(f"calibench nas: skipped (not a NATS-Bench space, or no rows): {', '.join(skipped)}", file=sys.stderr)
    if not tables:
        print(f"calibench nas: no NATS-Bench result tables under {layout.tables_dir(args.results)}", file=sys.stderr)
        return 2
    out_dir = Path(args.out or layout.analysis_dir(args.results) / "nas")
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir}: not a directory")
    from calibench.results.tables import check_result_table

    for table in tables:  # every table a whole result table before any result is written
        if not table.exists():
            raise FileNotFoundError(f"{table}: no such table")
        check_result_table(table)  # names a directory as one
    found, options = [], dict(objectives=args.objectives.split(","), algorithms=args.algorithms.split(","),
                              budget=args.budget, repeats=args.repeats, seed=args.seed, population=args.population,
                              sample=args.sample)
    for table in tables:  # every table searched before any result is written
        try:
            found.append(nas.nas_of_table(table, **options))
        except (OSError, KeyError, ValueError) as exc:
            print(f"calibench nas: {table}: {exc}", file=sys.stderr)
            return 2
    for table, result in zip(tables, found):
        nas.write_nas(result, table, out_dir / f"nas_{table.stem}.csv")
        print(nas.nas_markdown(result, title=f"{table.stem}: budget {args.budget}, {args.repeats} repeats"))
        print(f"written: {out_dir / f'nas_{table.stem}.csv'} (and .md)\n")
    return 0


def _explore(args: argparse.Namespace) -> int:
    from calibench.report.explorer import bins_option, write_explorer

    try:
        given = json.loads(args.settings or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"--settings: not JSON ({exc})") from None
    if not isinstance(given, dict):
        raise ValueError(f"--settings: a JSON object, not {type(given).__name__}")
    # the workflow's job says demo or not; by hand, --demo, else as the explorer replaced said
    demo = True if args.demo else (bool(given["demo"]) if "demo" in given else None)
    results, tables = args.results, args.tables
    missing = [t for t in tables if not Path(t).exists()]
    if missing:
        raise ValueError(f"{missing[0]}: no such file or directory")
    if len(tables) == 1 and Path(tables[0]).is_dir():  # `calibench explore RUN_A`: a results directory
        results, tables = tables[0], []
    if (args.out or args.columns) and not args.compare:
        raise ValueError("--out and --columns go with --compare RUN_B")
    bins = given.get("bins") if args.bins is None else bins_option(args.bins)
    page = write_explorer(results, tables or None, demo=demo, threads=args.threads,
                          min_networks=given.get("min_networks"), compare=args.compare, out=args.out,
                          columns=args.columns, bins=bins)
    print(f"explorer: {page} (open it in a browser; it works offline, from its folder)")
    return 0


def _export(args: argparse.Namespace) -> int:
    from calibench.results.interop import export_tao2024
    from calibench.results.query import check_results_dir, refuse_inside_runs

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out {args.out}: not a directory")
    if not args.tables:
        check_results_dir(args.results)
    # the results directories it reads: --results, or that of each table named in a tables/ folder
    refuse_inside_runs(args.out, args.tables or [args.results], "--out", "calibench export only reads it")
    if args.verbose:
        logging.getLogger("calibench.results.interop").setLevel(logging.DEBUG)
    written = export_tao2024(args.tables or args.results, args.out, expand_isomorphs=args.expand_isomorphs)
    for path in written:
        print(path)
    return 0


def _import(args: argparse.Namespace) -> int:
    from calibench.results.interop import import_tao2024

    written = import_tao2024(args.src, args.results, overwrite=args.overwrite)
    for path in written:
        print(path)
    return 0


def _compare(args: argparse.Namespace) -> int:
    """Two runs side by side (issue 26): exit 0 equal within --atol, 1 different, 2 a usage mistake."""
    from calibench.analysis.compare import compare_runs
    from calibench.report import compare_page
    from calibench.results.query import refuse_inside_runs

    def check_out(out: Path, option: str) -> None:  # before the comparison's work where it can be
        if out.exists() and not out.is_dir():
            raise ValueError(f"{option} {out}: not a directory")
        refuse_inside_runs(out, (args.run_a, args.run_b), option, "calibench compare only reads it")

    if args.out:
        check_out(Path(args.out), "--out")
    cmp = compare_runs(args.run_a, args.run_b, args.columns, args.atol)  # ValueError, OSError: main says it, exit 2
    out = Path(args.out) if args.out else compare_page.default_out(cmp)
    if not args.out:
        check_out(out, "the default output folder (--out)")
    csv_path, page_path = compare_page.write(cmp, out)
    print(compare_page.summary_text(cmp))
    print(f"written: {csv_path}, {page_path}")
    return 0 if cmp.equal else 1


def build_parser() -> argparse.ArgumentParser:
    # No package imports here but the config schema's defaults: `calibench query` must not pay
    # for importing torch.
    from calibench.config.check import schema_default

    parser = _Parser(prog="calibench", description="Calibration of NATS-Bench populations.",
                     epilog="The workflow's job steps, run by its rules (not by hand): " + ", ".join(JOB_COMMANDS)
                     + " (each with --help).")
    parser.add_argument("--version", action="version", version=f"calibench {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or CALIBENCH_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    mb = sub.add_parser("make-minibench", help="write the embedded mini benchmark (NATS formats, synthetic data)")
    mb.add_argument("out", help="output directory, e.g. resources/minibench")
    # Unset sizes take MiniBenchSpec's defaults (6, 6, 300, 100, seed 0).
    mb.add_argument("--n-tss", type=_count("TSS architectures"), help="TSS architectures")
    mb.add_argument("--n-sss", type=_count("SSS architectures"), help="SSS architectures")
    mb.add_argument("--n-test", type=_n_test, metavar="N|DATASET=N,...",
                    help="test images per dataset: one number for all, or e.g. "
                         "cifar10=500,cifar100=300,ImageNet16-120=300 (every dataset named)")
    mb.add_argument("--n-train", type=_count("training images"), help="training images for the heads")
    mb.add_argument("--seed", type=_seed)
    mb.add_argument("--real-size", action="store_true",
                    help="archive files shaped like the real -full ones (every hp, dataset and seed; ~27.5 MB TSS, "
                         "~17.4 MB SSS): for loading benchmarks")
    mb.add_argument("--tss-hp12-weights", action="store_true",
                    help="also keep TSS hp 12 weights (a less-fitted stand-in for the 12-epoch schedule, not "
                         "NATS-Bench results): for comparing training schedules")
    mb.add_argument("--workers", type=_count("worker processes"), default=1,
                    help="architecture files built at once, one process of one thread each (the same files)")
    mb.add_argument("--quiet", action="store_true", help="no progress bar")
    mb.set_defaults(func=_make_minibench)

    run = sub.add_parser("run", help="run the workflow (snakemake) for some spaces and datasets")
    run.add_argument("--space", action="append", help="tss, sss or a population's name; repeatable; default: config")
    run.add_argument("--dataset", action="append", help="repeatable; default: every dataset of each space")
    run.add_argument("--configfile", default=DEFAULT_CONFIG, help="over config/config.yaml, as snakemake does")
    run.add_argument("--profile", default=None, help="a snakemake profile, e.g. profiles/slurm")
    run.add_argument("--cores", type=_cores, default=2)
    run.add_argument("--verbose", "-v", action="store_true",
                     help="Snakemake's whole output on the terminal (it always goes to results/logs/snakemake/)")
    run.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="passed to snakemake after --")
    run.set_defaults(func=_run)
    st = sub.add_parser("status", help="what is complete, missing, damaged or stale for the config; runs nothing")
    st.add_argument("--space", action="append", help="tss, sss or a population's name; repeatable; default: config")
    st.add_argument("--dataset", action="append", help="repeatable; default: every dataset of each space")
    st.add_argument("--configfile", default=DEFAULT_CONFIG, help="over config/config.yaml, as snakemake does")
    st.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="passed to snakemake --summary after --")
    st.set_defaults(func=_status)
    rp = sub.add_parser("repair", help="set aside damaged files and changed chunks so the next run (calibench run or "
                                       "a plain snakemake) rebuilds them; runs no job (calibench run does this itself)")
    rp.add_argument("--configfile", default=DEFAULT_CONFIG, help="over config/config.yaml, as snakemake does")
    rp.set_defaults(func=_repair_command, space=None, dataset=None)

    q = sub.add_parser(
        "query", help="SQL (DuckDB) over the result tables: views networks, networks_all, metrics and fits",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="views:\n"
               "  networks      one row per measured network and table: space, hp, dataset, arch_index, measured_by,\n"
               "                arch_str, nats_index (NATS-Bench's index), accuracy, params, flops, temperature,\n"
               "                {stage}_{metric} (e.g. pre_ece_15, vs_ksce), hcs_{beta}, provenance columns\n"
               "  networks_all  the same plus every TSS isomorph copy (is_copy: true), which repeats the values\n"
               "                of the network it was measured as (measured_by)\n"
               "  metrics       one row per shard value: space, hp, dataset, arch_index, seed, stage, metric, bins, value\n"
               "  fits          one row per network, seed and fitted stage: fit_key, failure, the fit's summaries info_*\n"
               "every column: `calibench query \"DESCRIBE networks\"`; the data model: docs/results.md, \"Querying\"; "
               "metric definitions: docs/metrics.md\n"
               "example: calibench query \"SELECT dataset, avg(pre_ece_15) FROM networks GROUP BY dataset\"")
    q.add_argument("sql")
    q.add_argument("--results", default="results")
    q.add_argument("--output", "-o", default=None, help="write CSV or parquet (by extension) instead of printing; not inside --results")
    q.set_defaults(func=_query)

    pv = sub.add_parser("provenance", help="what measured a result table's rows: software, device, keys")
    pv.add_argument("tables", nargs="+")
    pv.set_defaults(func=_provenance)

    t = sub.add_parser("top", help="the top networks by a column of the networks view")
    t.add_argument("--space", required=True, help="tss, sss or a population's name")
    t.add_argument("--dataset", required=True)
    t.add_argument("--hp", help="the table's schedule (e.g. 200, 12), where the space has several")
    t.add_argument("--by", default="hcs_1", help="a column, e.g. hcs_1, accuracy, pre_ece_15; best first: lowest "
                   "for an error, highest for accuracy, HCS, AUROC (the first line says which)")
    t.add_argument("-n", type=_count("networks"), default=20)
    order = t.add_mutually_exclusive_group()
    order.add_argument("--ascending", action="store_const", const=True, default=None, help="smallest first, whatever the column")
    order.add_argument("--descending", dest="ascending", action="store_const", const=False,
                       help="largest first, whatever the column")
    t.add_argument("--results", default="results")
    t.set_defaults(func=_top)

    rl = sub.add_parser("reliability", help="reliability diagram of one network, every stage (from its shard)")
    rl.add_argument("--space", required=True, help="tss, sss or a population's name")
    rl.add_argument("--dataset", required=True)
    rl.add_argument("--arch", type=int, required=True, help="architecture index")
    rl.add_argument("--hp", default=None, help="needed only where several hps were measured")
    rl.add_argument("--seed", type=_seed, default=None, help="default: the first measured seed")
    rl.add_argument("--stages", default=None, help="comma-separated, e.g. pre,post (default: every stage)")
    rl.add_argument("--out", default=None, help="PNG path (default: results/reliability/...)")
    rl.add_argument("--results", default="results")
    rl.set_defaults(func=_reliability)

    ns = sub.add_parser("nas", help="NAS over result tables by accuracy and HCS (Tao et al. 2024, Table 1)")
    ns.add_argument("tables", nargs="*", help="result tables (default: every table under --results)")
    ns.add_argument("--results", default="results")
    ns.add_argument("--out", default=None, help="directory (default: results/analysis/nas)")
    ns.add_argument("--objectives", default="accuracy,hcs_1,hcs_2,hcs_3", help="comma-separated columns")
    ns.add_argument("--algorithms", default="evolution,local,random")
    ns.add_argument("--budget", type=int, default=schema_default("analysis", "nas", "budget"),
                    help="distinct architectures queried per search")
    ns.add_argument("--repeats", type=int, default=schema_default("analysis", "nas", "repeats"),
                    help="seeded repeats (seed + r)")
    ns.add_argument("--seed", type=_seed, default=schema_default("analysis", "nas", "seed"))
    ns.add_argument("--population", type=int, default=20, help="regularised evolution's population")
    ns.add_argument("--sample", type=int, default=5, help="regularised evolution's tournament size")
    ns.set_defaults(func=_nas)

    xp = sub.add_parser("explore", help=f"write an interactive explorer of a finished run ({layout.explorer_page('results')})")
    xp.add_argument("--results", default="results")
    xp.add_argument("--threads", type=_count("threads"), default=4, help="threads reading the shards' reliability bins")
    xp.add_argument("--demo", action="store_true",
                    help="say on the page that the run is the mini benchmark (default: as the explorer it replaces says)")
    xp.add_argument("--settings", default=None, help="the workflow job's settings as JSON (its demo flag)")
    xp.add_argument("tables", nargs="*", help="tables to show (default: every table under --results), or one "
                                              "results directory (RUN_A)")
    xp.add_argument("--compare", metavar="RUN_B", default=None,
                    help="another run (results directory, tables or tao2024 CSVs) shown against this one, network by "
                         "network, as `calibench compare` matches them")
    xp.add_argument("--columns", nargs="+", metavar="PATTERN", default=None,
                    help="with --compare: only the columns matching these fnmatch patterns")
    xp.add_argument("--out", default=None, help="with --compare: output folder (default: ./compare-{A}-vs-{B}/)")
    xp.add_argument("--bins", default=None, metavar="N,N,...",
                    help="the bin counts of the binned metrics in the page: bin counts (5,15,100), all, or auto "
                         "(default: 5, 15, 100 and 500 where the tables have them; the config's explorer_bins in the "
                         "workflow)")
    xp.set_defaults(func=_explore)

    ex = sub.add_parser("export", help="result tables in another layout (tao2024: Tao et al.'s published CSVs)")
    ex.add_argument("--format", required=True, choices=["tao2024"])
    ex.add_argument("--out", required=True, help="output directory (not inside the results directory it reads)")
    ex.add_argument("--results", default="results")
    ex.add_argument("--expand-isomorphs", action="store_true",
                    help="also write every TSS isomorph copy (a row repeating its representative's values), "
                         "marked by a measured_by column (default: each measurement once)")
    ex.add_argument("--verbose", "-v", action="store_true",
                    help="name every column left out of the layout (default: their count and three of them)")
    ex.add_argument("tables", nargs="*", help="tables to export (default: every table under --results)")
    ex.set_defaults(func=_export)

    im = sub.add_parser("import", help="tables in another layout into result tables (tao2024)")
    im.add_argument("--format", required=True, choices=["tao2024"])
    im.add_argument("src", help="a directory of files (or one file) in that layout")
    im.add_argument("--results", default="results", help="results directory to write the tables into")
    im.add_argument("--overwrite", action="store_true", help="replace tables this project measured")
    im.set_defaults(func=_import)

    cp = sub.add_parser("compare", help="two runs (results directories, tables or tao2024 CSVs) column by column; "
                                         "exit 0 equal within --atol, 1 different")
    cp.add_argument("run_a", metavar="RUN_A", help="a results directory, a folder of tables, or tao2024 CSVs")
    cp.add_argument("run_b", metavar="RUN_B")
    cp.add_argument("--columns", nargs="+", metavar="PATTERN", default=None,
                    help="only the columns matching these fnmatch patterns, e.g. 'pre_ece_*' accuracy "
                         "(give it after RUN_A RUN_B)")
    cp.add_argument("--atol", type=float, default=0.0, help="largest absolute difference counted as equal (0)")
    cp.add_argument("--out", default=None, help="output folder (default: ./compare-{A}-vs-{B}/)")
    cp.set_defaults(func=_compare)

    lg = sub.add_parser("logits", help="what the logits store holds (per space, hp, dataset; --files: every file)")
    lg.add_argument("--results", default="results")
    lg.add_argument("--files", action="store_true", help="one line per stored file")
    lg.set_defaults(func=_logits)

    sc = sub.add_parser("screenshot", help="render the report in a headless Chromium to a PNG and check it")
    sc.add_argument("--report", default=str(layout.report_path("results")))
    sc.add_argument("--out", default=None, help="PNG path (default: results/report.png, beside the report)")
    sc.add_argument("--width", type=_count("pixels"), default=1400, help="window width in px (the page is shot full height)")
    sc.set_defaults(func=_screenshot)
    jobs = (("population", _population, "job: write a space's population and chunks"),
            ("labels", _labels, "job: one evaluation set's labels into the logits store"),
            ("infer-chunk", _infer_chunk, "job: logits of one chunk on every dataset into the store"),
            ("odir-search", _odir_search, "job: the ms/dir lambda, mu of one (space, hp, dataset) from stored logits"),
            ("measure-chunk", _measure_chunk, "job: measure one chunk of one dataset from the store into shards"),
            ("build-table", _build_table, "job: aggregate shards into a wide table"),
            ("analysis-part", _analysis_part, "job: one part of the analysis (tables, figures, report blocks)"),
            ("report", _report, "job: the report, findings and claims from the analysis parts"))
    assert tuple(name for name, _, _ in jobs) == JOB_COMMANDS
    for name, func, helptext in jobs:
        p = sub.add_parser(name, description=helptext)  # no help=: left out of the command list
        p.set_defaults(func=func)
        if name != "build-table":
            p.add_argument("--settings", required=True, help="the stage's settings as JSON (calibench.config.settings)")
        if name == "population":
            p.add_argument("--space", required=True, help="tss, sss or a population's name")
        if name in ("infer-chunk", "odir-search", "measure-chunk", "build-table"):
            p.add_argument("--target", default=None, help="tss_200 (space and hp), or a population's name")
            p.add_argument("--space", default=None, help="with --hp, instead of --target")
        if name == "labels":
            p.add_argument("--space", default=None, help="a population's name (NATS-Bench's labels are shared)")
        if name in ("labels", "odir-search", "measure-chunk", "build-table"):
            p.add_argument("--dataset", required=True)
            p.add_argument("--hp", default="", help="the schedule; empty outside NATS-Bench")
        if name in ("infer-chunk", "odir-search", "measure-chunk", "build-table", "analysis-part", "report"):
            p.add_argument("--results", required=True)
        if name in ("population", "labels", "odir-search", "build-table"):
            p.add_argument("--out", required=True)
        if name in ("infer-chunk", "measure-chunk"):
            p.add_argument("--chunk", type=int, required=True)
            p.add_argument("--manifest", required=True)
            p.add_argument("--quiet", action="store_true")
            p.add_argument("--device", default="auto")
            p.add_argument("--batch-size", type=int, default=schema_default("batch_size"))
            p.add_argument("--loader-workers", default=schema_default("loader_workers"))
            p.add_argument("--measure-group", type=_group_setting, default=schema_default("measure_group"),
                           help="networks per batched measurement: a number, or auto (sized from the device's memory)")
            p.add_argument("--networks-per-pass", type=_group_setting, default=schema_default("networks_per_pass"),
                           help="NATS networks per inference forward pass: a number, or auto (1 on the CPU and for SSS, 64 for TSS on CUDA)")
        if name == "measure-chunk":
            p.add_argument("--logits-manifest", required=True, help="the chunk's inference manifest")
            p.add_argument("--labels", required=True, help="the dataset's labels file in the store")
            p.add_argument("--keep-logits", type=lambda v: v.lower() in ("1", "true", "yes"), default=True)
            p.add_argument("--odir", default=None, help="the lambda, mu search's result (where the config leaves them)")
        if name == "odir-search":
            p.add_argument("--device", default="auto")
            p.add_argument("--logits-manifests", nargs="+", required=True, help="inference manifests of the sample")
            p.add_argument("--labels", required=True, help="the dataset's labels file in the store")
        if name == "build-table":
            p.add_argument("--failures", default=None)
            p.add_argument("--manifests", nargs="*", default=[])
        if name == "analysis-part":
            which = p.add_mutually_exclusive_group(required=True)
            which.add_argument("--part", help="kendall, hcs, methods, ... (calibench.analysis.registry)")
            which.add_argument("--manifest", help="the part's manifest, analysis/parts/{part}.json: the part it names "
                                                  "(what the workflow's rules pass)")
            p.add_argument("--threads", type=int, default=1, help="threads a part may compute in (kendall)")
        if name in ("analysis-part", "report"):
            p.add_argument("--tables", nargs="+", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    from calibench.runtime import short_omp_spin

    short_omp_spin()  # before any job imports torch
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, which names the command
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "target", None):
        from calibench.config.settings import split_target

        args.space, args.hp = split_target(args.target)
    elif hasattr(args, "target") and not args.space:
        parser.error("give --target, or --space (and --hp for a NATS-Bench space)")
    if getattr(args, "snakemake_args", None) and args.snakemake_args[0] == "--":
        args.snakemake_args = args.snakemake_args[1:]
    _setup_logging()
    if args.command not in USER_COMMANDS or args.debug or os.environ.get("CALIBENCH_DEBUG") == "1":
        return args.func(args)
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader stopped (`| head`): no mistake, nothing to say; a SIGPIPE's status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141
    except (ValueError, KeyError, OSError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        lines = str(text).strip().splitlines() or [type(exc).__name__]
        print(f"calibench {args.command}: " + "\n".join(lines[:2]), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
