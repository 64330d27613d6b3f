"""Benchmark tasks: loading, ids, splits, question formats and grading (code through the real
sandbox) for every offline dataset, plus hand-made LiveCodeBench, GPQA, RLPR and generic files.

Tests that read the offline benchmark files skip, saying so, when no offline folder is given ($PODIUM_DATA_DIR; tests/conftest.py sets it).
"""

from __future__ import annotations

import asyncio
import csv
import importlib
import importlib.util
import json
import random

import pytest
from support import DATA, needs_data

from podium.errors import ConfigError
from podium.tasks import TASKS, Task, get_task
from podium.tasks.common import LETTERS, read_records, sample, split_indices

OFFLINE = {  # name -> items in split "all"
    "gsm8k": 1319 + 7473,
    "math500": 500,
    "mmlu": 14042,
    "aime24": 30,
    "aime25": 30,
    "humaneval": 164,
    "bigcodebench": 1140,
    "bigcodebench-instruct": 1140,
}


def run(coro):
    return asyncio.run(coro)


async def grade_all(task, pairs):
    return await asyncio.gather(*(task.grade(item, response) for item, response in pairs))


def scoring(module: str):
    """podium's own grader modules are imported, never skipped: a broken one fails here."""
    return importlib.import_module(f"podium.scoring.{module}")


_TASKS: dict[str, Task] = {}


def task(name: str) -> Task:
    """One shared instance per registry name (items are cached on it)."""
    if name not in _TASKS:
        _TASKS[name] = get_task(name)
    return _TASKS[name]


# ----------------------------------------------------------------------------- common
def test_split_indices_reference_sizes_and_cover():
    for n, sizes in ((500, (300, 100, 100)), (400, (240, 80, 80)), (7, (5, 1, 1)), (0, (0, 0, 0))):
        parts = [split_indices(n, s) for s in ("train", "valid", "test")]
        assert tuple(map(len, parts)) == sizes
        assert sorted(i for part in parts for i in part) == list(range(n))
        assert split_indices(n, "all") == list(range(n))
    order = list(range(500))
    random.Random(42).shuffle(order)
    assert split_indices(500, "test") == order[:100]
    assert split_indices(500, "valid") == order[100:200]
    assert split_indices(500, "test", seed=1) != split_indices(500, "test")
    with pytest.raises(ConfigError, match="unknown split"):
        split_indices(10, "holdout")


def test_sample_is_seeded():
    items = list(range(50))
    assert sample(items, None, 3) == items
    assert sample(items, 10, 3) == sample(items, 10, 3)
    assert sample(items, 10, 3) != sample(items, 10, 4)
    assert set(sample(items, 10, 3)) <= set(items) and len(sample(items, 100, 0)) == 50


def test_read_records_formats(tmp_path):
    rows = [{"question": "q1", "answer": "1"}, {"question": "q,2", "answer": "2"}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "a.json").write_text(json.dumps(rows))
    with open(tmp_path / "a.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, ["question", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    for name in ("a.jsonl", "a.json", "a.csv"):
        assert read_records(tmp_path / name) == rows
    with pytest.raises(ConfigError, match="does not exist"):
        read_records(tmp_path / "missing.jsonl")


# ----------------------------------------------------------------------------- registry
def test_registry_names_and_errors(tmp_path):
    assert set(TASKS) == {"gsm8k", "math500", "mmlu", "aime24", "aime25", "humaneval",
                          "bigcodebench", "bigcodebench-instruct", "livecodebench", "gpqa",
                          "rlpr", "gym"}
    for name in TASKS:
        built = get_task(name)
        assert isinstance(built, Task) and built.name == name
    with pytest.raises(ConfigError, match="known tasks: gsm8k"):
        get_task("gsm9k")
    with pytest.raises(ConfigError, match="no option"):
        get_task("math500", gradng="legacy")
    with pytest.raises(ConfigError, match="grading"):
        get_task("math500", grading="fuzzy")
    for name in ("livecodebench", "gpqa", "rlpr"):  # a data folder without their files
        with pytest.raises(ConfigError, match="path="):
            get_task(name, data_dir=tmp_path).load()


# ----------------------------------------------------------------------------- offline data
@needs_data
@pytest.mark.parametrize("name", list(OFFLINE))
def test_offline_task_loads_with_stable_unique_ids(name):
    first = task(name).load(split="all")
    again = get_task(name).load(split="all")  # a fresh instance reads the file again
    assert len(first) == OFFLINE[name]
    ids = [item.id for item in first]
    assert len(set(ids)) == len(ids)
    assert ids == [item.id for item in again]
    assert [item.gold for item in first[:20]] == [item.gold for item in again[:20]]
    subset = task(name).load(n=5, seed=7)
    assert [i.id for i in subset] == [i.id for i in get_task(name).load(n=5, seed=7)]
    assert [i.id for i in subset] != [i.id for i in task(name).load(n=5, seed=8)]


@needs_data
@pytest.mark.parametrize("name", list(OFFLINE))
def test_offline_format_shows_question_and_tags(name):
    for item in task(name).load(n=3, seed=1):
        text = task(name).format(item)
        assert item.question.strip() in text
        assert "<answer>" in text and "<idea>" in text
        assert text.rstrip().endswith("<answer></answer>.")


@needs_data
def test_math500_holdout_splits():
    parts = {s: [i.id for i in task("math500").load(split=s)] for s in ("train", "valid", "test")}
    assert {s: len(v) for s, v in parts.items()} == {"train": 300, "valid": 100, "test": 100}
    all_ids = [i.id for i in task("math500").load(split="all")]
    assert sorted(sum(parts.values(), [])) == sorted(all_ids)
    assert parts["test"] == [i.id for i in get_task("math500").load(split="test")]
    order = split_indices(500, "test")
    assert parts["test"] == [all_ids[i] for i in order]


@needs_data
def test_gsm8k_files_are_the_splits_and_golds_are_numbers():
    gsm = task("gsm8k")
    test, train = gsm.load(split="test"), gsm.load(split="train")
    assert (len(test), len(train)) == (1319, 7473)
    assert not {i.id for i in test} & {i.id for i in train}
    assert test[0].gold == 18 and all(isinstance(i.gold, int) for i in test + train)
    comma = next(i for i in test if "#### 2,125" in i.meta["solution"])
    assert comma.gold == 2125
    with pytest.raises(ConfigError, match="split"):
        gsm.load(split="valid")


@needs_data
def test_whole_file_tasks_have_only_a_test_split():
    for name in ("aime24", "humaneval", "bigcodebench"):
        assert [i.id for i in task(name).load()] == [i.id for i in task(name).load(split="all")]
        with pytest.raises(ConfigError, match="split"):
            task(name).load(split="train")


@needs_data
def test_mmlu_subjects_and_paper_subset():
    mmlu = task("mmlu")
    items = mmlu.load()
    subjects = [i.id.split("/")[1] for i in items]
    assert subjects == sorted(subjects)  # cais/mmlu "all" order
    dev = {p.name.removesuffix("_dev.csv") for p in (DATA / "mmlu" / "dev").glob("*_dev.csv")}
    assert set(subjects) == dev and len(dev) == 57
    paper = mmlu.load(split="paper_test")
    assert len(paper) == 1531 and len({i.id for i in paper}) == 1531
    assert {i.id for i in paper} <= {i.id for i in items}
    order = list(range(len(items)))
    random.Random(42).shuffle(order)
    assert [i.id for i in paper] == [items[k].id for k in order[:1531]]
    assert [i.id for i in paper] == [i.id for i in get_task("mmlu").load(split="paper_test")]
    text = mmlu.format(items[0])
    assert "abstract algebra" in text and "\nA. " in text and "\nD. " in text


@needs_data
def test_aime_golds_are_integers():
    a24, a25 = task("aime24").load(), task("aime25").load()
    padded = next(i for i in a24 if i.meta["answer_text"] == "025")
    assert padded.gold == 25
    assert a25[0].gold == 70 and a25[0].meta["answer_text"] == "70"
    assert all(0 <= i.gold <= 999 for i in a24 + a25)


@needs_data
def test_bigcodebench_missing_libs_are_skipped_not_dropped(tmp_path):
    bcb = task("bigcodebench")
    items = bcb.load()
    assert len(items) == 1140
    first = items[0]
    assert first.id == "BigCodeBench/0" and first.meta["libs"] == ["random", "itertools"]
    assert bcb.skip_reason(first) is None and first.meta["missing_libs"] == []
    missing = [i for i in items if i.meta["missing_libs"]]
    for item in missing[:20]:
        reason = bcb.skip_reason(item)
        assert reason and all(lib in reason for lib in item.meta["missing_libs"])
    sk = next((i for i in missing if "sklearn" in i.meta["missing_libs"]), None)
    if sk is not None:
        assert "scikit-learn" in bcb.skip_reason(sk)
    # `libs` is incomplete: BigCodeBench/90 lists math and numpy, its tests import pandas
    b90 = next(i for i in items if i.id == "BigCodeBench/90")
    assert b90.meta["libs"] == ["math", "numpy"]
    if importlib.util.find_spec("pandas") is None:
        assert "pandas" in bcb.skip_reason(b90)
    subset = tmp_path / "hard.txt"
    subset.write_text("BigCodeBench/1\nBigCodeBench/25\n")
    assert [i.id for i in get_task("bigcodebench", subset=subset).load()] == [
        "BigCodeBench/1", "BigCodeBench/25"]
    subset.write_text("BigCodeBench/99999\n")
    with pytest.raises(ConfigError, match="subset"):
        get_task("bigcodebench", subset=subset).load()
    instruct = task("bigcodebench-instruct")
    assert instruct.load()[0].question.startswith("Calculates the average")
    assert "def task_func" in bcb.format(first)


# ----------------------------------------------------------------------------- grading
@needs_data
def test_gsm8k_and_aime_grading():
    scoring("numeric")
    for name in ("gsm8k", "aime24", "aime25"):
        t = task(name)
        items = t.load(n=4, seed=0)
        pairs = [(i, f"<idea>x</idea><answer>{i.gold}</answer>") for i in items]
        pairs += [(i, f"<answer>{i.gold + 1}</answer>") for i in items]
        pairs += [(items[0], f"The answer is {items[0].gold}."), (items[0], None)]
        grades = run(grade_all(t, pairs))
        assert [g.correct for g in grades] == [True] * 4 + [False] * 6, name
    padded = next(i for i in task("aime24").load() if i.meta["answer_text"] == "025")
    grades = run(grade_all(task("aime24"), [(padded, "<answer>025</answer>"),
                                            (padded, "<answer>25</answer>")]))
    assert all(g.correct for g in grades)


@needs_data
@pytest.mark.parametrize("legacy", [False, True])
def test_mmlu_grading(legacy):
    scoring("choice")
    t = get_task("mmlu", legacy=legacy)
    items = t.load(split="paper_test", n=6, seed=0)
    other = {i.id: next(c for c in LETTERS if c != i.gold) for i in items}
    pairs = [(i, f"<answer>{i.gold}</answer>") for i in items]
    pairs += [(i, f"<answer>{other[i.id]}</answer>") for i in items]
    pairs.append((items[0], f"The answer is {items[0].gold}."))  # no tag scores 0 (§7.2)
    grades = run(grade_all(t, pairs))
    assert [g.correct for g in grades] == [True] * 6 + [False] * 7


@needs_data
@pytest.mark.parametrize("grading", ["symbolic", "legacy"])
def test_math500_grading(grading):
    scoring("math")
    t = get_task("math500", grading=grading)
    try:
        items = t.load(n=5, seed=0)
        pairs = [(i, f"<idea>work</idea><answer>{i.gold}</answer>") for i in items]
        pairs += [(i, "<answer>\\frac{1}{98765}</answer>") for i in items]
        pairs.append((items[0], "no tags"))
        grades = run(grade_all(t, pairs))
        assert [g.correct for g in grades] == [True] * 5 + [False] * 6
        assert grades[-1].reason == "no_answer"
    finally:
        t.close()
        t.close()  # idempotent


@needs_data
def test_humaneval_canonical_solutions_pass_in_the_sandbox():
    scoring("code")
    t = task("humaneval")
    items = [i for i in t.load() if i.id in ("HumanEval/0", "HumanEval/2", "HumanEval/12")]
    assert len(items) == 3
    canonical = t.items()[0]
    body = canonical.gold[len(canonical.meta["problem"]["prompt"]):]
    pairs = [(i, f"<idea>ok</idea><answer>\n{i.gold}\n</answer>") for i in items]
    pairs.append((canonical, f"<answer>```python\n{canonical.gold}```</answer>"))  # fenced
    pairs.append((canonical, f"<answer>{body}</answer>"))  # the body alone
    pairs += [(i, "<answer>pass</answer>") for i in items]
    pairs.append((items[0], "no answer tag"))
    grades = run(grade_all(t, pairs))
    assert [g.correct for g in grades] == [True] * 5 + [False] * 4, grades


@needs_data
def test_bigcodebench_canonical_solution_passes_in_the_sandbox():
    scoring("code")
    t = task("bigcodebench")
    items = {i.id: i for i in t.load()}
    quick = [items["BigCodeBench/1"], items["BigCodeBench/25"]]  # stdlib only, well under 1 s
    assert all(t.skip_reason(i) is None for i in quick)
    wrong = "def task_func(*args, **kwargs):\n    return None"
    pairs = [(i, f"<answer>{i.gold}</answer>") for i in quick]
    pairs += [(i, f"<answer>{wrong}</answer>") for i in quick]
    pairs.append((quick[0], "no answer tag"))
    grades = run(grade_all(t, pairs))
    assert [g.correct for g in grades] == [True, True, False, False, False], grades


# ----------------------------------------------------------------------------- LiveCodeBench
def lcb_file(tmp_path):
    from podium.tasks.livecodebench import encode_tests

    def tests(pairs, kind):
        return [{"input": i, "output": o, "testtype": kind} for i, o in pairs]

    rows = [
        {"question_title": "A+B", "question_content": "Read two integers and print their sum.",
         "platform": "atcoder", "question_id": "abc000_a", "contest_id": "abc000",
         "contest_date": "2023-05-01T00:00:00", "starter_code": "", "difficulty": "easy",
         "public_test_cases": json.dumps(tests([("1 2\n", "3\n")], "stdin")),
         "private_test_cases": encode_tests(tests([("10 -3\n", "7\n"),
                                                   ("1000000000 1000000000\n", "2000000000\n")],
                                                  "stdin")),
         "metadata": "{}"},
        {"question_title": "Max plus k",
         "question_content": "Given nums and k, return the largest element of nums plus k.",
         "platform": "leetcode", "question_id": "9001", "contest_id": "weekly-1",
         "contest_date": "2023-05-02T00:00:00",
         "starter_code": "class Solution:\n    def maxPlus(self, nums: List[int], k: int) -> int:\n"
                         "        ",
         "difficulty": "easy",
         "public_test_cases": json.dumps(tests([("[1, 5, 3]\n2", "7")], "functional")),
         "private_test_cases": json.dumps(tests([("[-4]\n0", "-4"), ("[2, 9]\n-9", "0")],
                                                "functional")),
         "metadata": json.dumps({"func_name": "maxPlus"})},
    ]
    path = tmp_path / "lcb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_livecodebench_decodes_both_test_forms_and_formats(tmp_path):
    from podium.tasks.livecodebench import decode_tests, encode_tests

    sample_tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_tests(encode_tests(sample_tests)) == sample_tests
    assert decode_tests(json.dumps(sample_tests)) == sample_tests
    t = get_task("livecodebench", path=lcb_file(tmp_path))
    stdin_item, fn_item = t.load(split="all")
    assert (stdin_item.id, fn_item.id) == ("abc000_a", "9001")
    assert len(t.tests(stdin_item)) == 3 and len(t.tests(fn_item)) == 3
    assert fn_item.meta["func_name"] == "maxPlus"
    text = t.format(stdin_item)
    assert stdin_item.question in text and "standard input" in text and "<answer>" in text
    text = t.format(fn_item)
    assert "class Solution" in text and "`maxPlus`" in text and "def maxPlus(self" in text
    assert {len(t.load(split=s)) for s in ("train", "valid", "test")} <= {0, 1, 2}


def test_livecodebench_grading_needs_every_public_and_private_test(tmp_path):
    scoring("code")
    t = get_task("livecodebench", path=lcb_file(tmp_path))
    stdin_item, fn_item = t.load(split="all")
    add = "a, b = map(int, input().split())\nprint(a + b)"
    only_public = "print(3)"  # passes the public test, fails the compressed private ones
    max_plus = ("class Solution:\n    def maxPlus(self, nums: List[int], k: int) -> int:\n"
                "        return max(nums) + k")
    first_plus = ("class Solution:\n    def maxPlus(self, nums, k):\n"
                  "        return nums[1] + k if len(nums) > 2 else 0")
    pairs = [(stdin_item, f"<answer>{add}</answer>"),
             (stdin_item, f"<answer>\n```python\n{add}\n```\n</answer>"),
             (fn_item, f"<answer>{max_plus}</answer>"),
             (stdin_item, f"<answer>{only_public}</answer>"),
             (fn_item, f"<answer>{first_plus}</answer>"),
             (fn_item, "```python\nclass Solution: pass\n```")]
    grades = run(grade_all(t, pairs))
    assert [g.correct for g in grades] == [True, True, True, False, False, False], grades
    assert grades[0].extracted == add  # the harness's import header is not reported

    # D11: the reference's substring screen rejects `re.compile(` (a false positive)
    with_re = "import re\nnums = re.compile(r'-?\\d+')\nprint(sum(map(int, nums.findall(input()))))"
    legacy = get_task("livecodebench", path=lcb_file(tmp_path), legacy_blacklist=True)
    fixed = run(t.grade(stdin_item, f"<answer>{with_re}</answer>"))
    screened = run(legacy.grade(stdin_item, f"<answer>{with_re}</answer>"))
    assert fixed.correct and not screened.correct and screened.reason == "legacy_blacklist"


def test_livecodebench_runs_the_answer_after_one_import_header(tmp_path, monkeypatch):
    code = scoring("code")
    t = get_task("livecodebench", path=lcb_file(tmp_path))
    stdin_item, fn_item = t.load(split="all")
    programs = []
    real_run = code.arun_python

    async def capture(program, **kwargs):  # the harness sends the answer as solution.py
        programs.append(kwargs.get("files", {}).get("solution.py", program))
        return await real_run(program, **kwargs)

    monkeypatch.setattr(code, "arun_python", capture)
    add = "a, b = map(int, input().split())\nprint(a + b)"
    max_plus = ("class Solution:\n    def maxPlus(self, nums: List[int], k: int) -> int:\n"
                "        return max(nums) + k")
    grades = run(grade_all(t, [(stdin_item, f"<answer>{add}</answer>"),
                               (fn_item, f"<answer>{max_plus}</answer>")]))
    assert [g.correct for g in grades] == [True, True], grades
    assert len(programs) == 4  # three stdin tests, one harness run for the three calls
    for program in programs:
        assert program.count("sys.setrecursionlimit(50000)") == 1, program
        assert program.count("from heapq import *") == 1, program


def test_livecodebench_future_import_and_unimported_names_pass(tmp_path):
    scoring("code")
    t = get_task("livecodebench", path=lcb_file(tmp_path))
    _, fn_item = t.load(split="all")
    answer = ("from __future__ import annotations\n\n"
              "class Solution:\n"
              "    def maxPlus(self, nums: List[int], k: int) -> int:\n"
              "        heap = [-n for n in nums]\n"
              "        heapq.heapify(heap)\n"
              "        return -heappop(heap) + k\n")
    grade = run(t.grade(fn_item, f"<answer>\n{answer}</answer>"))
    assert grade.correct, grade
    assert grade.extracted.startswith("from __future__ import annotations")


# ----------------------------------------------------------------------------- GPQA
def gpqa_file(tmp_path):
    path = tmp_path / "gpqa_diamond.csv"
    header = ["Pre-Revision Question", "Question", "Correct Answer", "Incorrect Answer 1",
              "Incorrect Answer 2", "Incorrect Answer 3", "Record ID", "High-level domain",
              "Subdomain"]
    rows = [["old", "Which particle carries the electromagnetic force?", " Photon\n", "Gluon",
             "W boson", "Graviton", "recA1", "Physics", "Particle physics"],
            ["old", "What is the pH of pure water at 25 C?\nAssume ideal behaviour.", "7", "1",
             "14", "0", "recB2", "Chemistry", "Physical chemistry"],
            ["old", "Which organelle makes ATP?", "Mitochondrion", "Ribosome", "Golgi body",
             "Lysosome", "recC3", "Biology", "Cell biology"]]
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_gpqa_shuffle_is_seeded_and_gold_tracks_the_correct_answer(tmp_path):
    path = gpqa_file(tmp_path)
    correct = {"recA1": "Photon", "recB2": "7", "recC3": "Mitochondrion"}
    by_seed = {}
    for seed in (0, 1):
        items = get_task("gpqa", path=path, choice_seed=seed).load()
        again = get_task("gpqa", path=path, choice_seed=seed).load()
        assert [i.meta["choices"] for i in items] == [i.meta["choices"] for i in again]
        assert [i.id for i in items] == ["recA1", "recB2", "recC3"]
        for item in items:
            assert item.meta["choices"][LETTERS.index(item.gold)] == correct[item.id]
            assert sorted(item.meta["choices"]) == sorted(
                {"recA1": ["Photon", "Gluon", "W boson", "Graviton"],
                 "recB2": ["7", "1", "14", "0"],
                 "recC3": ["Mitochondrion", "Ribosome", "Golgi body", "Lysosome"]}[item.id])
        by_seed[seed] = [i.meta["choices"] for i in items]
    assert by_seed[0] != by_seed[1]
    item = get_task("gpqa", path=path).load()[1]
    text = get_task("gpqa", path=path).format(item)
    assert item.question in text and "\nA. " in text and "<answer>" in text


def test_gpqa_grading(tmp_path):
    scoring("choice")
    t = get_task("gpqa", path=gpqa_file(tmp_path))
    items = t.load()
    pairs = [(i, f"<answer>{i.gold}</answer>") for i in items]
    pairs += [(i, f"<answer>{next(c for c in LETTERS if c != i.gold)}</answer>") for i in items]
    assert [g.correct for g in run(grade_all(t, pairs))] == [True] * 3 + [False] * 3


# ----------------------------------------------------------------------------- RLPR
def rlpr_file(tmp_path):
    def row(question, truth, ability="physics"):
        return {"data_source": "WebInstruct-verified",
                "prompt": [{"role": "system", "content": "You are a helpful assistant."},
                           {"role": "user", "content": question}],
                "ability": ability,
                "reward_model": {"ground_truth": truth, "style": "rule"},
                "extra_info": {"index": 0}}

    rows = [row("A car travels 100 m in 20 s. What is its speed?", "5 m/s"),
            row("What fraction of 80 is 20?", "0.25", ability="math"),
            row("Describe the whole Krebs cycle.", "a long answer that is over thirty chars"),
            {"question": "What is the capital of France?", "answer": "Paris",
             "ability": "geography"},
            row("How many moles are in 36 g of water?", "2")]
    path = tmp_path / "rlpr.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rlpr_drops_long_ground_truths_and_formats(tmp_path):
    t = get_task("rlpr", path=rlpr_file(tmp_path))
    items = t.load(split="all")
    assert [i.id for i in items] == ["rlpr/0", "rlpr/1", "rlpr/3", "rlpr/4"]
    assert [i.gold for i in items] == ["5 m/s", "0.25", "Paris", "2"]
    text = t.format(items[0])
    assert text.startswith("Subject: physics") and items[0].question in text
    assert "You are a helpful assistant" not in text and "<answer>" in text
    assert "Subject: geography" in t.format(items[2])
    parts = [t.load(split=s) for s in ("train", "valid", "test")]
    assert sorted(i.id for p in parts for i in p) == sorted(i.id for i in items)
    assert t.load(split="paper_test") == t.load(split="test")


def test_rlpr_grading(tmp_path):
    scoring("numeric")
    t = get_task("rlpr", path=rlpr_file(tmp_path))
    items = t.load(split="all")
    pairs = [(i, f"<answer>{i.gold}</answer>") for i in items]
    pairs += [(items[1], "<answer>0.75</answer>"), (items[2], "<answer>Lyon</answer>")]
    assert [g.correct for g in run(grade_all(t, pairs))] == [True] * 4 + [False] * 2


# ----------------------------------------------------------------------------- generic
def test_generic_task_from_a_file(tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [{"id": "x1", "question": "Name the largest planet.", "answer": "Jupiter"},
            {"id": "x2", "question": "Name the red planet.", "answer": "Mars",
             "options": ["Venus", "Mars", "Earth"], "letter": "B"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = get_task(f"jsonl:{path}")
    assert t.name == "mine"
    items = t.load()
    assert [i.id for i in items] == ["x1", "x2"] and t.load(split="all") == items
    assert items[0].question in t.format(items[0]) and "<answer>" in t.format(items[0])
    held = get_task(f"jsonl:{path}", holdout_splits=True)
    assert sum(len(held.load(split=s)) for s in ("train", "valid", "test")) == 2
    grades = run(grade_all(t, [(items[0], "<answer> Jupiter </answer>"),
                               (items[0], "<answer>Saturn</answer>")]))
    assert [g.correct for g in grades] == [True, False]
    with pytest.raises(ConfigError, match="grader"):
        get_task(f"jsonl:{path}", grader="vibes")
    with pytest.raises(ConfigError, match="no field"):
        get_task(f"jsonl:{path}", answer_field="solution").load()


def test_generic_choice_task(tmp_path):
    scoring("choice")
    path = tmp_path / "mc.jsonl"
    row = {"question": "Name the red planet.", "options": ["Venus", "Mars", "Earth"],
           "letter": "B"}
    path.write_text(json.dumps(row) + "\n")
    t = get_task(f"jsonl:{path}", grader="choice", answer_field="letter",
                 choices_field="options")
    item = t.load()[0]
    assert "B. Mars" in t.format(item) and item.id == "mc/0"
    grades = run(grade_all(t, [(item, "<answer>B</answer>"), (item, "<answer>A</answer>")]))
    assert [g.correct for g in grades] == [True, False]
