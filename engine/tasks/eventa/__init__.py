"""EVENTA 2025 Track 2: news caption → image, through an article stage; `submission.csv` in `submission.zip`."""
from engine.io.runs import register_qrels_reader, register_run_reader

register_run_reader((".csv", ".zip"), "engine.tasks.eventa.submission:read_submission_run", "an EVENTA submission")
register_qrels_reader((".csv",), "engine.tasks.eventa.data:labeled_qrels", "an EVENTA labeled CSV")
