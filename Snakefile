"""calibench: calibration of NATS-Bench populations (see README.md).

    snakemake --cores 2                                   # the whole DAG (default: mini benchmark)
    snakemake --cores 2 results/tables/tss_200_cifar100.parquet   # one dataset of one space
    snakemake --configfile config/nats.yaml --profile profiles/slurm   # the real run on a cluster
"""

from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


from calibench.config import check as configcheck

# the default file first: the --configfile files go over it
CONFIG_FILES = list(dict.fromkeys(str(Path(f).resolve()) for f in ["config/config.yaml", *workflow.configfiles]))
try:  # a few lines naming the key, value and config file (Snakemake's own message dumps the schema)
    configcheck.check(config, CONFIG_FILES)
except configcheck.ConfigError as exc:
    raise WorkflowError(str(exc)) from None
validate(config, schema=configcheck.SCHEMA)  # fills in the schema's defaults
if not (workflow.remote_exec or workflow.subprocess_exec):  # planning, not each job's parse
    from calibench.sources import check_populations

    try:  # a population that selects no network, or one the archive does not hold
        check_populations(config, CONFIG_FILES)
    except configcheck.ConfigError as exc:
        raise WorkflowError(str(exc)) from None


include: "workflow/rules/common.smk"
include: "workflow/rules/minibench.smk"
include: "workflow/rules/population.smk"
include: "workflow/rules/inference.smk"
include: "workflow/rules/recalibration.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/explorer.smk"


rule all:
    default_target: True
    input:
        all_tables(),
        results_path(layout.report_path),
        [results_path(layout.explorer_page)] if config["explorer"] else [],
