# Raw datasets (generated in the real formats, or downloaded) and their cleaning/encoding.


rule synthetic_lendingclub:
    output:
        raw_file("lendingclub", "synthetic"),
    params:
        rows=config["datasets"]["lendingclub"]["rows"],
        seed=config["datasets"]["lendingclub"]["seed"],
    threads: 1
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/synthetic_lendingclub.log",
    shell:
        "python -m inferbench generate-data --dataset lendingclub --rows {params.rows:q} --seed {params.seed:q}"
        " --out-dir \"$(dirname {output:q})\" > {log:q} 2>&1"


rule synthetic_heart:
    output:
        raw_file("heart", "synthetic"),
    params:
        seed=config["datasets"]["heart"]["seed"],
    threads: 1
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/synthetic_heart.log",
    shell:
        "python -m inferbench generate-data --dataset heart --seed {params.seed:q}"
        " --out-dir \"$(dirname {output:q})\" > {log:q} 2>&1"


# Downloads read credentials in the package (no `envvars:`, which would stop credential-free runs).
# A file already at the output path (placed by hand) is used as it is, without downloading.
rule download_lendingclub:
    output:
        ensure(raw_file("lendingclub", "kaggle"), non_empty=True),
    params:
        dataset=config["datasets"]["lendingclub"]["kaggle_dataset"],
    localrule: True
    retries: 2
    threads: 1
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/download_lendingclub.log",
    shell:
        "python -m inferbench download --dataset lendingclub --kaggle-dataset {params.dataset:q}"
        " --out {output:q} > {log:q} 2>&1"


rule download_heart:
    output:
        ensure(raw_file("heart", "uci"), non_empty=True),
    params:
        urls=[arg for url in config["datasets"]["heart"]["urls"] for arg in ("--url", url)],
    localrule: True
    retries: 2
    threads: 1
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/download_heart.log",
    shell:
        "python -m inferbench download --dataset heart {params.urls:q} --out {output:q} > {log:q} 2>&1"


rule prepare_data:
    input:
        lambda wc: raw_file(wc.dataset),
    output:
        table="data/processed/{dataset}.parquet",
        encoders="data/processed/{dataset}.encoders.json",
        stats="data/processed/{dataset}.stats.json",
    params:
        source=lambda wc: config["datasets"][wc.dataset]["source"],
        sample=lambda wc: (
            ["--sample-rows", n, "--seed", config["datasets"][wc.dataset]["seed"]]
            if (n := config["datasets"][wc.dataset].get("sample_rows"))
            else []
        ),
    threads: 1
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/prepare_data/{dataset}.log",
    shell:
        "python -m inferbench prepare-data --dataset {wildcards.dataset:q} --source {params.source:q} {params.sample:q}"
        " --raw {input:q} --out {output.table:q} --encoders {output.encoders:q} --stats {output.stats:q} > {log:q} 2>&1"
