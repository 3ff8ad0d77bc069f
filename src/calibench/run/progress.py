"""What `calibench run` shows of a Snakemake run: one progress line per rule and a closing
summary of this run (issue 24); Snakemake's own output goes whole to a log file.

:class:`RunProgress` reads Snakemake's output line by line (its job blocks: ``rule name:``,
``jobid: N``, ``Finished jobid: N (Rule: name)``, ``Error in rule name:``, and its
``Job stats`` table) and prints a line whenever a rule's count of finished jobs moves:
``[ 1m05s] measure        4/9 done, about 40 s left``. Totals only grow (a checkpoint adds
jobs), so a rule's done count and the run's fraction never go backwards."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

_STARTED = re.compile(r"^\s*(?:local)?(?:rule|checkpoint) ([A-Za-z_][\w]*):\s*$")
_JOBID = re.compile(r"^\s*jobid: (\d+)\s*$")
_FINISHED = re.compile(r"^\s*Finished jobid: (\d+) \(Rule: ([\w]+)\)")
_ERROR = re.compile(r"^\s*Error in rule ([\w]+):")
_STATS_ROW = re.compile(r"^([A-Za-z_][\w]*)\s+(\d+)\s*$")


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class RunProgress:
    """Parse Snakemake's output (:meth:`feed`) and print progress lines through ``say``."""

    def __init__(self, say: Callable[[str], None], note: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        """``say``: progress lines; ``note``: the workflow's own words and Snakemake's verdicts
        passed through (default: ``say``)."""
        self.say, self.note, self.clock = say, note or say, clock
        self.start = clock()
        self.planned: dict[str, int] = {}  # from the Job stats tables (the largest seen)
        self.started: dict[str, set[str]] = {}
        self.done: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self._rule: str | None = None
        self._in_stats = False
        self.shown: list[tuple[str, int, int]] = []  # (rule, done, total) as printed

    def total(self, rule: str) -> int:
        return max(self.planned.get(rule, 0), len(self.started.get(rule, ())), self.done.get(rule, 0)
                   + self.failed.get(rule, 0))

    def feed(self, line: str) -> None:
        text = line.rstrip("\n")
        if text.startswith("calibench: ") or text.startswith("Nothing to be done"):
            self.note(text)  # the workflow's own words (repair, missing archives), and nothing to do
            return
        if text.strip() == "Job stats:":
            self._in_stats = True
            return
        if self._in_stats:
            row = _STATS_ROW.match(text.strip())
            if row and row.group(1) not in ("job", "total"):
                self.planned[row.group(1)] = max(self.planned.get(row.group(1), 0), int(row.group(2)))
            elif text.strip().startswith("total") or (not text.strip() and self.planned):
                self._in_stats = False
            return
        if m := _STARTED.match(text):
            self._rule = m.group(1)
            return
        if (m := _JOBID.match(text)) and self._rule:
            self.started.setdefault(self._rule, set()).add(m.group(1))
            self._rule = None
            return
        if m := _FINISHED.match(text):
            self.done[m.group(2)] = self.done.get(m.group(2), 0) + 1
            self._show(m.group(2))
        elif m := _ERROR.match(text):
            self.failed[m.group(1)] = self.failed.get(m.group(1), 0) + 1
            self._show(m.group(1))

    def _left(self) -> str:
        done = sum(self.done.values()) + sum(self.failed.values())
        total = sum(self.total(r) for r in set(self.planned) | set(self.started))
        elapsed = self.clock() - self.start
        if not done or total <= done:
            return ""
        return f", about {_clock(elapsed / done * (total - done))} left"

    def _show(self, rule: str) -> None:
        done, total = self.done.get(rule, 0), self.total(rule)
        failed = self.failed.get(rule, 0)
        self.shown.append((rule, done, total))
        self.say(f"[{_clock(self.clock() - self.start):>6}] {rule:22s} {done}/{total} done"
                 + (f", {failed} failed" if failed else "") + self._left())

    def add(self, earlier: "RunProgress") -> None:
        """Count an earlier pass's finished and failed jobs with this one's."""
        for mine, theirs in ((self.done, earlier.done), (self.failed, earlier.failed)):
            for rule, n in theirs.items():
                mine[rule] = mine.get(rule, 0) + n

    def jobs(self) -> tuple[int, int]:
        """(jobs finished, jobs failed) so far."""
        return sum(self.done.values()), sum(self.failed.values())
