"""`engine search` parsed from its cached shape gives the search exactly what typer's parse gives it, and
anything but a plain line is left to typer."""
from __future__ import annotations

import pytest

import engine.cli as cli
from engine.cached_args import cached_call, shape_file

PLAIN = [
    ["search", "docs", "a dog on a beach"],
    ["search", "docs", "a dog", "-k", "5", "--json", "--root", "somewhere", "-q"],
    ["search", "--root=elsewhere", "docs", "--top-k=3", "a dog", "--quiet"],
    ["search", "docs", "--image", "photo.jpg", "--device", "cpu", "--batch-size", "auto", "--nprobe", "4", "--ef",
     "16", "--k-factor", "2.5"],
    ["search", "docs", "--queries", "q.tsv", "--out", "run.txt", "--run-id", "mine", "--batch-size", "8"],
    ["search", "docs", "a cat", "--server", "http://127.0.0.1:8080", "--api-key", "key", "--rerank", "cross:m",
     "--rerank-depth", "50"],
    ["search", "docs", "a cat", "--mode", "hybrid", "--fusion", "rrf", "--where", "year >= 2020 and split == 'a'"],
    ["search", "docs", "Émigré café — 東京", "--run-id=", "-k", " 7"],
    ["search", "docs", "-", "-k", "+2"],
]
NOT_PLAIN = [
    ["search", "--help"], ["search", "docs", "x", "-k", "-5"], ["search", "docs", "x", "--ray"],
    ["search", "docs", "x", "--ray", "auto"], ["search", "docs", "a", "b"], ["search", "docs", "x", "-k", "1", "-k", "2"],
    ["search", "docs", "x", "--frobnicate"], ["search", "docs", "x", "-k", "abc"], ["search", "docs", "x", "-qk", "3"],
    ["search", "docs", "x", "--json=yes"], ["search", "docs", "--", "-x"], ["search"], ["search", "docs", "x", "-k"],
    ["build", "docs", "--texts", "t.csv"], [],
]


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """The search function replaced by a recorder; the shape cached by one typer-parsed line."""
    import engine.core.search_command as command
    calls: list[dict] = []
    monkeypatch.setattr(command, "search", lambda **kw: calls.append(kw))
    monkeypatch.setenv("ENGINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ENGINE_API_KEY", raising=False)
    assert not shape_file("search").exists()
    _typer(monkeypatch, ["search", "docs", "warm-up"])
    assert shape_file("search").exists() and calls
    calls.clear()
    return calls


def _typer(monkeypatch, argv: list[str]) -> None:
    monkeypatch.setattr("sys.argv", ["engine", *argv])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 0


@pytest.mark.parametrize("argv", PLAIN)
def test_a_plain_line_parses_as_typer_parses_it(recorded, monkeypatch, argv):
    call = cached_call(argv)
    assert call is not None
    call()
    _typer(monkeypatch, argv)
    assert len(recorded) == 2 and recorded[0] == recorded[1]
    assert all(type(recorded[0][k]) is type(recorded[1][k]) for k in recorded[0])


def test_the_api_key_comes_from_the_environment_as_in_typer(recorded, monkeypatch):
    monkeypatch.setenv("ENGINE_API_KEY", "from-env")
    cached_call(["search", "docs", "x"])()
    _typer(monkeypatch, ["search", "docs", "x"])
    assert recorded[0]["api_key"] == recorded[1]["api_key"] == "from-env"
    monkeypatch.setenv("ENGINE_API_KEY", "")
    cached_call(["search", "docs", "x"])()
    assert recorded[2]["api_key"] is None


@pytest.mark.parametrize("argv", NOT_PLAIN)
def test_anything_else_is_left_to_typer(recorded, argv):
    assert cached_call(argv) is None


def test_no_cached_shape_means_typer(monkeypatch, tmp_path):
    monkeypatch.setenv("ENGINE_CACHE", str(tmp_path / "empty"))
    assert cached_call(["search", "docs", "x"]) is None


def test_a_cached_line_refuses_bad_values_as_typer_does(recorded, monkeypatch, capsys):
    from engine.__main__ import main
    monkeypatch.setattr("sys.argv", ["engine", "search", "docs", "x", "-k", "0"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2 and not recorded
    assert capsys.readouterr().err.strip() == "error: --top-k must be a whole number of at least 1, not 0"
