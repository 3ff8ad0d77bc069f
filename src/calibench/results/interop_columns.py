"""The columns of the tao2024 exchange format (:mod:`calibench.results.interop`): each
published column's name, how sure that name is, what calibench writes under it and where
their definition differs from ours (docs/metrics.md), and the mapping between their names
and ours. :func:`definitions_markdown` renders the table for the README.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# How sure a column name of the published layout is.
README = "README of the published dataset"
ISSUE = "calibench issue (their layout), their evaluation code's metric keys"
CODE = "their analysis scripts, which read cifar10_tss.csv"
ASSUMED = "assumed: their naming pattern, name not seen in their files"
EXTENSION = "calibench extension, not in the published files"


@dataclass(frozen=True)
class Column:
    """One column (or family ``{stage}_{NAME}_{B}``) of the published layout and its link to ours."""

    theirs: str  # name in the published layout; {stage} and {B} are placeholders
    ours: str | None  # our column (same placeholders); None: we do not measure it
    source: str  # README, ISSUE, CODE or ASSUMED
    definition: str  # what calibench writes there (docs/metrics.md)
    difference: str  # where their definition differs from ours ("" if none known)


_PRE_SET = ("ours on the test part (80 %) of the seeded 20/80 split; theirs on the whole test set (config "
            "`pre_samples: all` measures ours so)")
_POST = ("ours: T = argmin NLL on the validation part (20 %), T in [0.05, 20] (docs/metrics.md); theirs: T on the "
         "grid 0.1..10.0 minimising 15-bin ECE (config `temperature.method: grid_ece`). Both measure post on the 80 % "
         "test part")
COLUMNS: tuple[Column, ...] = (
    Column("config", "nats_index", README, "the architecture's NATS-Bench index (export: a table without "
           "`nats_index` gives its `arch_index`; import sets both)", ""),
    Column("acc", "accuracy", README, "top-1 accuracy on the whole evaluation (test) set, a fraction in [0, 1]",
           "none in meaning (theirs: \"accuracy at epoch 200\", a fraction); import also accepts percent"),
    Column("correct_confidence", "pre_mean_conf_correct", README,
           "mean max-softmax confidence over the correctly classified samples (pre stage)", _PRE_SET),
    Column("incorrect_confidence", "pre_mean_conf_incorrect", README,
           "mean max-softmax confidence over the misclassified samples (pre stage); empty if none", _PRE_SET),
    Column("arch", "arch_str", README, "the architecture string (TSS |op~0|+..., SSS c1:c2:c3:c4:c5)", ""),
    Column("{stage}_ECE_{B}", "{stage}_ece_{B}", README,
           "ECE, B equal-width bins (lo, hi], first bin closed; empty bins add nothing",
           "pre: " + _PRE_SET + "; post: " + _POST),
    Column("{stage}_ECE_em_{B}", "{stage}_ece_em_{B}", ISSUE,
           "ECE with B equal-mass bins (Kumar et al. 2019 get_equal_bins edges)", "pre/post sets and T as for ECE"),
    Column("{stage}_cwCE_{B}", "{stage}_cwce_{B}", ISSUE,
           "classwise ECE (Nixon's SCE), B equal-width bins, averaged over all K classes",
           "pre/post sets and T as for ECE"),
    Column("{stage}_cwCE_em_{B}", "{stage}_cwce_em_{B}", ISSUE,
           "classwise ECE with B equal-mass bins per class (marginal, p = 1, no debiasing)",
           "pre/post sets and T as for ECE; some of their tables put an adaptive classwise error (ACE-like) "
           "under this name"),
    Column("{stage}_MCE_{B}", "{stage}_mce_{B}", ASSUMED,
           "MCE, B equal-width bins: max over non-empty bins of |acc - conf| (unsigned)",
           "theirs signed: an underconfident network got 0 (config `mce: signed` measures ours so); plus the sets "
           "and T as for ECE"),
    Column("{stage}_NLL", "{stage}_nll", ASSUMED, "mean negative log-likelihood from the logits (may be inf)",
           "pre/post sets and T as for ECE"),
    Column("{stage}_Brier", "{stage}_brier", ASSUMED,
           "Brier score divided by K, as theirs: mean_i sum_k (p_ik - 1[y_i = k])^2 / K. Our tables hold it "
           "undivided (range [0, 2]): export writes it divided by K as decimal text that import multiplies by K "
           "in decimal, giving the float back bit for bit",
           "converted exactly; pre/post sets and T as for ECE"),
    Column("{stage}_KSCE", "{stage}_ksce", ASSUMED, "top-1 KS calibration error (Gupta et al. 2021), ties grouped",
           "theirs returned 0 on any exception; pre/post sets and T as for ECE"),
    Column("{stage}_KDECE", "{stage}_kdece", ASSUMED,
           "KDE-ECE (Zhang et al. 2020, triweight kernel, reflection at 0 and 1)",
           "theirs returned 0 on any exception; pre/post sets and T as for ECE"),
    Column("{stage}_MMCE", "{stage}_mmce", ASSUMED, "MMCE, Laplacian kernel width 0.4 (Kumar et al. 2018)",
           "theirs returned 0 on any exception; pre/post sets and T as for ECE"),
    Column("auc_cifar10c", "pre_ood_auroc_gaussian_noise", CODE,
           "OoD AUROC of the max softmax probability, CIFAR-10 test set against CIFAR-10-C Gaussian noise "
           "(severity 5 by default); CIFAR-10 tables only",
           "their corrupted set and severity are not documented (the README credits the robustness data to "
           "Jung et al., \"Neural Architecture Design and Robustness: A Dataset\"); ours is one corruption"),
    Column("auc_svhn", "pre_ood_auroc_svhn", ASSUMED,
           "OoD AUROC of the max softmax probability, CIFAR-10 test set against the SVHN test set; CIFAR-10 "
           "tables only", "their code named it pre_auc_svhn; import accepts both names"),
    Column("seed", "seed", EXTENSION,
           "the NATS-Bench training seed of the weights; written only when it is not 777 (import: 777 when absent)",
           "the published files hold seed 777 (hp 200 TSS, hp 90 SSS) and have no such column"),
    Column("measured_by", "measured_by", EXTENSION,
           "written only by `export --expand-isomorphs`: the config of the row whose values this row repeats (a "
           "TSS isomorph copy), or the row's own config (a measurement); import: taken as written, else derived",
           "the published files have no such column: each row there is its own measurement"),
)
ALIASES = {"pre_auc_cifar10c": "auc_cifar10c", "pre_auc_svhn": "auc_svhn"}  # lower-case alias -> lower-case name
FRACTIONS = ("acc", "correct_confidence", "incorrect_confidence")  # percent accepted on import, converted
REQUIRED = ("config", "acc", "arch", "pre_ECE_15", "post_ECE_15")  # HCS and the analysis need the last two
BINNED = {c.ours.split("_", 1)[1].rsplit("_", 1)[0]: c for c in COLUMNS if c.theirs.endswith("_{B}")}  # ece -> Column
UNBINNED = {c.ours.split("_", 1)[1]: c for c in COLUMNS if c.theirs.startswith("{stage}_") and "{B}" not in c.theirs}
SCALARS = {c.theirs: c for c in COLUMNS if "{stage}" not in c.theirs}  # config, acc, ..., auc_*, seed
PER_ROW = ("config", "acc", "correct_confidence", "incorrect_confidence", "arch")  # the leading columns, in order


def definitions_markdown() -> str:
    """The column definitions table (markdown) of the tao2024 layout, from :data:`COLUMNS`."""
    lines = ["| Column (tao2024) | Our column | What calibench writes there | Where their definition differs "
             "| Name from |", "|---|---|---|---|---|"]
    for c in COLUMNS:
        cells = [f"`{c.theirs}`", f"`{c.ours}`", c.definition, c.difference or "—", c.source]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def definition_of(name: str) -> Column | None:
    """The :data:`COLUMNS` entry a published column name belongs to (case-insensitive), or None."""
    key = ALIASES.get(name.lower(), name.lower())
    for c in COLUMNS:
        pattern = re.escape(c.theirs.lower()).replace(r"\{stage\}", "(pre|post)").replace(r"\{b\}", "[0-9]+")
        if re.fullmatch(pattern, key):
            return c
    return None


# Our binned column names, and theirs (lower case), in the families of COLUMNS.
OUR_BINNED = re.compile(r"^(pre|post)_(" + "|".join(sorted(BINNED, key=len, reverse=True)) + r")_([0-9]+)$")
THEIR_BINNED = re.compile(r"^(pre|post)_(" + "|".join(sorted((c.theirs.split("_", 1)[1].rsplit("_", 1)[0].lower()
                                                             for c in BINNED.values()), key=len, reverse=True))
                          + r")_([0-9]+)$")
THEIR_UNBINNED = re.compile(r"^(pre|post)_(" + "|".join(c.theirs.split("_", 1)[1].lower() for c in UNBINNED.values())
                            + r")$")


def our_name(key: str) -> tuple[str | None, str | None]:
    """Our column and metric family for a lower-case published column name (None: unknown)."""
    if m := THEIR_BINNED.match(key):
        return f"{m.group(1)}_{m.group(2)}_{int(m.group(3))}", m.group(2)
    if m := THEIR_UNBINNED.match(key):
        return f"{m.group(1)}_{m.group(2)}", m.group(2)
    if key in ("auc_cifar10c", "auc_svhn"):
        return SCALARS[key].ours, key
    return None, None



def column_key(name) -> str:
    """A published column's name as matched: stripped, lower case, its alias resolved."""
    key = str(name).strip().lower()
    return ALIASES.get(key, key)


def brier_columns(header) -> list:
    """The Brier columns of a published file's ``header`` (names as written): read as text, so
    that import multiplies them by K exactly (:mod:`calibench.results.scaled_text`)."""
    return [c for c in header if our_name(column_key(c))[1] == "brier"]
