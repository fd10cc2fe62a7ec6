# inferbench: every benchmark cell is one job writing one record; summary, plots and report follow.
# Run: snakemake --cores 8 --resources gpu=1     (see README.md)
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/tensorrt.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        final_outputs(),
    default_target: True
