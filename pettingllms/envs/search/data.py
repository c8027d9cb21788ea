"""search datasets: a seeded synthetic knowledge base and multi-hop questions over it (offline).

The knowledge base has countries, cities (each in a country), companies (each with its
headquarters in a city), institutes (each in a city) and people (each born in a city, working
for a company, having studied at an institute, living in a city, the colleague of someone: the
last two are never asked, they are there to be retrieved by mistake); every name is invented, so the model cannot
answer from memory. The corpus has one one-sentence document per fact, written as a
FlashRAG-format `corpus.jsonl` ({"id", "contents": "title\\ntext"}) next to the splits.

Presets (built on first use, pettingllms.envs.dataset):
  search        2-hop questions ("In which country was Mara Quell born?": her birth city, then
                that city's country), the level the 5-turn env is made for.
  search_easy   1-hop questions ("Where was Mara Quell born?").
Train and test ask about disjoint people of one knowledge base (one corpus).

Row: id, question, answer, golden_answers (list), kind, source ("synthetic"), hops (list of
{question, answer, doc_id}: the sub-questions, their answers and the document of each fact).
The FlashRAG hub sets (NQ, HotpotQA, ...) are loaded by hub.py.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pettingllms.envs.dataset import new_output_dir

DATA_NAMES = ("search", "search_easy")
CORPUS_FILE = "corpus.jsonl"
N_COUNTRIES, N_CITIES, N_COMPANIES, N_INSTITUTES = 12, 40, 40, 24
_ONSETS = "b br c d dr f g gr h j k kr l m n p pr qu r s st t tr v w z".split()
_VOWELS = "a e i o u ai ea io ou".split()
_CODAS = ["", "", "l", "n", "r", "s", "th", "x", "m", "nd", "rk"]

# question kind -> (2-hop question, 1-hop question, the second hop's question about the middle entity)
KINDS = {
    "birth_country": ("In which country was {p} born?", "Where was {p} born?", "In which country is {m}?"),
    "employer_city": ("In which city is the headquarters of the company {p} works for?",
                      "Which company does {p} work for?", "In which city is the headquarters of {m}?"),
    "institute_city": ("In which city is the institute where {p} studied?", "Where did {p} study?",
                       "In which city is {m}?"),
}


def _word(rng: random.Random, syllables: tuple[int, int]) -> str:
    n = rng.randint(*syllables)
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(n)).capitalize() + rng.choice(_CODAS)


def _names(rng: random.Random, n: int, used: set[str], parts: int = 1, syllables=(2, 3)) -> list[str]:
    """n invented names, no word of them used before (so a name's words point at one entity)."""
    out = []
    while len(out) < n:
        words = [_word(rng, syllables) for _ in range(parts)]
        if any(w.lower() in used for w in words) or len(set(words)) < parts:
            continue
        used.update(w.lower() for w in words)
        out.append(" ".join(words))
    return out


def knowledge_base(seed: int, n_people: int) -> dict[str, Any]:
    """Entities, facts {(subject, relation): object} and one document per fact."""
    rng = random.Random(f"search-kb-{seed}")
    used: set[str] = set()
    countries = _names(rng, N_COUNTRIES, used)
    cities = _names(rng, N_CITIES, used)
    companies = [f"{n} Corporation" for n in _names(rng, N_COMPANIES, used)]
    institutes = [f"{n} Institute" for n in _names(rng, N_INSTITUTES, used)]
    people = _names(rng, n_people, used, parts=2, syllables=(1, 2))
    facts: dict[tuple[str, str], str] = {}
    docs: dict[tuple[str, str], tuple[str, str]] = {}  # fact -> (doc id, sentence)
    templates = {
        "country": "{s} is a city in the country of {o}.",
        "headquarters": "{s} has its headquarters in the city of {o}.",
        "located": "{s} is an institute located in the city of {o}.",
        "born": "{s} was born in the city of {o}.",
        "employer": "{s} works for the company {o}.",
        "studied": "{s} studied at {o}.",
        "lives": "{s} lives in the city of {o}.",  # the facts below are distractors: never asked
        "colleague": "{s} is a colleague of {o}.",
    }
    def add(subject: str, relation: str, obj: str) -> None:
        facts[(subject, relation)] = obj
        docs[(subject, relation)] = (f"d{len(docs)}", templates[relation].format(s=subject, o=obj))

    for c in cities:
        add(c, "country", rng.choice(countries))
    for c in companies:
        add(c, "headquarters", rng.choice(cities))
    for i in institutes:
        add(i, "located", rng.choice(cities))
    for p in people:
        add(p, "born", rng.choice(cities))
        add(p, "employer", rng.choice(companies))
        add(p, "studied", rng.choice(institutes))
        add(p, "lives", rng.choice(cities))
        add(p, "colleague", rng.choice(people))
    return {"people": people, "facts": facts, "docs": docs}


_HOPS = {"birth_country": ("born", "country"), "employer_city": ("employer", "headquarters"),
         "institute_city": ("studied", "located")}


def question_row(kb: dict[str, Any], person: str, kind: str, hops: int) -> dict[str, Any]:
    two_hop, one_hop, second = KINDS[kind]
    first_rel, second_rel = _HOPS[kind]
    middle = kb["facts"][(person, first_rel)]
    chain = [{"question": one_hop.format(p=person), "answer": middle, "doc_id": kb["docs"][(person, first_rel)][0]}]
    if hops == 2:
        chain.append({"question": second.format(m=middle), "answer": kb["facts"][(middle, second_rel)],
                      "doc_id": kb["docs"][(middle, second_rel)][0]})
    question = (two_hop if hops == 2 else one_hop).format(p=person)
    answer = chain[-1]["answer"]
    return {"question": question, "answer": answer, "golden_answers": [answer], "kind": kind,
            "source": "synthetic", "hops": chain}


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None, n_train: int | None = None,
          n_test: int | None = None, preset: str | None = None) -> dict[str, Any]:
    """Write train/test parquet and corpus.jsonl; generated, so `offline` changes nothing.
    The preset is the folder's name (search_easy: 1-hop) unless given."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    preset = preset or ("search_easy" if out.name.endswith("_easy") else "search")
    if preset not in DATA_NAMES:
        raise ValueError(f"search preset {preset!r}: choose one of {DATA_NAMES}")
    hops = 1 if preset == "search_easy" else 2
    n_train = 1000 if n_train is None else int(n_train)
    n_test = 200 if n_test is None else int(n_test)
    kb = knowledge_base(seed, n_train + n_test)
    rng = random.Random(f"search-questions-{seed}-{hops}")
    people = list(kb["people"])
    rng.shuffle(people)
    out = new_output_dir(out)
    for split, chosen in (("train", people[:n_train]), ("test", people[n_train:n_train + n_test])):
        rows = [{"id": f"{preset}-{split}-{i}", **question_row(kb, p, rng.choice(sorted(KINDS)), hops)}
                for i, p in enumerate(chosen)]
        pq.write_table(pa.Table.from_pylist(rows), out / f"{split}.parquet")
    with (out / CORPUS_FILE).open("w", encoding="utf-8") as f:
        for (subject, _), (doc_id, sentence) in kb["docs"].items():
            f.write(json.dumps({"id": doc_id, "contents": f"{subject}\n{sentence}"}) + "\n")
    return {"preset": preset, "hops": hops, "train": n_train, "test": n_test, "documents": len(kb["docs"]),
            "seed": seed}
