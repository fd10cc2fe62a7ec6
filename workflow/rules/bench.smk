# One job per cell. The package takes a machine-wide lock while measuring, so no measurement overlaps
# other work of the workflow whatever --resources are given; bench_slot only helps the scheduler.


rule benchmark_cell:
    input:
        unpack(cell_inputs),
    output:
        record="results/cells/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.json",
        samples="results/cells/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.samples.npy",
    params:
        variant=lambda wc: json.dumps(variant(wc), sort_keys=True),
        measure=json.dumps(config["measure"], sort_keys=True),
        # edits of the engine's module re-run its cells (Snakemake does not track imported code)
        code=lambda wc: code_version(variant(wc)["engine"]),
        artifact=lambda wc, input: f"--artifact {input.artifact}" if "artifact" in input.keys() else "",
        reference=lambda wc, input: f"--reference {input.reference}" if "reference" in input.keys() else "",
        tolerance=lambda wc: json.dumps(config["parity"]["tolerances"][wc.precision], sort_keys=True),
    threads: lambda wc: max(1, int(wc.threads))
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
        bench_slot=1,
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/benchmark_cell/{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}.log",
    shell:
        "python -m inferbench run-cell --workload {wildcards.workload} --engine {wildcards.engine}"
        " --engine-options {params.variant:q} --precision {wildcards.precision} --device {wildcards.device}"
        " --batch {wildcards.batch} --seq {wildcards.seq} --threads {wildcards.threads}"
        " --model-meta {input.meta} {params.artifact} {params.reference} --tolerance {params.tolerance:q}"
        " --measure {params.measure:q} --out {output.record}"
        " > {log} 2>&1"
