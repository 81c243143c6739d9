"""A deterministic EVENTA database in the OpenEvents V1 layout, generated offline for tests and demos.

Articles are news-like texts about named people and places; each has images cut from the real
photos bundled with scikit-image (a cat, coffee, a rocket, a motorcycle, …), varied by crop, flip
and brightness. Captions name the article's people and place *and* say what the photo shows, so
each stage has something to find: the article stage knows the story but not which of its images,
the image stage knows the subject but not the story. People recur across articles, so neither
stage alone is enough.
"""
from __future__ import annotations

import csv
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import EngineError
from engine.io.atomic import atomic_open, atomic_path, write_json

# photo file in skimage/data → phrases a caption or article uses for what it shows
THEMES: dict[str, tuple[str, ...]] = {
    "chelsea.png": ("a tabby cat", "the cat curled up by the window", "a cat with green eyes"),
    "coffee.png": ("a cup of coffee", "an espresso cup on a saucer", "a coffee cup"),
    "rocket.jpg": ("a rocket on the launch pad", "the rocket before launch", "a space rocket"),
    "motorcycle_left.png": ("a motorcycle", "a red motorbike parked in a garage", "a motorcycle"),
    "astronaut.png": ("an astronaut in a space suit", "the astronaut posing with a flag", "an astronaut"),
    "coins.png": ("a pile of coins", "old coins on a table", "coins"),
    "camera.png": ("a photographer with a camera on a tripod", "a cameraman", "a man holding a camera"),
    "page.png": ("a page of printed text", "a printed page of a book", "a page of text"),
}
FIRST = ("Elena", "Marcus", "Aiko", "Tomas", "Priya", "Jonas", "Amara", "Luis", "Greta", "Kwame", "Sofia",
         "Dmitri", "Hana", "Omar", "Ingrid", "Rafael")
LAST = ("Varga", "Okafor", "Lindqvist", "Moreau", "Castillo", "Nakamura", "Brennan", "Haddad", "Petrov",
        "Adeyemi", "Kowalski", "Ferreira", "Sato", "Mensah", "Novak", "Quinn")
PLACES = ("Northfield", "Port Alder", "Kestrel Bay", "Montrose", "Valdoria", "Ashcombe", "Lake Orrin",
          "Brightwater", "Sundale", "Harrowgate", "Old Quay", "Pinecrest", "Redmarsh", "Eastholm",
          "Silverton", "Glenmoor", "Westport", "Carrow", "Dunmere", "Ravensholt")
EVENTS = ("charity auction", "science fair", "city festival", "town hall meeting", "trade show",
          "museum opening", "street market", "space expo", "motor show", "book fair", "press conference",
          "heritage day")
ORGS = ("the city council", "a local charity", "the regional museum", "the national space agency",
        "a riders' club", "the chamber of commerce", "a university lab", "the public library")
FILLER = (
    "Officials said the turnout was higher than in previous years.",
    "Local businesses reported a busy weekend as visitors arrived from across the region.",
    "The organisers thanked volunteers who worked through the night to prepare the venue.",
    "Critics questioned the cost of the project, which was funded partly by public money.",
    "Weather forecasters had warned of rain, but the skies stayed clear for most of the day.",
    "Police closed several streets in the centre to manage the crowds.",
    "A spokesperson declined to comment on plans for next year.",
    "Residents were invited to share their photographs on social media.",
    "The event was broadcast live on regional television and streamed online.",
    "Schools in the area organised trips so that pupils could attend.",
    "Tickets sold out within hours of going on sale last month.",
    "The mayor described the day as a moment the community would remember.",
)


@dataclass(frozen=True)
class FixturePaths:
    root: Path
    database: Path   # database.json, OpenEvents V1 layout
    images: Path     # folder of <image_id>.jpg
    queries: Path    # query_id,query_text
    labeled: Path    # query_id,query_text,retrieved_article_id,retrieved_image_id
    n_articles: int
    n_images: int


def _photo_folder() -> Path:
    try:
        import skimage
    except ImportError:
        raise EngineError("the EVENTA fixture cuts its images from scikit-image's bundled photos: "
                          "pip install scikit-image") from None
    return Path(skimage.__file__).parent / "data"


def _uid(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()[:16]


def _variant(photo, rng: np.random.Generator, size: int):
    """A crop of 70–100 % of the photo, maybe mirrored, brightness ±15 %, longest side `size`."""
    from PIL import ImageEnhance, ImageOps
    w, h = photo.size
    scale = float(rng.uniform(0.7, 1.0))
    cw, ch = max(8, int(w * scale)), max(8, int(h * scale))
    x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    img = photo.crop((x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        img = ImageOps.mirror(img)
    img = ImageEnhance.Brightness(img).enhance(float(rng.uniform(0.85, 1.15)))
    img.thumbnail((size, size))
    return img


def article_text(rng: np.random.Generator, person: str, place: str, event: str, org: str, year: int,
                 subjects: list[str], n_filler: int = 5) -> tuple[str, str]:
    """(title, content) of one generated news article that mentions its images' subjects in passing."""
    title = f"{person} opens the {event} in {place}"
    lines = [f"{person} opened the {year} {event} in {place} on Saturday, organised by {org}.",
             f"Hundreds of people came to {place} for the {event}."]
    for s in subjects:
        lines.append(f"Among the things visitors saw was {s}.")
    lines.append(f"\"This is what {place} is about,\" {person.split()[0]} told reporters.")
    body = lines[2:] + [FILLER[i] for i in rng.choice(len(FILLER), size=min(n_filler, len(FILLER)), replace=False)]
    rng.shuffle(body)
    return title, " ".join(lines[:2] + body)


def caption_text(rng: np.random.Generator, person: str, place: str, event: str, year: int, subject: str,
                 name_person: bool = True) -> str:
    """A long realistic caption: what the photo shows, who and where, then context sentences."""
    who = f"{person}, who opened the event," if name_person else "A visitor"
    parts = [f"The photo shows {subject} at the {event} in {place} in {year}.",
             f"{who} stood nearby as crowds gathered around {subject}.",
             f"The {event} drew visitors from across the region to {place}."]
    parts += [FILLER[i] for i in rng.choice(len(FILLER), size=2, replace=False)]
    return " ".join(parts)


N_ARTICLES = 24
IMAGES_PER_ARTICLE = 2
SEED = 0


def make_eventa_fixture(folder: str | os.PathLike, n_articles: int = N_ARTICLES,
                        images_per_article: int = IMAGES_PER_ARTICLE, image_size: int = 128, seed: int = SEED,
                        broken_image: bool = True) -> FixturePaths:
    """Write database.json, images/, queries.csv and labeled.csv under `folder` (same output for the same args)."""
    from PIL import Image
    if n_articles < 1 or not 1 <= images_per_article <= len(THEMES):
        raise EngineError(f"need at least 1 article and 1..{len(THEMES)} images per article")
    folder = Path(folder)
    photos_dir = _photo_folder()
    themes = [t for t in THEMES if (photos_dir / t).is_file()]
    if len(themes) < images_per_article:
        raise EngineError(f"scikit-image's photos are missing from {photos_dir}; reinstall scikit-image")
    photos = {t: Image.open(photos_dir / t).convert("RGB") for t in themes}
    rng = np.random.default_rng(seed)
    images_dir = folder / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    people = [f"{FIRST[i % len(FIRST)]} {LAST[(i * 7 + 3) % len(LAST)]}" for i in range(max(1, n_articles // 2))]
    database, labeled = {}, []
    for a in range(n_articles):
        aid = _uid(seed, "article", a)
        person = people[a % len(people)]  # each person in two articles: the name alone is ambiguous
        place = PLACES[(a * 3) % len(PLACES)] if a < len(PLACES) else f"{PLACES[a % len(PLACES)]} {a}"
        event, org = EVENTS[a % len(EVENTS)], ORGS[a % len(ORGS)]
        year = 2012 + a % 10
        chosen = [themes[i] for i in rng.choice(len(themes), size=images_per_article, replace=False)]
        image_ids, subjects = [], []
        for j, theme in enumerate(chosen):
            iid = _uid(seed, "image", a, j)
            with atomic_path(images_dir / f"{iid}.jpg") as tmp:
                _variant(photos[theme], rng, image_size).save(tmp, format="JPEG", quality=85)
            image_ids.append(iid)
            subjects.append(THEMES[theme][int(rng.integers(len(THEMES[theme])))])
        title, content = article_text(rng, person, place, event, org, year, subjects)
        database[aid] = {"url": f"https://news.example.org/{year}/{aid}", "date": f"{year}-0{1 + a % 9}-1{a % 10}",
                         "title": title, "images": image_ids, "content": content}
        for j, (iid, theme) in enumerate(zip(image_ids, chosen)):
            subject = THEMES[theme][int(rng.integers(len(THEMES[theme])))]
            labeled.append((_uid(seed, "query", a, j), caption_text(rng, person, place, event, year, subject,
                                                                   name_person=bool(rng.random() < 0.75)),
                            aid, iid))
    if broken_image:
        (images_dir / "broken0000000000.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    write_json(folder / "database.json", database)
    with atomic_open(folder / "queries.csv") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["query_id", "query_text"])
        w.writerows([(q, t) for q, t, _, _ in labeled])
    with atomic_open(folder / "labeled.csv") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["query_id", "query_text", "retrieved_article_id", "retrieved_image_id"])
        w.writerows(labeled)
    return FixturePaths(folder, folder / "database.json", images_dir, folder / "queries.csv", folder / "labeled.csv",
                        n_articles, n_articles * images_per_article)


def generated_articles(n: int, seed: int = 0, images_per_article: int = 2) -> dict[str, dict]:
    """Text-only articles in the OpenEvents layout (image ids with no files), for benchmarks at scale."""
    rng = np.random.default_rng(seed)
    subjects = [s for phrases in THEMES.values() for s in phrases]
    out = {}
    for a in range(n):
        aid = _uid(seed, "bench-article", a)
        person = f"{FIRST[a % len(FIRST)]} {LAST[(a // len(FIRST)) % len(LAST)]}"
        place = f"{PLACES[a % len(PLACES)]} {a // len(PLACES)}"
        subj = [subjects[i] for i in rng.choice(len(subjects), size=images_per_article, replace=False)]
        title, content = article_text(rng, person, place, EVENTS[a % len(EVENTS)], ORGS[a % len(ORGS)],
                                      2012 + a % 10, subj, n_filler=8)
        out[aid] = {"url": f"https://news.example.org/{aid}", "date": "2020-01-01", "title": title,
                    "images": [_uid(seed, "bench-image", a, j) for j in range(images_per_article)],
                    "content": content}
    return out


def captions_for(database: dict[str, dict], n: int, seed: int = 1) -> list[tuple[str, str, str]]:
    """(query_id, caption, article_id) for `n` articles drawn from a generated database."""
    rng = np.random.default_rng(seed)
    ids = list(database)
    out = []
    for q in range(n):
        aid = ids[int(rng.integers(len(ids)))]
        title = database[aid]["title"]
        person, rest = title.split(" opens the ", 1)
        event, place = rest.split(" in ", 1)
        subject = list(THEMES.values())[int(rng.integers(len(THEMES)))][0]
        out.append((f"q{q:05d}", caption_text(rng, person, place, event, 2020, subject), aid))
    return out


def coco_as_eventa(coco: str | os.PathLike, folder: str | os.PathLike, limit: int | None = None,
                   held_out: int = 4) -> FixturePaths:
    """A COCO captions folder (`captions.json`, `images/`) as an EVENTA database: one pseudo-article per
    image made of four of its captions, the remaining one (the `held_out`-th, by annotation id) as its query.
    The images are used where they are (nothing is copied); with `limit`, the chosen ones are linked
    from `folder/images` so that only they are indexed."""
    from engine.io.tables import read_json
    coco, folder = Path(coco), Path(folder)
    data = read_json(coco / "captions.json", "file (expected a COCO captions folder)")
    captions: dict[int, list[tuple[int, str]]] = {}
    for ann in data["annotations"]:
        captions.setdefault(int(ann["image_id"]), []).append((int(ann["id"]), ann["caption"].strip()))
    images = sorted(data["images"], key=lambda im: im["file_name"])[:limit]
    database, labeled = {}, []
    for im in images:
        caps = [c for _, c in sorted(captions.get(int(im["id"]), []))]
        if len(caps) <= held_out:
            continue
        query = caps[held_out]
        rest = caps[:held_out] + caps[held_out + 1:]
        iid = Path(im["file_name"]).stem
        aid = f"article-{iid}"
        database[aid] = {"url": im.get("coco_url", ""), "date": im.get("date_captured", ""), "title": rest[0],
                         "images": [iid], "content": " ".join(c if c.endswith(".") else c + "." for c in rest[1:])}
        labeled.append((f"q-{iid}", query, aid, iid))
    if not labeled:
        raise EngineError(f"{coco}: no image has more than {held_out} captions")
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "database.json", database)
    with atomic_open(folder / "labeled.csv") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["query_id", "query_text", "retrieved_article_id", "retrieved_image_id"])
        w.writerows(labeled)
    with atomic_open(folder / "queries.csv") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["query_id", "query_text"])
        w.writerows([(q, t) for q, t, _, _ in labeled])
    image_dir = coco / "images"
    if limit is not None:
        image_dir = folder / "images"
        image_dir.mkdir(exist_ok=True)
        for im in images:
            link = image_dir / im["file_name"]
            if not link.exists():
                link.symlink_to((coco / "images" / im["file_name"]).resolve())
    return FixturePaths(folder, folder / "database.json", image_dir, folder / "queries.csv",
                        folder / "labeled.csv", len(database), len(database))


LEADS = ("{person} of {org} speaks to reporters in {place} on Saturday.",
         "Visitors gather in {place} during the {year} {event}.",
         "{place}, {year}: the {event} opens to the public.")
CONTEXT = ("{person} said the {event} in {place} would return next year.",
           "The {event} was organised by {org} and ran for three days.",
           "Earlier this year, {person} announced plans to expand the {event} beyond {place}.",
           "Organisers of the {year} {event} expected more than ten thousand visitors.",
           "{org} has supported events in {place} since {year}.")


def news_caption(rng: np.random.Generator, visual: str, words: int, lead: float = 0.2) -> str:
    """A long news-photo caption of about `words` words around `visual`, the sentence saying what the
    photo shows: as real news captions run, it comes first (second, after a dateline-like lead, with
    probability `lead`), and the rest is the story's context (people, places, organisers, filler) that
    says nothing about the photo."""
    person = f"{FIRST[int(rng.integers(len(FIRST)))]} {LAST[int(rng.integers(len(LAST)))]}"
    fill = {"person": person, "place": PLACES[int(rng.integers(len(PLACES)))],
            "event": EVENTS[int(rng.integers(len(EVENTS)))], "org": ORGS[int(rng.integers(len(ORGS)))],
            "year": 2012 + int(rng.integers(12))}
    visual = visual.strip().rstrip(".") + "."
    head = [LEADS[int(rng.integers(len(LEADS)))].format(**fill), visual] if rng.random() < lead else [visual]
    pool = [s.format(**fill) for s in CONTEXT] + list(FILLER)
    rest = [pool[i] for i in rng.permutation(len(pool))]
    out, n = list(head), sum(len(s.split()) for s in head)
    for sentence in rest * 4:
        if n >= words:
            break
        out.append(sentence)
        n += len(sentence.split())
    out[0] = out[0][0].upper() + out[0][1:]
    return " ".join(out)
