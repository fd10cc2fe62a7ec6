"""Which cores ``measure.cpu_affinity: auto`` pins to (inferbench.machine.cores), on fabricated
topologies: no multi-core host is needed."""

from __future__ import annotations

import itertools

import pytest
import yaml

from inferbench.machine.cores import choose_cores, read_topology
from inferbench.plan.config import ConfigError, validate_config
from tests.conftest import REPO

# 4 cores with 2 hyperthreads each, numbered as Intel does: core k is CPUs k and k + 4
INTEL = {cpu: frozenset({cpu % 4, cpu % 4 + 4}) for cpu in range(8)}
# the same, numbered as AMD does: core k is CPUs 2k and 2k + 1
AMD = {cpu: frozenset({cpu - cpu % 2, cpu - cpu % 2 + 1}) for cpu in range(8)}


def test_one_logical_cpu_per_physical_core_the_highest_numbered_cores_first():
    assert choose_cores(range(8), INTEL, 2).cpus == (2, 3)  # never 3 and its sibling 7
    assert choose_cores(range(8), AMD, 2).cpus == (4, 6)
    assert choose_cores(range(8), INTEL, 4).cpus == (0, 1, 2, 3)
    assert choose_cores(range(8), INTEL, 2).note.startswith("auto: 2 physical cores")
    # only the CPUs the process may use: 5 is the sibling of 1, not a core of its own
    assert choose_cores({0, 1, 2, 5}, INTEL, 3).cpus == (0, 1, 2)
    assert choose_cores({0, 1, 2, 5}, INTEL, 2).cpus == (1, 2)


def test_the_choice_is_the_same_whatever_the_order_and_a_smaller_one_is_part_of_a_larger_one():
    for topology in (INTEL, AMD, {}):
        assert choose_cores([7, 0, 3, 5, 1], topology, 2) == choose_cores([0, 1, 3, 5, 7], topology, 2)
        chosen = [set(choose_cores(range(8), topology, n).cpus) for n in range(1, 9)]
        assert all(small <= large for small, large in itertools.pairwise(chosen))
        assert all(0 not in c for c in chosen[:3]), "cpu0's core, which takes interrupts, comes last"


def test_fewer_physical_cores_than_threads_takes_distinct_logical_cpus_then_none():
    fallback = choose_cores(range(8), INTEL, 5)
    assert fallback.cpus == (0, 1, 2, 3, 7)  # every core's first CPU, then the highest sibling
    assert fallback.note.startswith("auto: 5 logical CPUs") and "4 physical cores" in fallback.note
    assert len(set(choose_cores(range(8), INTEL, 8).cpus)) == 8
    none = choose_cores(range(8), INTEL, 9)
    assert none.cpus == () and none.note == "unpinned: 9 threads but 8 CPUs this process may use"
    with pytest.raises(ValueError):
        choose_cores(range(8), INTEL, 0)


def test_without_topology_each_logical_cpu_is_a_core_of_its_own():
    assert choose_cores(range(4), {}, 2).cpus == (2, 3)
    assert choose_cores({1, 6, 9}, {}, 3).note.startswith("auto: 3 physical cores")


def test_the_topology_is_read_from_sysfs_siblings_or_package_and_core_ids(tmp_path):
    def write(cpu: int, **files: str) -> None:
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text + "\n")

    write(0, thread_siblings_list="0,2")
    write(2, thread_siblings_list="0,2")
    write(1, thread_siblings_list="1")
    write(3, physical_package_id="0", core_id="5")  # no siblings list: the package and core ids
    write(4, physical_package_id="0", core_id="5")
    write(5, physical_package_id="1", core_id="5")  # the same core id in another package: another core
    # cpu6: no topology at all
    topology = read_topology(range(7), tmp_path)
    assert topology[0] == topology[2] == {0, 2} and topology[1] == {1}
    assert topology[3] == topology[4] == {3, 4} and topology[5] == {5} and topology[6] == {6}
    assert choose_cores(range(7), topology, 5).cpus == (0, 1, 3, 5, 6)


@pytest.mark.parametrize("value", ["auto", None, [2, 3]])
def test_the_config_takes_auto_null_or_a_list_and_nothing_else(value):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert config["measure"]["cpu_affinity"] == "auto"  # the default
    config["measure"]["cpu_affinity"] = value
    validate_config(config)
    config["measure"]["cpu_affinity"] = "always"
    with pytest.raises(ConfigError, match=r"measure\.cpu_affinity: 'always' is not allowed; auto, null or a list"):
        validate_config(config)
