# The analysis as parts (calibench.analysis.registry): each part is its own job with declared
# outputs under {RESULTS}/analysis/ (its tables and its manifest, analysis/parts/{part}.json:
# figures and report blocks) and its figures as a directory, {RESULTS}/plots/{part}/. The rules
# are made here from the registry, one per part the config has (analysis.parts chooses among
# them, analysis.extra_parts adds a user's own: docs/analysis.md). Each part's params carry
# exactly the settings its outputs depend on (the part's `settings`), so a config change reruns
# exactly the parts it affects, and then the report. One failing part fails alone: the others
# complete (keep-going, the profiles' default); the report, which needs them all, does not
# run, and `calibench run` writes it from the parts that are up to date, naming those it leaves
# out (calibench.run.partial_report; docs/analysis.md, "When a part fails").

for _spec, _part in ANALYSIS_PARTS:
    _manifest = results_path(layout.part_manifest, _part.name)

    rule:
        name:
            registry.rule_name(_part.name)
        input:
            tables=all_tables(),
            **part_inputs(_part),
        output:
            manifest=_manifest,
            **{key: part_file(name) for key, name in _part.outputs.items()},
            plots=part_plots(_part.name, _part.title),
        threads: _part.threads
        conda:
            "../envs/calibench.yaml"
        log:
            log_file(f"analysis/{_part.name}"),
        benchmark:
            benchmark_file(f"analysis/{_part.name}")
        params:
            settings=part_settings(_part, _spec),
            results=results_of(_manifest),
        shell:
            PART_SHELL


rule assemble_report:
    """report.html, analysis/findings.csv and analysis/claims.csv from the parts' outputs and the tables."""
    input:
        tables=all_tables(),
        parts=analysis_part_outputs,
    output:
        report=report(results_path(layout.report_path), caption="../report/report_html.rst", category="Report"),
        findings=results_path(layout.findings_path),
        claims=results_path(layout.claims_path),
    conda:
        "../envs/calibench.yaml"
    log:
        log_file("report"),
    benchmark:
        benchmark_file("report")
    params:
        settings=stage_json(registry.config_report_settings(config)),
        results=results_of(results_path(layout.report_path)),
    shell:
        "OMP_NUM_THREADS={threads} \"$CALIBENCH_PYTHON\" -m calibench report --settings {params.settings:q} --results {params.results} "
        "--tables {input.tables} > {log} 2>&1"
