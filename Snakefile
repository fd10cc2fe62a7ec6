# inferbench: every benchmark cell is one job writing one record; summary, plots and report follow.
# Run: snakemake --cores 8 --resources gpu=1     (see README.md)
from snakemake.utils import min_version

min_version("9.20")  # as pyproject.toml's snakemake range (tests/test_packaging.py)


report: "workflow/report/workflow.rst"


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/tensorrt.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/report.smk"


# Locally, cell jobs start from a server that imported torch & co. once (inferbench.launch.warm): seconds
# saved per job, most of a GPU run's wall time; `warm_start: false` turns it off.
onstart:
    if workflow.local_exec:
        # several GPUs, each measuring on cores of its own: the host's partition planned once, here,
        # and inherited by every job
        from inferbench.machine.host_partition import current_partition

        current_partition()
    if config["warm_start"] and workflow.local_exec:
        from inferbench.launch.warm import start_server

        start_server("logs/warm_start.log", PACKAGE_SRC)


onsuccess:
    from inferbench.launch.warm import stop_server

    stop_server()


onerror:
    from inferbench.launch.warm import stop_server

    stop_server()


rule all:
    input:
        final_outputs(),
    default_target: True
