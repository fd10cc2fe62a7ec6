# One job per cell. The package takes a machine-wide lock while measuring, so no measurement overlaps
# other work of the workflow whatever --resources are given; bench_slot only helps the scheduler.


rule benchmark_cell:
    input:
        unpack(cell_inputs),
    output:
        record="results/cells/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.json",
        samples="results/cells/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.samples.npy",
        e2e_samples="results/cells/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.e2e_samples.npy",
    params:
        cell=cell_args,
        files=cell_files,
        # edits of any module the cell's job runs re-run the cell (Snakemake does not track imported code)
        code=cell_code,
        reference=lambda wc, input: ["--reference", input.reference] if "reference" in input.keys() else [],
        tolerance=lambda wc: json.dumps(parity_tolerance(wc), sort_keys=True),
    threads: cell_threads
    priority: cell_priority
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
        bench_slot=1,
    # CPU cells can be bundled into fewer cluster jobs: --group-components cpu_cells=N (see README)
    group:
        cell_group
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/benchmark_cell/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.log",
    shell:
        "python -m inferbench run-cell {params.cell:q} {params.files:q} {params.reference:q} --tolerance {params.tolerance:q}"
        " --code {params.code:q} --out {output.record:q} > {log:q} 2>&1"


# Server and offline cells (a study's `scenarios`): the same job, its arguments naming the scenario and
# LoadGen's settings (cell_args); MLPerf LoadGen drives the engine through a dynamic batcher whose
# largest batch is the cell's batch, and LoadGen's logs are kept beside the record.
use rule benchmark_cell as serving_cell with:
    output:
        record="results/cells/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}-{scenario}.json",
        loadgen=directory("results/cells/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}-{scenario}.loadgen"),
    log:
        "logs/serving_cell/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}-{scenario}.log",


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
