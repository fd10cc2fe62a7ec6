# Raw datasets (generated in the real formats, or downloaded) and their cleaning/encoding.


rule synthetic_data:
    output:
        "data/raw/{dataset}/synthetic/{raw_name}",
    params:
        options=lambda wc: dataset_options(wc.dataset, DATASETS[wc.dataset].generate_options),
        code=verb_code("generate-data"),
    wildcard_constraints:
        raw_name="|".join(re.escape(info.raw_name) for info in DATASETS.values()),
    threads: 1
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/synthetic_data/{dataset}/{raw_name}.log",
    shell:
        "python -m inferbench generate-data --dataset {wildcards.dataset:q} --options {params.options:q}"
        " --out-dir \"$(dirname {output:q})\" > {log:q} 2>&1"


# Downloads read credentials in the package (no `envvars:`, which would stop credential-free runs).
# A file already at the output path (placed by hand) is used as it is, without downloading.
rule download_lendingclub:
    output:
        ensure(raw_file("lendingclub", "kaggle"), non_empty=True),
    params:
        dataset=config["datasets"]["lendingclub"]["kaggle_dataset"],
        code=verb_code("download"),
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
        code=verb_code("download"),
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
        options=lambda wc: dataset_options(wc.dataset, ("source", *DATASETS[wc.dataset].clean_options)),
        code=verb_code("prepare-data"),
    threads: 1
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/prepare_data/{dataset}.log",
    shell:
        "python -m inferbench prepare-data --dataset {wildcards.dataset:q} --options {params.options:q}"
        " --raw {input:q} --out {output.table:q} --encoders {output.encoders:q} --stats {output.stats:q} > {log:q} 2>&1"
