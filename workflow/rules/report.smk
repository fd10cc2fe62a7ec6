# Summary table, plots and the Markdown report: quick, local, re-run only when a record changes.


localrules:
    aggregate,
    roofline,
    plot_batch_sweep,
    plot_seq_sweep,
    plot_generation,
    plot_declared,
    report,


rule aggregate:
    input:
        [cell_record(c) for c in CELLS],
    output:
        csv=report("results/summary.csv", caption="../report/summary.rst", category="Summary"),
        parquet="results/summary.parquet",
        loads="results/loads.csv",  # every load of every LLM serving cell (inferbench.scenarios.llm_load.loads)
    params:
        # the summary columns scenarios declare are reached through their declaration, not an import
        code=job_code(VERBS["aggregate"].target, *declared_targets("columns")),
    conda:
        "../../envs/report.yaml"
    log:
        "logs/aggregate.log",
    shell:
        "python -m inferbench aggregate {input:q} --out-csv {output.csv:q} --out-parquet {output.parquet:q}"
        " --out-loads {output.loads:q} > {log:q} 2>&1"


rule plot_batch_sweep:
    input:
        lambda wc: PLAN.timed_records(wc.workload),
    output:
        latency=report(
            "results/plots/{workload}/latency_per_item.png",
            caption="../report/latency_per_item.rst",
            category="Latency",
            subcategory="{workload}",
        ),
        throughput=report(
            "results/plots/{workload}/throughput.png",
            caption="../report/throughput.rst",
            category="Throughput",
            subcategory="{workload}",
        ),
    params:
        code=verb_code("plot"),
        engines=list(config["engines"]),  # their order gives each variant its colour
    conda:
        "../../envs/report.yaml"
    log:
        "logs/plot/{workload}.batch.log",
    shell:
        "python -m inferbench plot --kind batch --workload {wildcards.workload:q} --out-dir \"$(dirname {output.latency:q})\""
        " {input:q} --engines {params.engines:q} > {log:q} 2>&1"


rule plot_seq_sweep:
    input:
        lambda wc: PLAN.timed_records(wc.workload),
    output:
        report(
            "results/plots/{workload}/latency_vs_seq.png",
            caption="../report/latency_vs_seq.rst",
            category="Sequence length",
            subcategory="{workload}",
        ),
    wildcard_constraints:
        workload=workload_regex(kind="text"),
    params:
        code=verb_code("plot"),
        engines=list(config["engines"]),
    conda:
        "../../envs/report.yaml"
    log:
        "logs/plot/{workload}.seq.log",
    shell:
        "python -m inferbench plot --kind seq --workload {wildcards.workload:q} --out-dir \"$(dirname {output:q})\""
        " {input:q} --engines {params.engines:q} > {log:q} 2>&1"


# The generation plot of a decoder workload: time per output token and to the first against the batch.
rule plot_generation:
    input:
        lambda wc: PLAN.timed_records(wc.workload),
    output:
        report(
            f"results/plots/{{workload}}/{GENERATION_PLOT}",
            caption="../report/generation.rst",
            category="Generation",
            subcategory="{workload}",
        ),
    wildcard_constraints:
        workload=workload_regex(kind="decoder"),
    params:
        code=job_code(VERBS["plot"].target, *declared_targets("summary_plots")),
        engines=list(config["engines"]),
    conda:
        "../../envs/report.yaml"
    log:
        "logs/plot/{workload}.generation.log",
    shell:
        f"python -m inferbench plot --kind summary --name {GENERATION_PLOT} --workload {{wildcards.workload:q}}"
        " --out-dir \"$(dirname {output:q})\""
        " {input:q} --engines {params.engines:q} > {log:q} 2>&1"


# A plot a scenario declares of its cells (its entry's `plots`), drawn from their records: serving.png, p99 against
# QPS over every LoadGen run of the server cells' search, or TTFT and TPOT against the rate over every load of the
# llm_load cells' sweep.
rule plot_declared:
    input:
        lambda wc: PLAN.plotted_records(wc.workload, wc.plot),
    output:
        report(
            "results/plots/{workload}/{plot}",
            caption="../report/declared.rst",
            category="Scenarios",
            subcategory="{workload}",
        ),
    wildcard_constraints:
        plot="|".join(re.escape(p) for p in record_plots()) or "(?!)",  # (?!): none
    params:
        code=job_code(VERBS["plot"].target, *declared_targets("plots")),
        engines=list(config["engines"]),
    conda:
        "../../envs/report.yaml"
    log:
        "logs/plot/{workload}.{plot}.log",
    shell:
        "python -m inferbench plot --kind declared --name {wildcards.plot:q} --workload {wildcards.workload:q}"
        " --out-dir \"$(dirname {output:q})\" {input:q} --engines {params.engines:q} > {log:q} 2>&1"


rule roofline:
    input:
        unpack(roofline_inputs),
        summary="results/summary.csv",
    output:
        "results/roofline.csv",
    params:
        code=verb_code("roofline"),
    conda:
        "../../envs/report.yaml"
    log:
        "logs/roofline.log",
    shell:
        "python -m inferbench roofline --summary {input.summary:q} --costs {input.costs:q} --peaks {input.peaks:q}"
        " --out {output:q} > {log:q} 2>&1"


rule report:
    input:
        summary="results/summary.csv",
        loads="results/loads.csv",  # read beside the summary: the per-load tables of LLM serving cells
        plots=PLAN.plot_files(),
        models=[f"results/models/{w}.json" for w in CELL_WORKLOADS],
        datasets=[f"data/processed/{d}.stats.json" for d in used_datasets()],
        profiles=[profile_record(c) for c in PROFILED_CELLS],
        roofline=["results/roofline.csv"] if ROOFLINE_CELLS else [],
        leases=[config["report"]["lease_spread"]] if config["report"]["lease_spread"] else [],
        # read beside the summary (results/cells/): what no summary column holds (an LLM serving cell's sweep)
        records=PLAN.report_records(),
    output:
        report="results/report.md",
        details="results/report_details.md",  # written beside the report (inferbench.report.markdown)
    params:
        code=job_code(VERBS["report"].target, *declared_targets("details")),
        studies=report_studies(),
        leases=lambda wc, input: ["--lease-spread", input.leases] if input.leases else [],
    conda:
        "../../envs/report.yaml"
    log:
        "logs/report.log",
    shell:
        "python -m inferbench report --summary {input.summary:q} --out {output.report:q} --plots {input.plots:q}"
        " --model-meta {input.models:q} --dataset-stats {input.datasets:q} --profiles {input.profiles:q}"
        " --roofline {input.roofline:q} --studies {params.studies:q} {params.leases:q} > {log:q} 2>&1"


# One rule per exporter (inferbench.catalog.exporters: a module of inferbench.exporters), on request: config
# `exporters: [mlflow]`, or its output as a target (results/mlflow/export.json). MLflow's store is
# MLFLOW_TRACKING_URI where set, else results/mlflow/mlflow.db.
for exporter in EXPORTERS.values():

    rule:
        name:
            f"export_{exporter.name}"
        localrule: True
        input:
            summary="results/summary.csv",
            loads="results/loads.csv",  # read beside the summary
            records=[cell_record(c) for c in CELLS],
            plots=PLAN.plot_files(),
        output:
            f"results/{exporter.name}/export.json",
        params:
            code=job_code(VERBS["export"].target, exporter.target),
            name=exporter.name,
        conda:
            exporter_env(exporter.name)
        log:
            f"logs/export_{exporter.name}.log",
        shell:
            "python -m inferbench export {params.name:q} --summary {input.summary:q} --cells-dir results/cells"
            " --plots-dir results/plots --out-dir \"$(dirname {output:q})\" --out {output:q} > {log:q} 2>&1"
