"""Common options (--db, --kb, --json, -v) work on either side of the command name."""

import json

from mk.cli import main, normalise


def test_normalise_moves_common_options():
    commands = {"runs", "show", "optimize"}
    assert normalise(["--db", "x.duckdb", "runs", "--json"], commands) == ["runs", "--db", "x.duckdb", "--json"]
    assert normalise(["show", "RUN", "-v"], commands) == ["-v", "show", "RUN"]
    assert normalise(["--json", "--db=x", "show", "r"], commands) == ["show", "--json", "--db=x", "r"]
    assert normalise(["--version"], commands) == ["--version"]


def test_db_and_json_before_the_command(tmp_path, capsys):
    from mk.store import Store

    db = str(tmp_path / "db.duckdb")
    Store.open(db).close()
    assert main(["runs", "--db", db, "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert main(["--db", db, "--json", "runs"]) == 0
    assert json.loads(capsys.readouterr().out) == after == []
    assert main(["runs", "-v", "--db", db]) == 0


def test_a_mistyped_db_on_a_read_command_says_so_and_creates_nothing(tmp_path, capsys):
    missing = tmp_path / "typo.duckdb"
    assert main(["runs", "--db", str(missing)]) == 2
    assert main(["show", "abc", "--db", str(missing), "--json"]) == 2
    assert "no mk store at" in capsys.readouterr().out and not missing.exists()
