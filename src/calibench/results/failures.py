"""What failed, told where the user looks (issue 15): after a run on the terminal
(:func:`terminal_summary`, printed by ``calibench run``), and in the report (:func:`html`);
and, in the run's closing summary, the fits on too little data (:func:`underdetermined_summary`).

Sources: the failures files the table builds write (``results/failures/*.parquet``: one row
per failed network and stage, with the file and reason), the coverage each table records
(selected against measured networks), and for a run that stopped, the logs of the jobs that
failed (named in Snakemake's own log, :func:`failed_job_logs`).
"""

from __future__ import annotations

import html as _html
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from calibench import layout

SHOWN = 10  # failures listed one by one; the rest are counted


def collect(results: str | Path) -> pd.DataFrame:
    """Every failure row of the run, with the table (``{target}_{dataset}``) it belongs to."""
    frames = []
    for path in sorted(layout.failures_dir(results).glob("*.parquet")):
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - a damaged failures file is itself reported
            frame = pd.DataFrame([{"stage": "report", "source": str(path), "reason": f"unreadable: {exc}"}])
        frames.append(frame.assign(table=path.stem))
    if not frames:
        return pd.DataFrame(columns=["table", "space", "hp", "dataset", "arch_index", "seed", "stage", "source",
                                     "reason"])
    return pd.concat(frames, ignore_index=True)


def coverage(tables: Sequence[str | Path]) -> list[dict]:
    """Per table: selected and measured networks (from the table's metadata)."""
    from calibench.results.tables import table_metadata

    out = []
    for table in tables:
        try:
            meta = table_metadata(table).get("coverage")
        except Exception:  # noqa: BLE001
            meta = None
        if meta:
            out.append({"table": Path(table).stem, **meta})
    return out


def _network(row) -> str:
    where = f"arch {int(row['arch_index'])}" if pd.notna(row.get("arch_index")) else ""
    seed = f" seed {int(row['seed'])}" if pd.notna(row.get("seed")) else ""
    return f"{row['table']} {where}{seed}".strip()


def terminal_summary(results: str | Path, tables: Sequence[str | Path], since: float | None = None) -> str:
    """A few lines for the end of a run: how many networks each table lacks and why, each
    failure with its file and reason (the first :data:`SHOWN`); "" when nothing failed.
    ``since``: the run's start; tables not written since (a job before them failed) are named:
    their lines are what an earlier run recorded."""
    found = collect(results)
    if not found.empty and tables:  # this run's tables only
        found = found[found["table"].isin({Path(t).stem for t in tables})]
    short = [c for c in coverage([t for t in tables if Path(t).is_file()]) if c["measured"] < c["selected"]]
    if found.empty and not short:
        return ""
    networks = found[found["stage"].isin(["inference", "measurement", "table"])]
    stages = found[~found["stage"].isin(["inference", "measurement", "table"])]
    pairs = networks.drop_duplicates(["table", "arch_index"])
    said = ([f"{len(pairs)} network result(s) missing from {pairs['table'].nunique()} table(s)"] if len(pairs) else []) \
        + ([f"{len(stages)} recalibration stage(s) NaN"] if len(stages) else [])
    lines = [f"calibench: {', '.join(said) or 'networks missing'} ({layout.failures_dir(results) / '*.parquet'}):"]
    for c in short:
        lines.append(f"  {c['table']}: {c['measured']} of {c['selected']} selected networks measured")
    for _, row in pd.concat([networks, stages]).head(SHOWN).iterrows():
        lines.append(f"  {_network(row)} [{row['stage']}] {row['source']}: {str(row['reason'])[:300]}")
    if len(found) > SHOWN:
        lines.append(f"  ... and {len(found) - SHOWN} more: calibench query \"SELECT * FROM "
                     f"read_parquet('{layout.failures_dir(results) / '*.parquet'}')\"")
    if len(pairs) or short:
        lines.append("  Repair the file or model named and run again: changed or restored inputs (a file, a model's "
                     "code) are retried.")
    earlier = sorted({Path(t).stem for t in tables if since is not None and (
        not Path(t).is_file() or Path(t).stat().st_mtime < since)} & (set(found.get("table", [])) | {c["table"] for c in short}))
    if earlier:
        lines.append(f"  Not built by this run (a job before them failed), as an earlier run recorded them: "
                     f"{', '.join(earlier)}")
    return "\n".join(lines)


def html(results: str | Path, tables: Sequence[str | Path]) -> str:
    """The report's "What failed" block: coverage per table and every failure (file, reason)."""
    found = collect(results)
    cover = coverage(tables)
    total = sum(c["selected"] for c in cover)
    measured = sum(c["measured"] for c in cover)
    if found.empty and measured == total:
        return f"<p>Every selected network was measured ({measured} networks over {len(cover)} tables); nothing failed.</p>"
    parts = [f"<p class='warn'><b>{total - measured} of {total} selected networks are not in the tables</b>; "
             f"{len(found)} failure row(s) in <code>{_html.escape(str(layout.failures_dir(results)))}/</code>. "
             "Repair the file or model named and run again: changed or restored inputs (a file, a model's "
             "code) are retried, damaged results recomputed.</p>"]
    rows = "".join(f"<tr><td>{_html.escape(c['table'])}</td><td>{c['measured']}</td><td>{c['selected']}</td></tr>"
                   for c in cover if c["measured"] < c["selected"])
    if rows:
        parts.append("<table><tr><th>table</th><th>measured</th><th>selected</th></tr>" + rows + "</table>")
    if not found.empty:
        shown = found.head(200)
        parts.append("<table><tr><th>network</th><th>stage</th><th>file</th><th>reason</th></tr>" + "".join(
            f"<tr><td>{_html.escape(_network(r))}</td><td>{_html.escape(str(r['stage']))}</td>"
            f"<td>{_html.escape(str(r['source']))}</td><td>{_html.escape(str(r['reason']))}</td></tr>"
            for _, r in shown.iterrows()) + "</table>")
        if len(found) > len(shown):
            parts.append(f"<p>… and {len(found) - len(shown)} more in "
                         f"<code>{_html.escape(str(layout.failures_dir(results)))}/</code>.</p>")
    return "\n".join(parts)


FLAG_SUFFIX = "_fit_underdetermined"


def underdetermined_counts(table: str | Path) -> tuple[int, dict[str, int]]:
    """(measured networks, {stage: networks whose fit had too little data}) of one result
    table (docs/recalibration.md, "Common rules"); TSS isomorph copies are not counted."""
    import pyarrow.parquet as pq

    flags = [c for c in pq.read_schema(table).names if c.endswith(FLAG_SUFFIX)]
    if not flags:
        return 0, {}
    frame = pd.read_parquet(table, columns=["arch_index", "measured_by", *flags])
    nets = frame[frame["arch_index"] == frame["measured_by"]]
    return len(nets), {c.removesuffix(FLAG_SUFFIX): int((nets[c] == 1).sum()) for c in flags}


def underdetermined_summary(tables: Sequence[str | Path], ranked: bool = False) -> str:
    """The run's closing lines on fits on too little data: per table, the stages with such
    networks and how many; "" when there are none. ``ranked``: the analysis ranks them too
    (``analysis.include_underdetermined``)."""
    lines = []
    for table in tables:
        if not Path(table).is_file():
            continue
        try:
            n, counts = underdetermined_counts(table)
        except Exception:  # noqa: BLE001 - a damaged table is told by the failures summary
            continue
        flagged = [f"{stage} {k}" for stage, k in counts.items() if k]
        if flagged:
            lines.append(f"  {Path(table).stem}: {', '.join(flagged)} of {n} networks")
    if not lines:
        return ""
    rankings = ("the methods' rankings include them (analysis.include_underdetermined)" if ranked
                else "the methods' rankings in the report leave them out")
    return "\n".join([f"calibench: fits on too little data (docs/recalibration.md; vs/ms/dir: fewer than 10 "
                      f"validation samples per class, iso/hist: fewer than 10 positives in a class): their numbers "
                      f"describe a fit on too little data, not the method; {rankings}:"] + lines)


def search_summary(tables: Sequence[str | Path]) -> str:
    """The run's closing lines on lambda, mu searches whose chosen pair is worse than identity
    (a table's ``{stage}_search_worse_than_identity`` = 1; docs/recalibration.md, "Choosing
    lambda and mu"); "" when there are none."""
    import pyarrow.parquet as pq

    from calibench.vocabulary import SEARCH_FLAG

    found = []
    for table in tables:
        try:
            flags = [c for c in pq.read_schema(table).names if c.endswith(f"_{SEARCH_FLAG}")]
            frame = pd.read_parquet(table, columns=flags) if flags else pd.DataFrame()
        except Exception:  # noqa: BLE001 - a missing or damaged table is told by the failures summary
            continue
        found += [f"{Path(table).stem} {c.removesuffix(f'_{SEARCH_FLAG}')}" for c in flags if (frame[c] == 1).any()]
    if not found:
        return ""
    return (f"calibench: {len(found)} lambda, mu search(es) chose a pair whose cross-validated NLL is worse than no "
            f"recalibration (fitted with it and flagged {{stage}}_{SEARCH_FLAG} = 1; the report's methods section "
            f"explains): {', '.join(found)}")


_LOG_LINE = re.compile(r"^\s*log: (\S+) \(check log file")


def failed_job_logs(snakemake_log: str | Path) -> list[Path]:
    """The log files of the jobs a Snakemake run reports as failed, in its log's order."""
    text = Path(snakemake_log).read_text(errors="replace")
    out: list[Path] = []
    for line in text.splitlines():
        match = _LOG_LINE.match(line)
        if match and Path(match.group(1)) not in out:
            out.append(Path(match.group(1)))
    return out


_FAILED_RULE = re.compile(r"^Error in rule (\S+?):?\s*$", re.MULTILINE)


def failed_rules(snakemake_log: str | Path) -> list[str]:
    """The rules of the jobs a Snakemake run reports as failed (``Error in rule NAME:``), each
    once, in its log's order."""
    return list(dict.fromkeys(_FAILED_RULE.findall(Path(snakemake_log).read_text(errors="replace"))))


def cause(job_log: str | Path, lines: int = 3) -> str:
    """The end of a failed job's log: where the error is said (the last exception line, or the
    last lines)."""
    try:
        text = [line.rstrip() for line in Path(job_log).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log written)"
    for line in reversed(text):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b.*:", line) or " ERROR " in line:
            return line.strip()[:1000]
    return " | ".join(text[-lines:])[:1000]


def newest_snakemake_log(workdir: str | Path = ".", since: float = 0.0) -> Path | None:
    """Snakemake's log of the latest run that started at or after ``since`` (a time stamp)."""
    logs = [p for p in (Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log") if p.stat().st_mtime >= since]
    return max(logs, key=lambda p: p.stat().st_mtime) if logs else None


# How Snakemake 9 tells a failed shell job's end, in the RuleException just before the job's
# "Error in rule" block (Python's CalledProcessError): the shell's exit status, 128 + the signal's
# number when the job's program was killed (bash), or the signal that killed the shell itself.
_EXIT_STATUS = re.compile(r"returned non-zero exit status (-?\d+)\.\s*$")
_DIED_WITH = re.compile(r"died with (?:<Signals\.\w+: (\d+)>|unknown signal (\d+))\.\s*$")


def signal_exit(status: int) -> str | None:
    """``"killed by SIGKILL (exit status 137)"`` for an exit status that says a signal ended the
    program (a shell's 128 + N, or a negative return code -N); None for an ordinary exit."""
    import signal

    if status < 0:
        number, said = -status, f"signal {-status}"
    elif 128 < status <= 128 + 64:
        number, said = status - 128, f"exit status {status}"
    else:
        return None
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    hint = ": out of memory (the kernel's OOM killer), or kill -9" if name == "SIGKILL" else ""
    return f"killed by {name} ({said}){hint}"


def failed_job_ends(snakemake_log: str | Path) -> dict[Path, int]:
    """The exit status Snakemake reports for each failed job with a log (by the job's log file;
    a negative number -N: the job's shell was killed by signal N); jobs whose status is not said
    (a Python ``run:`` rule, an error before the command ran) are left out."""
    text = Path(snakemake_log).read_text(errors="replace")
    out: dict[Path, int] = {}
    status: int | None = None  # said before the job's "Error in rule" block
    block: int | None = None
    for line in text.splitlines():
        if (match := _EXIT_STATUS.search(line)) is not None:
            status = int(match.group(1))
        elif (match := _DIED_WITH.search(line)) is not None:
            status = -int(match.group(1) or match.group(2))
        elif line.startswith("Error in rule "):
            block, status = status, None
        elif (match := _LOG_LINE.match(line)) and block is not None:
            out.setdefault(Path(match.group(1)), block)
            block = None
    return out


def failed_jobs_summary(workdir: str | Path = ".", since: float = 0.0) -> str:
    """Each failed job of the last Snakemake run (started after ``since``) with the cause: the
    signal that killed it (e.g. ``killed by SIGKILL (exit status 137...)``), whatever its log
    says last, else the error from its log."""
    log = newest_snakemake_log(workdir, since)
    if log is None:
        return ""
    jobs = failed_job_logs(log)
    if not jobs:
        return ""
    ends = failed_job_ends(log)
    lines = [f"calibench: {len(jobs)} job(s) failed:"]
    for job in jobs:
        lines.append(f"  {job}: {job_cause(Path(workdir) / job, ends.get(job))}")
    return "\n".join(lines)


def job_cause(job_log: str | Path, status: int | None = None) -> str:
    """Why a failed job failed: the signal that killed it where its exit ``status`` (from
    :func:`failed_job_ends`) says one did, with what its log says last; else its log's error
    (:func:`cause`)."""
    told = cause(job_log)
    killed = signal_exit(status) if status is not None else None
    if killed:
        return f"{killed}; its log ends: {told}" if told != "(no log written)" and told else killed
    return told
