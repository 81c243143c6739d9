"""A delete list whose line is `<TAB>v4<TAB>`, in every list format `engine delete --ids` reads: v4 is deleted
(the line is its stripped whole), never kept in silence."""
from __future__ import annotations

import pytest

LISTS = {"ids.txt": "\tv4\t\n", "ids.tsv": "v1\n\tv4\t\r\n", "nonl.txt": "\tv4\t", "bom.txt": "\ufeff\tv4\t\n",
         "ids.csv": "id\n\tv4\t\n", "ids.jsonl": '{"id": "\\tv4\\t"}\n'}


@pytest.mark.parametrize("name", sorted(LISTS))
def test_a_delete_line_with_surrounding_tabs_deletes_its_id(run_cli, tmp_path, fake_encoder, name):
    from engine.core.collection import Collection
    (tmp_path / "d.csv").write_text("id,text\n" + "".join(f"v{i},text {i}\n" for i in range(1, 7)))
    code, _, err = run_cli("build", "c", "--texts", tmp_path / "d.csv", "--root", tmp_path / "idx", "-q")
    assert code == 0, err
    (tmp_path / name).write_text(LISTS[name], encoding="utf-8")
    code, _, err = run_cli("delete", "c", "--ids", tmp_path / name, "--root", tmp_path / "idx")
    assert code == 0, err
    gone = {"v4"} | ({"v1"} if name == "ids.tsv" else set())
    col = Collection.open("c", tmp_path / "idx")
    live = [col.ids[r] for r in col.live_rows()]
    assert live == [f"v{i}" for i in range(1, 7) if f"v{i}" not in gone]


def test_a_headerless_one_line_csv_list_is_one_line_not_silence(run_cli, tmp_path, fake_encoder):
    (tmp_path / "d.csv").write_text("id,text\nv1,a\nv4,b\n")
    assert run_cli("build", "c", "--texts", tmp_path / "d.csv", "--root", tmp_path / "idx", "-q")[0] == 0
    (tmp_path / "ids.csv").write_text("\tv4\t\n")
    code, _, err = run_cli("delete", "c", "--ids", tmp_path / "ids.csv", "--root", tmp_path / "idx")
    assert code != 0 and "ids.csv" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
