# Native TensorRT engines: one plan per engine variant x workload x precision x shape, cached under a
# folder named after the GPU model and TensorRT version (TRT_TARGET, found where snakemake runs).
# Where TensorRT is missing, tensorrt cells take no plan and record `unavailable` (see cell_inputs).


rule build_tensorrt_engine:
    input:
        onnx="results/onnx/{workload}.onnx",
        meta="results/models/{workload}.json",
        data=lambda wc: tensorrt_calibration_data(wc),
    output:
        plan="results/engines/tensorrt/{target}/{engine}/{workload}.{precision}.b{batch}-s{seq}.plan",
        report="results/engines/tensorrt/{target}/{engine}/{workload}.{precision}.b{batch}-s{seq}.json",
    params:
        variant=lambda wc: json.dumps(variant(wc), sort_keys=True),
        data=lambda wc, input: ["--data", input.data] if input.data else [],
        code=verb_code("build-trt-engine"),
    wildcard_constraints:
        target="[a-z0-9.-]+",
        precision="|".join(TENSORRT_PRECISIONS),
    resources:
        gpu=1,
    threads: 4
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/build_tensorrt_engine/{target}/{engine}/{workload}.{precision}.b{batch}-s{seq}.log",
    shell:
        "python -m inferbench build-trt-engine --onnx {input.onnx:q} --model-meta {input.meta:q}"
        " --precision {wildcards.precision:q} --batch {wildcards.batch:q} --seq {wildcards.seq:q}"
        " --options {params.variant:q} {params.data:q} --out {output.plan:q} > {log:q} 2>&1"
