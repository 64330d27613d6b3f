"""Where each benchmark lives on the Hugging Face Hub, in one table: the repo, config, split,
the commit it is pinned to, and the adapter from Hub rows to the rows of the offline file (so a
task reads either source with one reader and gives the same ids, questions and golds).

Every revision is a commit SHA that public evaluation code pins or loads (lighteval,
inspect_evals and other harnesses). None is pinned where no such commit was found: those
results are not pinned, and docs/evaluation.md ("Data") says so.
"""

from __future__ import annotations

import re

from podium.tasks.hub import HubSource, Rows

_AOPS_LABEL = re.compile(r"AIME_(I+)_Problems/Problem_(\d+)")


def mmlu_rows(rows: Rows) -> Rows:
    """cais/mmlu (`question, subject, choices[4], answer` 0-3) as the offline file's rows
    (`question, answer_a..answer_d, correct_answer` A-D, `topic` in words)."""
    return [{"question": row["question"],
             **{f"answer_{c}": choice for c, choice in zip("abcd", row["choices"], strict=True)},
             "correct_answer": "ABCD"[int(row["answer"])],
             "topic": str(row["subject"]).replace("_", " ")} for row in rows]


def aime24_rows(rows: Rows) -> Rows:
    """HuggingFaceH4/aime_2024 (`problem, answer, url, ...`) as the offline file's rows, in its
    order: the AoPS problem labels sorted as text (I-1, I-10, ..., I-15, I-2, ..., II-9)."""
    labels = [_AOPS_LABEL.search(str(row.get("url") or "")) for row in rows]
    keys = [(m[1], m[2]) for m in labels if m is not None]
    if len(keys) == len(rows):
        rows = [row for _, row in sorted(zip(keys, rows, strict=True), key=lambda kr: kr[0])]
    return [{"question": row["problem"], "answer": str(row["answer"])} for row in rows]


def aime25_rows(rows: Rows) -> Rows:
    """math-ai/aime25 (`id, problem, answer`) as the offline file's rows, in problem order."""
    if all(str(row.get("id", "")).isdigit() for row in rows):
        rows = sorted(rows, key=lambda row: int(row["id"]))
    return [{"question": row["problem"], "answer": str(row["answer"])} for row in rows]


GSM8K = HubSource("openai/gsm8k", config="main", split="test",
                  revision="cc7b047b6e5bb11b4f1af84efc572db110a51b3c")
MATH500 = HubSource("HuggingFaceH4/MATH-500", split="test",
                    revision="6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be")
MMLU = HubSource("cais/mmlu", config="all", split="test",
                 revision="c30699e8356da336a370243923dbaf21066bb9fe", adapt=mmlu_rows)
AIME = {
    2024: HubSource("HuggingFaceH4/aime_2024", split="train",
                    revision="2fe88a2f1091d5048c0f36abc874fb997b3dd99a", adapt=aime24_rows),
    2025: HubSource("math-ai/aime25", split="test",
                    revision="563bb8404243c5f09de6ec262f2db674fe5bce9b", adapt=aime25_rows),
}
HUMANEVAL = HubSource("openai/openai_humaneval", config="openai_humaneval", split="test",
                      revision="7dce6050a7d6d172f3cc5c32aa97f52fa1a2e544")
BIGCODEBENCH = HubSource("bigcode/bigcodebench", split="v0.1.0_hf",
                         revision="b74c0d0bf70d2c0bc459be537895cca163007f1a")
LIVECODEBENCH_REVISION = "0fe84c3912ea0c4d4a78037083943e8f0c4dd505"
GPQA = HubSource("Idavidrein/gpqa", config="gpqa_diamond", split="train",
                 revision="633f5ee89ab8ad4522a9f850766b73f62147ffdd", gated=True)
RLPR = HubSource("openbmb/RLPR-Train-Dataset", split="train",
                 revision="922eeb37157ebce90c1ee8233cdf04f04fbad728")


def livecodebench(file: str) -> HubSource:
    """One release file of livecodebench/code_generation_lite (its loading script is not run)."""
    return HubSource("livecodebench/code_generation_lite", split="train",
                     revision=LIVECODEBENCH_REVISION, data_files=file)
