"""One answer through every door: `engine search`, a pipeline file (`engine pipeline run`), `POST /search` on
the collection and `POST /search {"pipeline"}` build the same stage tree and give the same ids in the same
order — hybrid with a filter and a reranker together, for each reranker kind that runs offline; id and image
queries through the doors that take them. And a `--rerank` spec is parsed once per command."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.core.collection import Collection

DOCS = [("d0", "sourdough bread with a crisp crust", "cooking"), ("d1", "neural networks classify images", "ml"),
        ("d2", "the fall of the roman republic", "history"), ("d3", "walking routes in the highlands", "travel"),
        ("d4", "grilled vegetables and barbecue sauce", "cooking"), ("d5", "gradient descent for deep nets", "ml"),
        ("d6", "castles of medieval europe", "history"), ("d7", "baking bread at home, crust and crumb", "cooking"),
        ("d8", "deep learning for bread recipes", "ml"), ("d9", "roman roads and bread ovens", "history")]
WHERE = 'topic != "travel" and topic != "history"'
QUERY = "bread crust baking"


@pytest.fixture()
def root(tmp_path, joint_encoder):
    src = tmp_path / "docs.csv"
    src.write_text("id,text,topic\n" + "".join(f'{i},"{t}",{g}\n' for i, t, g in DOCS))
    Collection.build("docs", texts=src, root=tmp_path / "idx", model="minilm", bm25=True)
    return tmp_path / "idx"


def four_doors(run_cli, root, tmp, spec: str, k: int = 3, depth: int = 6) -> list[list[str]]:
    from fastapi.testclient import TestClient

    from engine.commands.serve import served_pipelines
    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    code, out, err = run_cli("search", "docs", QUERY, "--root", root, "--json", "-k", k, "--mode", "hybrid",
                             "--where", WHERE, "--rerank", spec, "--rerank-depth", depth, "-q")
    assert code == 0, err
    cli = [h["id"] for h in json.loads(out)["hits"]]
    where = WHERE.replace('"', '\\"')
    full = tmp / "full.toml"
    full.write_text(f"pipeline = '''retrieve(\"docs\", mode=\"hybrid\", k={depth}, where=\"{where}\") >> "
                    f"rerank(\"{spec}\", depth={depth}) % {k}'''\n")
    bare = tmp / "bare.toml"
    bare.write_text(f"pipeline = '''retrieve(\"docs\", k={depth}) >> rerank(\"{spec}\", depth={depth}) % {k}'''\n")
    (tmp / "q.tsv").write_text(f"q1\t{QUERY}\n")
    code, _, err = run_cli("pipeline", "run", full, "--queries", tmp / "q.tsv", "--root", root,
                           "--out", tmp / "p.run", "--no-cache")
    assert code == 0, err
    piped = [line.split()[2] for line in (tmp / "p.run").read_text().splitlines()]
    opts = ServeOptions(root=root, rerank=(spec,), pipelines=served_pipelines([f"full={full}", f"bare={bare}"]))
    with TestClient(create_app(opts), raise_server_exceptions=False) as c:
        r = c.post("/search", json={"collection": "docs", "text": QUERY, "k": k, "mode": "hybrid", "where": WHERE,
                                    "rerank": True, "rerank_depth": depth})
        assert r.status_code == 200, r.text
        served = [h["id"] for h in r.json()["hits"]]
        answers = []
        for body in ({"pipeline": "full"}, {"pipeline": "bare", "mode": "hybrid", "where": WHERE}):
            r = c.post("/search", json={**body, "text": QUERY, "k": k})
            assert r.status_code == 200, r.text
            answers.append([h["id"] for h in r.json()["hits"]])
    return [cli, piped, served, *answers]


def test_hybrid_filter_and_cross_encoder_through_four_doors(run_cli, root, tmp_path, tiny_cross):
    answers = four_doors(run_cli, root, tmp_path, f"cross:{tiny_cross}")
    assert len(answers[0]) == 3 and all(dict((i, g) for i, _, g in DOCS)[d] in ("cooking", "ml")
                                        for d in answers[0])
    assert all(a == answers[0] for a in answers), answers
    # the reranker did reorder: the same doors without it give the first stage's order
    col = Collection.open("docs", root)
    first = [h.id for h in col.search(text=QUERY, k=6, mode="hybrid", where=WHERE)]
    from engine.core.ranking.rerankers.spec import load_reranker
    texts = {i: t for i, t, _ in DOCS}
    scores = load_reranker(f"cross:{tiny_cross}").score(QUERY, [texts[d] for d in first], "text")
    assert answers[0] == [first[i] for i in np.argsort(-np.asarray(scores), kind="stable")[:3]]


def test_embedding_reranker_through_four_doors(run_cli, root, tmp_path):
    answers = four_doors(run_cli, root, tmp_path, "embed:minilm")
    assert len(answers[0]) == 3 and all(a == answers[0] for a in answers), answers


def test_causal_lm_reranker_through_four_doors(run_cli, root, tmp_path, tiny_lm):
    answers = four_doors(run_cli, root, tmp_path, f"llm:{tiny_lm}")
    assert len(answers[0]) == 3 and all(a == answers[0] for a in answers), answers


def test_id_queries_through_the_collection_the_pipeline_and_the_service(root, tmp_path):
    from fastapi.testclient import TestClient

    from engine.commands.serve import served_pipelines
    from engine.core.ranking.pipeline import Context, Query, run_pipeline
    from engine.core.ranking.pipeline.retrieve import Retrieve
    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    col = Collection.open("docs", root)
    raw = col.hits(*col.search_vectors(np.asarray(col.embeddings[7])[None], 4))[0]
    api = run_pipeline(Retrieve("docs", k=4), [Query("q", item="d7")], Context(root=root))["q"].ids
    (tmp_path / "p.toml").write_text("pipeline = 'retrieve(\"docs\", k=10) % 4'\n")
    opts = ServeOptions(root=root, pipelines=served_pipelines([f"p={tmp_path / 'p.toml'}"]))
    with TestClient(create_app(opts), raise_server_exceptions=False) as c:
        whole = c.post("/search", json={"collection": "docs", "id": "d7", "k": 4}).json()["hits"]
        served = [h["id"] for h in whole]
        piped = c.post("/search", json={"pipeline": "p", "id": "d7", "k": 4}).json()["hits"]
        filtered = c.post("/search", json={"collection": "docs", "id": "d7", "k": 4, "where": WHERE}).json()["hits"]
        piped_where = c.post("/search", json={"pipeline": "p", "id": "d7", "k": 4, "where": WHERE}).json()["hits"]
        assert c.post("/search", json={"pipeline": "p", "id": "nope"}).status_code == 404
        assert c.post("/search", json={"collection": "docs", "id": "nope"}).status_code == 404
    assert [h.id for h in raw] == list(api) == served == [h["id"] for h in piped]
    assert [h["id"] for h in filtered] == [h["id"] for h in piped_where]
    assert piped == whole and whole[0]["meta"]["topic"] == "cooking"  # metadata and scores alike


def test_image_queries_through_four_doors(run_cli, root, tmp_path):
    from PIL import Image
    from fastapi.testclient import TestClient

    from engine.core.ranking.pipeline import Context, Query, run_pipeline
    from engine.core.ranking.pipeline.retrieve import Retrieve
    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    img = tmp_path / "q.png"
    Image.fromarray((np.arange(48).reshape(4, 4, 3) * 5).astype(np.uint8)).save(img)
    code, out, err = run_cli("search", "docs", "--image", img, "--root", root, "--json", "-k", 4, "-q")
    assert code == 0, err
    cli = [h["id"] for h in json.loads(out)["hits"]]
    api = [h.id for h in Collection.open("docs", root).search(image=str(img), k=4)]
    piped = run_pipeline(Retrieve("docs", k=4), [Query("q", image=str(img))], Context(root=root))["q"].ids
    from engine.commands.serve import served_pipelines
    (tmp_path / "p.toml").write_text("pipeline = 'retrieve(\"docs\", k=10) % 4'\n")
    opts = ServeOptions(root=root, pipelines=served_pipelines([f"p={tmp_path / 'p.toml'}"]))
    with TestClient(create_app(opts), raise_server_exceptions=False) as c:
        r = c.post("/search", data={"collection": "docs", "k": "4"}, files={"image": ("q.png", img.read_bytes())})
        assert r.status_code == 200, r.text
        served = [h["id"] for h in r.json()["hits"]]
        r = c.post("/search", data={"pipeline": "p", "k": "9"}, files={"image": ("q.png", img.read_bytes())})
        assert r.status_code == 200, r.text
        served_pipeline = [h["id"] for h in r.json()["hits"]]
        r = c.post("/search", data={"pipeline": "p", "collection": "docs"}, files={"image": ("q.png", b"x")})
        assert r.status_code == 422 and "not both" in r.json()["detail"]
        r = c.post("/search", data={"pipeline": "nope"}, files={"image": ("q.png", b"x")})
        assert r.status_code == 404
    assert cli == api == list(piped) == served == served_pipeline and len(cli) == 4


def test_a_rerank_spec_is_parsed_once_per_command(run_cli, root, tmp_path, tiny_cross):
    from engine.core.ranking.rerankers import spec as spec_module
    from engine.io.runs import write_run
    before = spec_module.PARSES[0]
    code, _, err = run_cli("search", "docs", QUERY, "--root", root, "--json", "-k", 3, "--rerank",
                           f"cross:{tiny_cross}", "--rerank-depth", 6, "-q")
    assert code == 0, err
    assert spec_module.PARSES[0] == before + 1
    docs = tmp_path / "docs.tsv"
    docs.write_text("id\ttext\n" + "".join(f"{i}\t{t}\n" for i, t, _ in DOCS))
    (tmp_path / "q.tsv").write_text(f"q1\t{QUERY}\n")
    write_run(tmp_path / "in.run", {"q1": [(i, 10.0 - n) for n, (i, _, _) in enumerate(DOCS)]}, "x")
    before = spec_module.PARSES[0]
    code, _, err = run_cli("rerank", tmp_path / "in.run", "--queries", tmp_path / "q.tsv", "--docs", docs,
                           "--model", f"cross:{tiny_cross}", "--depth", 5, "--out", tmp_path / "out.run", "-q")
    assert code == 0, err
    assert spec_module.PARSES[0] == before + 1
