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
    from inferbench.machine.run_lock import live_run

    # `snakemake --unlock` removes a live run's Snakemake lock as readily as a killed one's: the run lock
    # still says whether another run works here, and two runs must not make the same files
    if (other := live_run(Path.cwd())) is not None:
        raise WorkflowError(
            f"another run of this workflow (pid {other}) is working in {Path.cwd()}: wait for it to end, or stop "
            f"it (kill {other}) and run the same command again. `snakemake --unlock` does not make two runs safe."
        )
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
