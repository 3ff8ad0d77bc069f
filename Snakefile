"""calibench: calibration of NATS-Bench populations (see README.md).

    snakemake --cores 2                                   # the whole DAG (default: mini benchmark)
    snakemake --cores 2 results/tables/tss_200_cifar100.parquet   # one dataset of one space
    snakemake --configfile config/nats.yaml --profile profiles/slurm   # the real run on a cluster
"""

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


validate(config, schema="workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/minibench.smk"
include: "workflow/rules/population.smk"
include: "workflow/rules/inference.smk"
include: "workflow/rules/recalibration.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/analysis.smk"


rule all:
    default_target: True
    input:
        all_tables(),
        f"{RESULTS}/report.html",
