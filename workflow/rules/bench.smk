# One job per cell. The package takes a machine-wide lock while measuring, so no measurement overlaps
# other work of the workflow whatever --resources are given; bench_slot only helps the scheduler.


# One rule per scenario (inferbench.catalog.scenarios), each declaring the files its cells' jobs write:
# the record, the per-call samples, and the scenario's own (a serving cell's LoadGen logs). The plain
# scenario's rule is benchmark_cell, the others' <scenario>_cell; their arguments name the scenario and
# carry its own settings, where it has some (cell_args). In rules made in a loop, `scenario=scenario` binds
# each lambda to its own scenario.
for scenario in SCENARIOS:
    cell_stem = f"{{workload}}/{{engine}}-{{precision}}/{{device}}/b{{batch}}-s{{seq}}-t{{threads}}{path_suffix(scenario)}"

    rule:
        name:
            cell_rule(scenario)
        input:
            unpack(lambda wc, scenario=scenario: measured_cell_inputs(wc, scenario)),
        output:
            **cell_outputs(f"results/cells/{cell_stem}", scenario),
        params:
            cell=lambda wc, scenario=scenario: cell_args(wc, scenario),
            files=cell_files,
            # edits of any module the cell's job runs re-run the cell (Snakemake does not track imported code)
            code=lambda wc, scenario=scenario: cell_code(wc, scenario),
            reference=lambda wc, input: ["--reference", input.reference] if "reference" in input.keys() else [],
            primed=lambda wc, input: ["--primed", input.primed] if "primed" in input.keys() else [],
            interleaved=lambda wc, input: ["--interleaved", input.interleaved] if "interleaved" in input.keys() else [],
            tolerance=lambda wc: json.dumps(parity_tolerance(wc), sort_keys=True),
            invalidates=published_outputs,
        threads: cell_threads
        priority: cell_priority
        resources:
            # a cell measured in turn with others takes its record from their job: it holds no GPU
            gpu=lambda wc, scenario=scenario: int(
                wc.device == "cuda" and PLAN.interleaved_folder(wildcard_cell(wc, scenario)) is None
            ),
            bench_slot=1,
        # CPU cells can be bundled into fewer cluster jobs: --group-components cpu_cells=N (see README)
        group:
            cell_group
        conda:
            "../../envs/torch.yaml"
        log:
            f"logs/{cell_rule(scenario)}/{cell_stem}.log",
        shell:
            "python -m inferbench run-cell {params.cell:q} {params.files:q} {params.reference:q} {params.primed:q}"
            " {params.interleaved:q} --tolerance {params.tolerance:q} --code {params.code:q} --invalidates {params.invalidates:q}"
            " --out {output.record:q} > {log:q} 2>&1"


# The cells of a study with `interleave: true` that differ only in their engine variant, measured in one job, one
# fresh process of each in turn (inferbench.launch.cell_job.measure_in_turn); each cell's own job then takes its
# record from this job's folder.
rule interleaved_cells:
    input:
        lambda wc: PLAN.interleaved_inputs(interleaved_folder(wc)),
    output:
        directory("results/interleaved/{workload}/{precision}/{device}/b{batch}-s{seq}-t{threads}"),
    params:
        # from the wildcards alone: Snakemake records no param made from the output (and would not re-run on it)
        members=lambda wc: PLAN.interleaved_members(interleaved_folder(wc)),
        code=interleaved_code,
        invalidates=published_outputs,
    threads: lambda wc: PLAN.threads(PLAN.interleaved[interleaved_folder(wc)][0])
    priority: lambda wc: PLAN.priority(PLAN.interleaved[interleaved_folder(wc)][0])
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
        bench_slot=1,
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/interleaved_cells/{workload}/{precision}/{device}/b{batch}-s{seq}-t{threads}.log",
    shell:
        "python -m inferbench run-interleaved --device {wildcards.device:q} {params.members:q}"
        " --code {params.code:q} --invalidates {params.invalidates:q} > {log:q} 2>&1"


# A cell whose engine compiles (torch.compile) is compiled from nothing here first, into caches beside the
# record that its job's measuring processes load (inferbench.launch.cell_job.prime_cell). No GPU slot: on
# one GPU it compiles beside the GPU cells' queue, never beside a timed loop (the machine lock). A cluster
# job of it asks for a GPU through `gres` (gpu:1), which the local scheduler does not count.
rule prime_cell:
    input:
        unpack(prime_inputs),
    output:
        record="results/primed/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.json",
        caches=directory("results/primed/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.caches"),
    params:
        cell=cell_args,
        files=cell_files,
        code=prime_code,
    threads: 4
    priority: RunPlan.PRIME_PRIORITY
    resources:
        gres=lambda wc: "gpu:1" if wc.device == "cuda" else "",
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/prime_cell/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.log",
    shell:
        "python -m inferbench prime-cell {params.cell:q} {params.files:q} --code {params.code:q}"
        " --out {output.record:q} > {log:q} 2>&1"


# Cells named in config `profile.cells`: a trace and the top operators, in a job of their own so that
# the profiler never runs inside a timed loop.
rule profile_cell:
    input:
        unpack(cell_inputs),
    output:
        "results/profiles/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}/top_ops.json",
    params:
        cell=cell_args,
        files=cell_files,
        code=profile_code,
        calls=config["profile"]["calls"],
        top=config["profile"]["top"],
    threads: cell_threads
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
        bench_slot=1,
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/profile_cell/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.log",
    shell:
        "python -m inferbench profile-cell {params.cell:q} {params.files:q} --calls {params.calls:q} --top {params.top:q}"
        " --out {output:q} > {log:q} 2>&1"


# The machine's roof for the roofline studies: GEMM FLOP/s per precision and copy bandwidth, measured
# under the machine-wide lock like a cell.
rule machine_peaks:
    output:
        "results/machine/peaks-{device}.json",
    params:
        code=verb_code("machine-peaks"),
    threads: 4
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
        bench_slot=1,
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/machine_peaks/{device}.log",
    shell:
        "python -m inferbench machine-peaks --device {wildcards.device:q} --out {output:q} > {log:q} 2>&1"
