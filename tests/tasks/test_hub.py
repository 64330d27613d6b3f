"""Benchmark data from the Hugging Face Hub, offline: the production call
`datasets.load_dataset(repo, config, split=..., revision=SHA)` with HF_HUB_OFFLINE=1, served
from a Hugging Face cache these tests fill.

`hub_cache` builds a Hub-shaped repo folder (README configs, parquet files where the Hub repo
keeps them), lets `datasets` prepare it, and files the prepared copy where an online download
of that repo at that commit leaves it ($HF_HOME/datasets/<owner>___<name>/<config>/0.0.0/<SHA>/
<name>-<split>.arrow). podium then runs in a subprocess with HF_HOME there, HF_HUB_OFFLINE=1 and
no PODIUM_DATA_DIR, exactly as a user without the offline files runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from support import ADDER_POOL, DATA, needs_data, podium

from podium.errors import ConfigError
from podium.tasks import get_task
from podium.tasks.common import read_records
from podium.tasks.hub import HubSource
from podium.tasks.livecodebench import encode_tests
from podium.tasks.mmlu import subject_key
from podium.tasks.sources import AIME, GPQA, GSM8K, LIVECODEBENCH_REVISION, MMLU, aime24_rows

pytest.importorskip("datasets")

GSM8K_TEST = [
    {"question": "Ann has 3 apples and buys 4 more. How many?", "answer": "3+4=7\n#### 7"},
    {"question": "A shop sells 1,200 pens a day. How many in 2 days?",
     "answer": "1,200*2=<<1200*2=2400>>2400\n#### 2,400"},
    {"question": "Half of 9?", "answer": "9/2=4.5\n#### 4.5"},
]
GSM8K_TRAIN = [{"question": "2+2?", "answer": "#### 4"}]
MMLU_HUB = [  # cais/mmlu "all": subjects alphabetically, `answer` an index into `choices`
    {"question": "Find the degree of Q(sqrt 2) over Q.", "subject": "abstract_algebra",
     "choices": ["0", "4", "2", "6"], "answer": 2},
    {"question": "Which organelle makes ATP?", "subject": "high_school_biology",
     "choices": ["Ribosome", "Mitochondrion", "Golgi body", "Nucleus"], "answer": 1},
    {"question": "What do enzymes lower?", "subject": "high_school_biology",
     "choices": ["Activation energy", "Mass", "pH", "Heat"], "answer": 0},
]
MMLU_FILE = [  # the offline file: subjects in no order, letters, topics in words
    {"question": "Which organelle makes ATP?", "answer_a": "Ribosome",
     "answer_b": "Mitochondrion", "answer_c": "Golgi body", "answer_d": "Nucleus",
     "correct_answer": "B", "topic": "high school biology"},
    {"question": "Find the degree of Q(sqrt 2) over Q.", "answer_a": "0", "answer_b": "4",
     "answer_c": "2", "answer_d": "6", "correct_answer": "C", "topic": "abstract algebra"},
    {"question": "What do enzymes lower?", "answer_a": "Activation energy", "answer_b": "Mass",
     "answer_c": "pH", "answer_d": "Heat", "correct_answer": "A",
     "topic": "high school biology"},
]


LCB_ROWS = [{"question_title": "Sum", "question_content": "Print a+b.", "platform": "atcoder",
             "question_id": f"abc{k}_a", "contest_id": f"abc{k}", "contest_date": "2025-01-04",
             "starter_code": "", "difficulty": "easy", "metadata": "{}",
             "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n",
                                               "testtype": "stdin"}]),
             "private_test_cases": encode_tests([{"input": "2 2\n", "output": "4\n",
                                                  "testtype": "stdin"}])} for k in range(5)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def hub_cache(tmp_path):
    """publish(source, {split: rows}, revision=None): the rows in the HF cache under
    tmp_path/hf as `source.repo` at `revision` (default: the source's pinned commit)."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    home = tmp_path / "hf"

    def publish(source: HubSource, splits: dict[str, list[dict]],
                revision: str | None = None) -> Path:
        owner, name = source.repo.split("/")
        config = source.config or "default"
        repo = tmp_path / "repos" / owner / name  # the repo as the Hub holds it
        folder = f"{config}/" if source.config else "data/"
        data_files = []
        for split, rows in splits.items():
            file = repo / f"{folder}{split}-00000-of-00001.parquet"
            file.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(rows), file)
            data_files.append({"split": split, "path": f"{folder}{split}-*"})
        card = {"configs": [{"config_name": config, "data_files": data_files}]}
        (repo / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n")
        scratch = tmp_path / "prepare"
        datasets.load_dataset(str(repo), source.config, cache_dir=str(scratch))
        built = [p for p in scratch.glob(f"*/{config}/0.0.0/*") if p.is_dir()]
        assert len(built) == 1, built
        prepared = built[0]
        target = (home / "datasets" / f"{owner}___{prepared.parts[-4]}" / config / "0.0.0"
                  / (revision or source.revision or "main"))
        target.parent.mkdir(parents=True, exist_ok=True)
        prepared.rename(target)
        return home

    publish.home = home  # type: ignore[attr-defined]
    return publish


def offline_env(home: Path, data_dir: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGING_FACE"))}
    return {**env, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "PODIUM_DATA_DIR": data_dir}


LOAD = """
import json, sys
from dataclasses import asdict
from podium.errors import ConfigError
from podium.tasks import get_task
out = {}
for name, options in json.loads(sys.argv[1]):
    try:
        out[name] = [asdict(i) for i in get_task(name, **options).load(split="all")]
    except ConfigError as exc:
        out[name] = str(exc)
print(json.dumps(out))
"""


def load_in_subprocess(env: dict[str, str], *tasks: tuple[str, dict]) -> dict:
    """{task: [Item as dict] or the ConfigError's text}, loaded by a fresh process."""
    proc = subprocess.run([sys.executable, "-c", LOAD, json.dumps(tasks)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def local_items(name: str, data_dir: Path) -> list[dict]:
    return json.loads(json.dumps([asdict(i) for i in
                                  get_task(name, data_dir=data_dir).load(split="all")]))


def test_hub_rows_give_the_items_of_the_offline_files(hub_cache, tmp_path):
    """gsm8k (same schema), mmlu (choices + index vs letters + topic) and livecodebench (one
    file of the repo, fetched by huggingface_hub into its cache): the same ids, questions,
    golds and meta from the Hub as from --data-dir files."""
    hub_cache(GSM8K, {"train": GSM8K_TRAIN, "test": GSM8K_TEST})
    home = hub_cache(MMLU, {"test": MMLU_HUB})
    snapshot = (home / "hub" / "datasets--livecodebench--code_generation_lite" / "snapshots"
                / LIVECODEBENCH_REVISION)
    write_jsonl(snapshot / "test6.jsonl", LCB_ROWS)
    offline = tmp_path / "offline"
    write_jsonl(offline / "gsm8k" / "test.jsonl", GSM8K_TEST)
    write_jsonl(offline / "gsm8k" / "train.jsonl", GSM8K_TRAIN)
    write_jsonl(offline / "mmlu" / "test.jsonl", MMLU_FILE)
    write_jsonl(offline / "livecodebench" / "test6.jsonl", LCB_ROWS)

    hub = load_in_subprocess(offline_env(home), ("gsm8k", {}), ("mmlu", {}),
                             ("livecodebench", {}))

    assert hub["gsm8k"] == local_items("gsm8k", offline)
    assert [i["id"] for i in hub["gsm8k"]] == [
        "gsm8k/test/0", "gsm8k/test/1", "gsm8k/test/2", "gsm8k/train/0"]
    assert [i["gold"] for i in hub["gsm8k"]] == [7, 2400, 4.5, 4]
    assert hub["mmlu"] == local_items("mmlu", offline)
    assert [(i["id"], i["gold"]) for i in hub["mmlu"]] == [
        ("mmlu/abstract_algebra/0", "C"), ("mmlu/high_school_biology/0", "B"),
        ("mmlu/high_school_biology/1", "A")]
    assert hub["mmlu"][1]["meta"] == {"subject": "high school biology", "choices": [
        "Ribosome", "Mitochondrion", "Golgi body", "Nucleus"]}
    assert hub["livecodebench"] == local_items("livecodebench", offline)
    assert [i["id"] for i in hub["livecodebench"]] == [f"abc{k}_a" for k in range(5)]


def test_offline_files_win_over_the_hub_and_eval_runs_from_the_hub(hub_cache, tmp_path):
    """--data-dir / $PODIUM_DATA_DIR is read even when the cache holds the dataset; without
    it, `podium eval --task gsm8k` runs on the Hub copy."""
    home = hub_cache(GSM8K, {"train": GSM8K_TRAIN, "test": GSM8K_TEST})
    offline = tmp_path / "offline"
    write_jsonl(offline / "gsm8k" / "test.jsonl", [{"question": "1+1?", "answer": "#### 2"}])
    write_jsonl(offline / "gsm8k" / "train.jsonl", GSM8K_TRAIN)
    got = load_in_subprocess(offline_env(home, data_dir=str(offline)), ("gsm8k", {}))
    assert [i["question"] for i in got["gsm8k"]] == ["1+1?", "2+2?"]

    pool = tmp_path / "pool.toml"
    pool.write_text(ADDER_POOL + "\n[run]\ncache = false\n")
    out = tmp_path / "run"
    proc = podium("eval", "--task", "gsm8k", "--n", "2", "--repeats", "1", "--pool", str(pool),
                  "--system", "single:adder", "--out", str(out), env=offline_env(home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    test_ids = {f"gsm8k/test/{k}" for k in range(len(GSM8K_TEST))}
    assert len(records) == 2 and {r["item"] for r in records} <= test_ids


def test_without_network_or_cache_the_error_names_the_dataset_revision_and_fixes(tmp_path):
    got = load_in_subprocess(offline_env(tmp_path / "empty-hf"), ("gsm8k", {}), ("gpqa", {}))
    gsm8k, gpqa = got["gsm8k"], got["gpqa"]
    assert isinstance(gsm8k, str) and isinstance(gpqa, str)
    for text in (gsm8k, gpqa):
        assert "Hugging Face Hub" in text and "--data-dir" in text
        assert "PODIUM_DATA_DIR" in text and 'docs/evaluation.md, "Data"' in text
        assert "shared" not in text
    assert "openai/gsm8k" in gsm8k and GSM8K.revision in gsm8k  # type: ignore[operator]
    assert "gsm8k/test.jsonl" in gsm8k and "connect to the Hugging Face Hub" in gsm8k
    assert "Idavidrein/gpqa" in gpqa and GPQA.revision in gpqa  # type: ignore[operator]
    assert "hf auth login" in gpqa and "gpqa/gpqa_diamond.csv" in gpqa


def test_a_cached_copy_of_another_revision_is_refused(hub_cache):
    """Offline, `datasets` serves the newest cached copy whatever the revision: podium checks."""
    home = hub_cache(GSM8K, {"train": GSM8K_TRAIN, "test": GSM8K_TEST}, revision="0" * 40)
    text = load_in_subprocess(offline_env(home), ("gsm8k", {}))["gsm8k"]
    assert isinstance(text, str)
    assert "another revision" in text and GSM8K.revision in text  # type: ignore[operator]


def test_without_the_datasets_package_the_error_says_how_to_get_the_data(monkeypatch):
    monkeypatch.delenv("PODIUM_DATA_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(ConfigError) as err:
        get_task("mmlu").load()
    text = str(err.value)
    assert "`datasets` package is not installed" in text and "podium[eval]" in text
    assert "cais/mmlu" in text and "mmlu/test.jsonl" in text and "shared" not in text


def test_aime24_hub_rows_follow_the_offline_file_order():
    """The offline aime24 file lists problems by label sorted as text (I-1, I-10, ..., I-2)."""
    url = "https://artofproblemsolving.com/wiki/index.php/2024_AIME_{}_Problems/Problem_{}"
    rows = [{"id": 60 + k, "problem": f"{exam}-{n}", "answer": f"{k:03d}",
             "url": url.format(exam, n)}
            for k, (exam, n) in enumerate((e, n) for e in ("I", "II") for n in range(1, 16))]
    order = [r["question"] for r in aime24_rows(rows)]
    assert order[:8] == ["I-1", "I-10", "I-11", "I-12", "I-13", "I-14", "I-15", "I-2"]
    assert order[15:17] == ["II-1", "II-10"] and len(order) == 30
    assert AIME[2024].adapt is aime24_rows


@needs_data
def test_mmlu_topics_of_the_offline_file_are_the_hub_subjects_in_words():
    """The adapter writes a Hub subject as `subject.replace("_", " ")`: true of all 57."""
    topics = {row["topic"].strip() for row in read_records(DATA / "mmlu" / "test.jsonl")}
    assert len(topics) == 57
    assert all(subject_key(t).replace("_", " ") == t for t in topics)
