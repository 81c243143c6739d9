"""A generated DSEBench-style corpus in the benchmark's exact file formats, for tests and the benchmark.

The real corpus (`datasets.json`, 46,615 records) is not redistributable here, so relevance is planted:
every record has a topic, a subtopic and a "facet" (region + publisher). A case's query names a subtopic;
its example datasets share the wanted facet but usually sit in a sibling subtopic. Gains follow DSEBench:
query_rel (2 same subtopic, 1 same topic) × target_sim (2 same region and publisher, 1 same region), so
only records matching both the query and the examples reach the top gain.
"""
from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from engine.io.atomic import atomic_open, write_json

# topic → subtopic → keywords (the first two words form the subtopic's name)
TOPICS: dict[str, dict[str, list[str]]] = {
    "cattle": {"beef cattle costs": ["beef", "cattle", "feed", "fattening", "costs"],
               "dairy milk yield": ["dairy", "milk", "cows", "yield", "lactation"],
               "livestock disease": ["livestock", "disease", "outbreak", "veterinary", "vaccination"]},
    "transport": {"bus ridership": ["bus", "ridership", "passengers", "routes", "fares"],
                  "car ownership": ["car", "ownership", "vehicles", "registrations", "drivers"],
                  "rail freight": ["rail", "freight", "cargo", "tonnage", "railway"]},
    "health": {"hospital beds": ["hospital", "beds", "inpatient", "wards", "admissions"],
               "elderly medical expenses": ["elderly", "medical", "expenses", "aged", "care"],
               "vaccination coverage": ["immunization", "coverage", "children", "doses", "measles"]},
    "energy": {"electricity consumption": ["electricity", "consumption", "households", "kilowatt", "grid"],
               "solar capacity": ["solar", "photovoltaic", "capacity", "panels", "renewable"],
               "fuel prices": ["gasoline", "diesel", "fuel", "prices", "pump"]},
    "education": {"school enrollment": ["school", "enrollment", "pupils", "primary", "attendance"],
                  "university graduates": ["university", "graduates", "degrees", "tertiary", "students"],
                  "teacher salaries": ["teacher", "salaries", "pay", "staff", "teaching"]},
    "tourism": {"amusement parks": ["amusement", "parks", "visitors", "attractions", "theme"],
                "hotel occupancy": ["hotel", "occupancy", "rooms", "guests", "nights"],
                "museum attendance": ["museum", "attendance", "exhibitions", "galleries", "tickets"]},
    "industry": {"mining output": ["mining", "minerals", "ore", "quarry", "extraction"],
                 "manufacturing employment": ["manufacturing", "factories", "workers", "employment", "plants"],
                 "construction permits": ["construction", "permits", "buildings", "housing", "starts"]},
    "environment": {"air quality": ["air", "pollution", "particulate", "ozone", "monitoring"],
                    "water quality": ["water", "rivers", "nitrate", "sampling", "contamination"],
                    "waste recycling": ["waste", "recycling", "landfill", "municipal", "collection"]},
}
REGIONS = ["Hokkaido", "Bavaria", "Ontario", "Queensland", "Andalusia"]
AUTHORS = ["Office for National Statistics", "Ministry of Agriculture", "City Open Data Portal",
           "Regional Statistics Bureau", "Environmental Protection Agency"]
FORMATS = ["annual table", "monthly series", "quarterly report", "survey microdata", "census extract"]
FILLER = ["data", "figures", "records", "values", "indicators", "statistics", "collection", "dataset",
          "breakdown", "estimates", "totals", "counts"]
FIELDS = ("title", "description", "tags", "author", "summary")


@dataclass
class SynthRecord:
    id: str
    topic: str
    subtopic: str
    region: str
    author: str
    record: dict = field(default_factory=dict)


@dataclass
class SynthCorpus:
    records: list[SynthRecord]
    queries: dict[str, str]            # query_id → text
    cases: list[tuple[str, str, str]]  # (case_id, query_id, example id): cases.tsv rows
    judgments: list[dict]              # human_annotated_judgments.json entries
    folds: list[dict[str, list[str]]]  # per fold: {"train"|"valid"|"test": [case ids]}


def _subtopics() -> list[tuple[str, str]]:
    return [(t, s) for t, subs in TOPICS.items() for s in subs]


def _record(rng: random.Random, topic: str, sub: str, region: str, author: str) -> SynthRecord:
    words = TOPICS[topic][sub]
    fmt = rng.choice(FORMATS)
    year = rng.randint(2005, 2023)
    kw = rng.sample(words, 3)
    title = f"{region} {sub} {fmt} {year}"
    description = (f"{fmt.capitalize()} of {kw[0]} and {kw[1]} {rng.choice(FILLER)} for {region}. "
                   f"Covers {kw[2]} {rng.choice(FILLER)} and related {topic} {rng.choice(FILLER)} "
                   f"from {year} onwards, compiled by the {author}.")
    tags = [sub.split()[0], topic, region.lower(), rng.choice(words)]
    summary = f"{topic.capitalize()} {rng.choice(FILLER)}: {' '.join(rng.sample(words, 2))} in {region}."
    rid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    rec = {"id": rid, "title": title, "description": description, "tags": tags, "author": author,
           "summary": summary}
    return SynthRecord(rid, topic, sub, region, author, rec)


def _query_text(rng: random.Random, sub: str, topic: str) -> str:
    words = TOPICS[topic][sub]
    return " ".join(rng.sample(words, 2) + ([rng.choice(FILLER)] if rng.random() < 0.5 else []))


def gains(case_sub: str, case_topic: str, example: SynthRecord, cand: SynthRecord) -> tuple[int, int]:
    """(query_rel, target_sim) of a candidate: the planted truth."""
    query_rel = 2 if cand.subtopic == case_sub else 1 if cand.topic == case_topic else 0
    target_sim = (2 if cand.author == example.author else 1) if cand.region == example.region else 0
    return query_rel, target_sim


def _field_flags(cand: SynthRecord, words: set[str]) -> list[int]:
    out = []
    for f in FIELDS:
        v = cand.record[f]
        text = " ".join(v) if isinstance(v, list) else str(v)
        out.append(int(bool(words & set(text.lower().replace(".", " ").replace(",", " ").split()))))
    return out


def generate(n_records: int = 600, n_cases: int = 40, n_train_cases: int = 10, multi_example: float = 0.2,
             judged_negatives: int = 15, n_folds: int = 5, seed: int = 7) -> SynthCorpus:
    """Records, queries, cases, judgments and folds; the same seed gives the same corpus."""
    rng = random.Random(seed)
    subs = _subtopics()
    records: list[SynthRecord] = []
    plans = []
    for c in range(n_cases + n_train_cases):
        topic, sub = subs[rng.randrange(len(subs))]
        region, author = rng.choice(REGIONS), rng.choice(AUTHORS)
        siblings = [s for s in TOPICS[topic] if s != sub]
        ex_sub = sub if rng.random() < 0.3 else rng.choice(siblings)
        n_ex = 2 if rng.random() < multi_example else 1
        examples = [_record(rng, topic, ex_sub, region, author) for _ in range(n_ex)]
        # planted answers: same subtopic and facet (gain 4), plus sibling-subtopic look-alikes (gain 2)
        planted = [_record(rng, topic, sub, region, author) for _ in range(2)]
        planted += [_record(rng, topic, rng.choice(siblings), region, author) for _ in range(2)]
        records += examples + planted
        plans.append((topic, sub, examples))
    while len(records) < n_records:
        topic, sub = subs[rng.randrange(len(subs))]
        records.append(_record(rng, topic, sub, rng.choice(REGIONS), rng.choice(AUTHORS)))
    rng.shuffle(records)

    queries: dict[str, str] = {}
    cases: list[tuple[str, str, str]] = []
    judgments: list[dict] = []
    test_ids: list[str] = []
    for c, (topic, sub, examples) in enumerate(plans):
        is_test = c < n_cases
        case_id = str(c + 1) if is_test else f"gen_{c + 1 - n_cases}"
        query_id = f"NTCIR_{200000 + c}" if is_test else f"GEN_{100000 + c}"
        queries[query_id] = _query_text(rng, sub, topic)
        cases += [(case_id, query_id, ex.id) for ex in examples]
        if not is_test:
            continue
        test_ids.append(case_id)
        target = examples[0]
        ex_ids = {ex.id for ex in examples}
        qwords = set(TOPICS[topic][sub])
        positives, negatives = [], []
        for cand in records:
            if cand.id in ex_ids:
                continue
            qr, ts = gains(sub, topic, target, cand)
            (positives if qr * ts > 0 else negatives).append((cand, qr, ts))
        hard = [n for n in negatives if n[1] > 0 or n[2] > 0]
        easy = [n for n in negatives if n[1] == 0 and n[2] == 0]
        picked = positives + rng.sample(hard, min(judged_negatives, len(hard))) \
            + rng.sample(easy, min(judged_negatives // 3, len(easy)))
        twords = {target.region.lower(), *target.author.lower().split(), topic}
        for cand, qr, ts in picked:
            judgments.append({"query_id": query_id, "target_dataset_id": target.id,
                              "candidate_dataset_id": cand.id, "case_id": case_id, "query_rel": qr,
                              "field_query_rel": _field_flags(cand, qwords) if qr else [0] * 5,
                              "target_sim": ts,
                              "field_target_sim": _field_flags(cand, twords) if ts else [0] * 5})
    folds = []
    for k in range(n_folds):
        test = [c for i, c in enumerate(test_ids) if i % n_folds == k]
        valid = [c for i, c in enumerate(test_ids) if i % n_folds == (k + 1) % n_folds]
        train = [c for c in test_ids if c not in set(test) | set(valid)]
        folds.append({"train": train, "valid": valid, "test": test})
    return SynthCorpus(records, queries, cases, judgments, folds)


def write_corpus(corpus: SynthCorpus, out: str | Path) -> dict[str, Path]:
    """The DSEBench layout: `datasets.json` and `Data/{queries.tsv, cases.tsv, human_annotated_judgments.json,
    Splits/5-Fold_split/fold_k/{train,valid,test}.json}`."""
    out = Path(out)
    data = out / "Data"
    paths = {"datasets": out / "datasets.json", "queries": data / "queries.tsv", "cases": data / "cases.tsv",
             "judgments": data / "human_annotated_judgments.json", "folds": data / "Splits" / "5-Fold_split"}
    write_json(paths["datasets"], [r.record for r in corpus.records])
    with atomic_open(paths["queries"]) as fh:
        fh.writelines(f"{q}\t{t}\n" for q, t in corpus.queries.items())
    with atomic_open(paths["cases"]) as fh:
        fh.writelines(f"{c}\t{q}\t{d}\n" for c, q, d in corpus.cases)
    write_json(paths["judgments"], corpus.judgments)
    for k, fold in enumerate(corpus.folds):
        for part, ids in fold.items():
            keep = set(ids)
            write_json(paths["folds"] / f"fold_{k}" / f"{part}.json",
                       [j for j in corpus.judgments if j["case_id"] in keep])
    return paths
