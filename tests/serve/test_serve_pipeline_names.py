"""`engine serve --pipeline NAME=FILE`: a name given twice, blanks aside, is one line before the server starts
(it silently kept the last file)."""
from __future__ import annotations


def test_a_pipeline_name_given_twice_is_refused(run_cli, tmp_path, monkeypatch):
    import engine.serve.server as server
    started = []
    monkeypatch.setattr(server, "serve", lambda options: started.append(options))
    f, g = tmp_path / "f.toml", tmp_path / "g.toml"
    f.write_text("pipeline = 'retrieve(\"docs\") % 3'\n")
    g.write_text("pipeline = 'retrieve(\"docs\") % 5'\n")
    for second in (" a", "a ", "\ta"):
        code, _, err = run_cli("serve", "--pipeline", f"a={f}", "--pipeline", f"{second}={g}")
        assert code != 0 and "'a' is given twice" in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1 and not started
    code, _, err = run_cli("serve", "--pipeline", f"a={f}", "--pipeline", f" b ={g}")
    assert code == 0, err
    assert [name for name, _ in started[0].pipelines] == ["a", "b"]
