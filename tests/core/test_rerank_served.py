"""Models served elsewhere: `llm:http://HOST:PORT/v1#MODEL` and `llm-list:http://…#MODEL` against a stub
OpenAI-compatible server on 127.0.0.1 started here. The stub records what it is sent and answers with
log-probabilities (or rankings) computed from it, so the test knows every expected score."""
from __future__ import annotations

import json
import re
import threading
import zlib
from http.server import ThreadingHTTPServer

import numpy as np
import pytest
from fixtures.json_stub import JsonHandler

DOCS = ["cats on a mat", "dogs in a park", "boats at sea", "trains at night", "cheese and bread"]


def fake_logprobs(text: str) -> tuple[float, float]:
    """("yes", "no") log-probabilities the stub gives a prompt: a fixed function of its text."""
    h = zlib.crc32(text.encode())
    return -((h % 1000) / 100.0) - 0.01, -(((h >> 10) % 1000) / 100.0) - 0.01


class Stub(JsonHandler):
    seen: list[tuple[str, dict]] = []
    rank_answer = staticmethod(lambda n: " > ".join(f"[{i}]" for i in range(n, 0, -1)))
    drop_no = False

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Stub.seen.append((self.path, body))
        if body.get("model") != "judge-7b":
            return self.answer({"error": {"message": f"model {body.get('model')} not served"}}, 404)
        if self.path == "/v1/completions":
            yes, no = fake_logprobs(body["prompt"])
            top = {"yes": yes, "maybe": -12.0} if Stub.drop_no else {"yes": yes, "no": no, "maybe": -12.0}
            return self.answer({"choices": [{"text": "yes", "logprobs": {"top_logprobs": [top]}}]})
        if self.path == "/v1/chat/completions":
            user = body["messages"][-1]["content"]
            if body.get("logprobs"):
                yes, no = fake_logprobs(user)
                top = [{"token": "yes", "logprob": yes}, {"token": " no", "logprob": no}]
                return self.answer({"choices": [{"message": {"content": "yes"},
                                                      "logprobs": {"content": [{"token": "yes", "logprob": yes,
                                                                                "top_logprobs": top}]}}]})
            n = len(re.findall(r"^\[\d+\] ", user, re.M))
            return self.answer({"choices": [{"message": {"role": "assistant",
                                                              "content": Stub.rank_answer(n)}}]})
        return self.answer({"error": "no such path"}, 404)


@pytest.fixture()
def server():
    Stub.seen = []
    Stub.drop_no = False
    Stub.rank_answer = staticmethod(lambda n: " > ".join(f"[{i}]" for i in range(n, 0, -1)))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_pointwise_reads_the_yes_no_logprobs_of_the_published_prompt(server):
    from engine.core.ranking.rerankers.spec import load_reranker
    reranker = load_reranker(f"llm:{server}#judge-7b", template="qwen3-reranker", instruction="Find it")
    got = reranker.score("animals", DOCS)
    prompts = {b["prompt"] for p, b in Stub.seen}
    want_prompts = [('<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and '
                     'the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
                     f'<|im_start|>user\n<Instruct>: Find it\n<Query>: animals\n<Document>: {d}<|im_end|>\n'
                     '<|im_start|>assistant\n<think>\n\n</think>\n\n') for d in DOCS]
    assert prompts == set(want_prompts)
    assert all(p == "/v1/completions" and b["max_tokens"] == 1 and b["logprobs"] >= 2 for p, b in Stub.seen)
    want = [fake_logprobs(p)[0] - fake_logprobs(p)[1] for p in want_prompts]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_pointwise_chat_and_a_missing_token(server):
    from engine.core.ranking.rerankers.spec import load_reranker
    got = load_reranker(f"llm:{server}#judge-7b").score("animals", DOCS)  # chat: the default for this name
    users = [f"<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
             f"<Query>: animals\n<Document>: {d}" for d in DOCS]
    np.testing.assert_allclose(got, [fake_logprobs(u)[0] - fake_logprobs(u)[1] for u in users], rtol=1e-12)
    assert all(b["messages"][0]["role"] == "system" and b["top_logprobs"] >= 2 for _, b in Stub.seen)
    Stub.drop_no = True  # "no" not among the top logprobs: taken at the lowest listed, a bound
    got = load_reranker(f"llm:{server}#judge-7b", template="qwen3-reranker").score("animals", DOCS[:1])
    prompt = Stub.seen[-1][1]["prompt"]
    assert got[0] == pytest.approx(fake_logprobs(prompt)[0] - min(fake_logprobs(prompt)[0], -12.0))


def test_listwise_through_the_server_and_a_counted_warning(server, capsys):
    from engine.core.ranking.rerankers.spec import load_reranker
    docs = [f"doc {i}" for i in range(8)]
    reranker = load_reranker(f"llm-list:{server}#judge-7b")
    order = np.argsort(-reranker.score("q", docs), kind="stable")
    assert list(order) == list(range(7, -1, -1))   # the stub answers [8] > [7] > … > [1]
    Stub.rank_answer = staticmethod(lambda n: "I would rather not say.")
    for query in ("q1", "q2"):
        assert list(np.argsort(-reranker.score(query, docs), kind="stable")) == list(range(8))
    err = " ".join(capsys.readouterr().err.split())
    assert "1 of 2 windows so far (1 queries)" in err and "kept their input order" in err
    assert err.count("warning") == 1   # a bounded number of lines, not one per query


def test_server_errors_are_one_line(server):
    from engine.core.ranking.rerankers.spec import load_reranker
    from engine.errors import EngineError
    with pytest.raises(EngineError, match="answered 404.*not served"):
        load_reranker(f"llm:{server}#other-model").score("q", DOCS[:2])
    with pytest.raises(EngineError, match="could not be reached"):
        load_reranker("llm:http://127.0.0.1:9/v1#judge-7b").score("q", DOCS[:1])


def test_engine_rerank_a_run_with_a_served_model(run_cli, server, tmp_path, monkeypatch, capsys):
    from engine.io.runs import write_run
    docs = tmp_path / "docs.tsv"
    docs.write_text("id\ttext\n" + "".join(f"d{i}\t{d}\n" for i, d in enumerate(DOCS)))
    (tmp_path / "q.tsv").write_text("q1\tanimals\n")
    write_run(tmp_path / "a.run", {"q1": [(f"d{i}", 10.0 - i) for i in range(5)]}, "bm25")
    out = tmp_path / "re.run"
    code, _, err = run_cli("rerank", tmp_path / "a.run", "--queries", tmp_path / "q.tsv",
                           "--docs", docs, "--model", f"llm:{server}#judge-7b", "--rerank-template",
                           "qwen3-reranker", "--depth", "5", "--out", out, "-q")
    assert code == 0, err
    prompt = {b["prompt"].split("<Document>: ")[1].split("<|im_end|>")[0]: b["prompt"] for _, b in Stub.seen}
    scores = {f"d{i}": np.subtract(*fake_logprobs(prompt[d])) for i, d in enumerate(DOCS)}
    assert [ln.split()[2] for ln in out.read_text().splitlines()] == sorted(scores, key=lambda d: -scores[d])
