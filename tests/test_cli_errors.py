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
