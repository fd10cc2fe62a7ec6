"""Issue 71: one bad module among the exporters or engine families (a syntax error, non-UTF-8 bytes, no export(),
an import that raises) broke every `snakemake` invocation or every export with an error naming neither file nor
exporter."""

from __future__ import annotations

import sys

import pytest

import inferbench.catalog.exporters as exporters
from inferbench.cli.main import main

pytestmark = pytest.mark.fast

GOOD = (
    '"""Writes nowhere."""\n\n\ndef export(summary, cells_dir, plots_dir, out_dir):\n    return {"message": "done"}\n'
)


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "fake_exporters"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "good.py").write_text(GOOD)
    (root / "broken_syntax.py").write_text("def export(:\n")
    (root / "latin1.py").write_bytes(b'"""caf\xe9"""\ndef export(): pass\n')
    (root / "no_export.py").write_text('"""Exports nothing."""\n')
    (root / "raises.py").write_text('"""Raises on import."""\nraise RuntimeError("boom")\n\ndef export(): pass\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(exporters, "PACKAGE", "fake_exporters")
    yield root
    for name in [m for m in sys.modules if m.startswith("fake_exporters")]:
        del sys.modules[name]


def test_a_module_that_cannot_be_read_or_has_no_export_is_skipped_by_name_and_the_others_stay(package):
    found, skipped = exporters._discover()
    assert sorted(found) == ["good", "raises"]
    assert set(skipped) == {"broken_syntax", "latin1", "no_export"}
    assert str(package / "broken_syntax.py") in skipped["broken_syntax"] and "SyntaxError" in skipped["broken_syntax"]
    assert "UnicodeDecodeError" in skipped["latin1"] and "has no export(" in skipped["no_export"]


def test_an_exporter_whose_import_raises_is_named_when_asked_and_the_others_export(
    package, monkeypatch, tmp_path, capsys
):
    found, skipped = exporters._discover()
    monkeypatch.setattr(exporters, "EXPORTERS", found)
    monkeypatch.setattr(exporters, "SKIPPED", skipped)
    assert main(["export", "good", "--out-dir", str(tmp_path / "out")]) == 0
    assert "done" in capsys.readouterr().out
    assert main(["export", "raises", "--out-dir", str(tmp_path / "out")]) != 0
    error = capsys.readouterr().err
    assert "exporter 'raises' cannot be imported" in error and "raises.py: RuntimeError: boom" in error
    with pytest.raises(KeyError, match=r"exporter 'no_export' is skipped: .*no_export.py has no export"):
        exporters.exporter_info("no_export")


def test_a_broken_engine_family_is_skipped_by_name_and_a_re_declared_engine_names_both(tmp_path, monkeypatch):
    import inferbench.engines
    from inferbench.engines import registry as engine_registry

    extra = tmp_path / "families"
    (extra / "zz_broken").mkdir(parents=True)
    (extra / "zz_broken" / "__init__.py").write_text("import a_library_that_is_not_there\n")
    monkeypatch.setattr(inferbench.engines, "__path__", [*inferbench.engines.__path__, str(extra)])
    found, skipped = engine_registry._discover()
    assert "ort_cpu" in found and "torch_eager" in found, "the other families stay"
    assert "zz_broken/__init__.py raised ModuleNotFoundError on import" in skipped["zz_broken"]
    (extra / "zz_dupe").mkdir()
    (extra / "zz_dupe" / "__init__.py").write_text("from inferbench.engines.ort import ENGINES\n")
    with pytest.raises(ValueError, match=r"engine 'ort_cpu' is declared by the families ort and zz_dupe"):
        engine_registry._discover()
    for name in [m for m in sys.modules if m.startswith("inferbench.engines.zz_")]:
        del sys.modules[name]
