"""A command line the parser cannot read is refused with the verb it was for and where its options are."""

from __future__ import annotations

import pytest

from inferbench.cli.main import main

pytestmark = pytest.mark.fast


def test_an_unknown_option_names_the_verb_and_its_help(capsys):
    assert main(["export", "mlflow", "--since", "yesterday"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferbench export: error: unrecognized arguments: --since yesterday")
    assert "python -m inferbench export mlflow --help" in err
    assert "{generate-data," not in err, "not the top-level usage"


def test_a_declared_plot_is_named_by_a_file_a_scenario_declares_and_drawn_from_what_it_is_drawn_from(tmp_path, capsys):
    from inferbench.catalog.scenarios import summary_plot_drawer

    assert summary_plot_drawer("generation.png") and summary_plot_drawer("serving.png") is None
    args = ["plot", "--workload", "llama_mini", "--out-dir", str(tmp_path), str(tmp_path / "none.json")]
    assert main([*args, "--kind", "summary", "--name", "latency.png"]) != 0
    err = capsys.readouterr().err
    assert "needs --name, the file name of a plot a scenario declares: generation.png, serving.png" in err
    assert main([*args, "--kind", "summary", "--name", "serving.png"]) != 0
    assert "serving.png is drawn from its cells' records: plot --kind declared" in capsys.readouterr().err
