# Models: MLPs trained on their dataset, the others built with random weights; ONNX exports.


rule train_mlp:
    input:
        lambda wc: f"data/processed/{workload_info(wc.workload).dataset}.parquet",
    output:
        checkpoint="results/models/{workload}.pt",
        meta="results/models/{workload}.json",
        heldout="results/models/{workload}.heldout.npz",  # every cell scores it again: the AUC as it ran
    params:
        code=verb_code("train-mlp"),
        options=lambda wc: model_options(wc.workload),
    wildcard_constraints:
        workload=workload_regex(trained=True),
    threads: 4
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/train_mlp/{workload}.log",
    shell:
        "python -m inferbench train-mlp --workload {wildcards.workload:q} --data {input:q}"
        " --options {params.options:q} --out {output.checkpoint:q} --meta {output.meta:q}"
        " --heldout {output.heldout:q} > {log:q} 2>&1"


rule build_model:
    output:
        checkpoint="results/models/{workload}.pt",
        meta="results/models/{workload}.json",
    params:
        code=verb_code("build-model"),
        arch=lambda wc: json.dumps(config["models"].get(wc.workload, {}).get("arch", {}), sort_keys=True),
    wildcard_constraints:
        workload=workload_regex(trained=False),
    threads: 1
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/build_model/{workload}.log",
    shell:
        "python -m inferbench build-model --workload {wildcards.workload:q} --arch {params.arch:q}"
        " --out {output.checkpoint:q} --meta {output.meta:q} > {log:q} 2>&1"


rule export_onnx:
    input:
        "results/models/{workload}.pt",
    output:
        onnx="results/onnx/{workload}.onnx",
        report="results/onnx/{workload}.export.json",
    params:
        code=verb_code("export-onnx"),
        options=json.dumps(config["export"], sort_keys=True),
    threads: 2
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/export_onnx/{workload}.log",
    shell:
        "python -m inferbench export-onnx --checkpoint {input:q} --options {params.options:q}"
        " --out {output.onnx:q} --report {output.report:q} > {log:q} 2>&1"


rule fuse_onnx:
    input:
        "results/models/{workload}.pt",
    output:
        onnx="results/onnx/{workload}.fused.onnx",
        report="results/onnx/{workload}.fused.json",
    params:
        code=verb_code("fuse-onnx"),
    threads: 2
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/fuse_onnx/{workload}.log",
    shell:
        "python -m inferbench fuse-onnx --checkpoint {input:q} --out {output.onnx:q} --report {output.report:q}"
        " > {log:q} 2>&1"


rule onnx_variant:
    input:
        "results/onnx/{workload}{export}.onnx",
    output:
        onnx="results/onnx/{workload}{export}.{variant}.onnx",
        report="results/onnx/{workload}{export}.{variant}.json",
    wildcard_constraints:
        export=r"|\.fused",
        variant="int8|fp16",
    params:
        code=verb_code("convert-onnx"),
    threads: 2
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/onnx_variant/{workload}{export}.{variant}.log",
    shell:
        "python -m inferbench convert-onnx --to {wildcards.variant:q} --source {input:q}"
        " --out {output.onnx:q} --report {output.report:q} > {log:q} 2>&1"


rule reference_output:
    input:
        checkpoint="results/models/{workload}.pt",
        meta="results/models/{workload}.json",
        heldout=lambda wc: heldout_rows(wc.workload),
    output:
        "results/reference/{workload}-s{seq}.npz",
    params:
        code=verb_code("reference"),
        rows=config["parity"]["rows"],
        heldout=lambda wc, input: ["--heldout", input.heldout] if input.heldout else [],
    threads: 2
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/reference_output/{workload}-s{seq}.log",
    shell:
        "python -m inferbench reference --checkpoint {input.checkpoint:q} --model-meta {input.meta:q}"
        " --seq {wildcards.seq:q} --rows {params.rows:q} --out {output:q} {params.heldout:q} > {log:q} 2>&1"


rule model_cost:
    input:
        "results/models/{workload}.pt",
    output:
        "results/cost/{workload}-s{seq}.json",
    params:
        code=verb_code("model-cost"),
    threads: 2
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/model_cost/{workload}-s{seq}.log",
    shell:
        "python -m inferbench model-cost --checkpoint {input:q} --seq {wildcards.seq:q} --out {output:q} > {log:q} 2>&1"
