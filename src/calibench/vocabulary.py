"""The project's vocabulary: the stage names, the shard row's columns and the NATS-Bench space
names, defined once. Paths are :mod:`calibench.layout`'s; the numeric core needs the names only.
No imports: the Snakefile reads this at every parse."""

# The post-hoc stages (docs/recalibration.md, "Common rules"): ``pre`` is the network's own
# softmax, ``post`` temperature scaling. They prefix the columns of shards and tables.
STAGES = ("pre", "post", "vs", "ms", "dir", "iso", "hist", "spline")
# The stages whose off-diagonal and intercept regularisation (lambda, mu) is searched.
ODIR_STAGES = ("ms", "dir")
# 1 where a stage's lambda, mu search chose a pair whose CV NLL is worse than identity's
# (docs/recalibration.md, "Choosing lambda and mu"): a shard's metric, a table's
# {stage}_search_worse_than_identity, the search JSON's chosen.{stage}.{stage}_search_...
SEARCH_FLAG = "search_worse_than_identity"
# The samples ``pre`` is measured on (config ``pre_samples``): the default first.
PRE_SAMPLES = ("test_part", "all")
# How MCE takes a bin's gap (config ``mce``; docs/metrics.md, "Equal-width bins"): the default first.
MCE_GAPS = ("unsigned", "signed")
# The columns of every shard row (calibench.results.shards gives their types); a table adds
# ``measured_by`` and widens (stage, metric, bins) into ``{stage}_{metric}[_{bins}]`` columns.
ROW_COLUMNS = ("space", "hp", "dataset", "arch_index", "arch_str", "seed", "stage", "metric", "bins", "value",
               "params", "flops", "temperature", "accuracy", "recorded_accuracy", "n_eval", "config_hash",
               "logits_key", "logits_file", "source_bytes", "source_mtime", "calibench_version")
TABLE_EXTRA_COLUMNS = ("measured_by",)
# The spaces of NATS-Bench; other names are populations from config ``populations``.
NATS_SPACES = ("tss", "sss")
# Architectures in each space of NATS-Bench (its archives' meta; docs/architecture.md)
NATS_SPACE_SIZES = {"tss": 15625, "sss": 32768}


def not_a_result_table(names) -> str | None:
    """Why a parquet file with columns ``names`` is not a result table (``"a shard"``: long
    rows of stage, metric, value; ``"no pre_* metric columns"``: a failures file or another
    table; ``"no measured_by column"``: an analysis output such as the HCS ranking), None if
    it is one."""
    names = set(names)
    if {"stage", "metric"} <= names:
        return "a shard"
    if not any(str(n).startswith(f"{STAGES[0]}_") for n in names):
        return "no pre_* metric columns"
    if not set(TABLE_EXTRA_COLUMNS) <= names:
        return "no measured_by column"
    return None
