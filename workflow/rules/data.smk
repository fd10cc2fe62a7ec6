# Raw datasets (synthetic, in the real formats) and their cleaning/encoding.


rule synthetic_lendingclub:
    output:
        RAW_FILES["lendingclub"],
    params:
        rows=config["datasets"]["lendingclub"]["rows"],
        seed=config["datasets"]["lendingclub"]["seed"],
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/synthetic_lendingclub.log",
    shell:
        "python -m inferbench generate-data --dataset lendingclub --rows {params.rows} --seed {params.seed}"
        " --out-dir $(dirname {output}) > {log} 2>&1"


rule synthetic_heart:
    output:
        RAW_FILES["heart"],
    params:
        seed=config["datasets"]["heart"]["seed"],
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/synthetic_heart.log",
    shell:
        "python -m inferbench generate-data --dataset heart --seed {params.seed}"
        " --out-dir $(dirname {output}) > {log} 2>&1"


rule prepare_data:
    input:
        lambda wc: RAW_FILES[wc.dataset],
    output:
        table="data/processed/{dataset}.parquet",
        encoders="data/processed/{dataset}.encoders.json",
        stats="data/processed/{dataset}.stats.json",
    params:
        source=lambda wc: config["datasets"][wc.dataset]["source"],
    conda:
        "../../envs/torch.yaml"
    log:
        "logs/prepare_data/{dataset}.log",
    shell:
        "python -m inferbench prepare-data --dataset {wildcards.dataset} --source {params.source}"
        " --raw {input} --out {output.table} --encoders {output.encoders} --stats {output.stats} > {log} 2>&1"
