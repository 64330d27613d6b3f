"""`podium train plot` on folders that hold no curve yet: a clear error, no picture."""

from typer.testing import CliRunner

from podium.cli.main import app


def test_plot_names_what_is_missing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["train", "plot", str(empty)])
    assert result.exit_code == 2 and "has no metrics.jsonl" in result.output
    (empty / "metrics.jsonl").write_text("")
    result = CliRunner().invoke(app, ["train", "plot", str(empty), "--out",
                                      str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "no logged training step yet" in result.output
    assert not (tmp_path / "x.png").exists()
