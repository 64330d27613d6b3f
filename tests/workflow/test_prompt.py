"""Tests for podium.workflow.prompt: the Conductor's messages, pool display and few-shots."""

from __future__ import annotations

import importlib.util
import re

import pytest

from podium.errors import ConfigError
from podium.workflow.prompt import (
    CROP_NOTE,
    DEFAULT_PROMPT,
    FEWSHOT_SETS,
    PROMPTS,
    PoolEntry,
    conductor_messages,
    format_examples,
    format_pool,
    get_prompt,
    recursion_messages,
)
from podium.workflow.types import Workflow

POOL = [
    PoolEntry(0, "gemini-2.5-pro", "strong generalist"),
    PoolEntry(1, "claude-sonnet-4", "careful reviewer"),
    PoolEntry(2, "gpt-5"),
]
QUESTION = "What is the smallest prime larger than 100? Put it in <answer> tags."
EXAMPLE_LISTS = re.compile(r"model_id\s*=\s*\[\s*\d")


def roles(messages: list[dict[str, str]]) -> list[str]:
    return [m["role"] for m in messages]


def test_registry_defaults() -> None:
    assert DEFAULT_PROMPT == "v1"
    assert DEFAULT_PROMPT in PROMPTS
    assert get_prompt("v1") is PROMPTS["v1"]
    assert {"ood", "none"} <= set(FEWSHOT_SETS)
    assert FEWSHOT_SETS["none"] == ()


def test_conductor_messages_layout() -> None:
    msgs = conductor_messages(QUESTION, POOL, max_steps=4)
    assert roles(msgs) == ["system", "user", "assistant"]
    user = msgs[1]["content"]
    assert QUESTION in user
    for line in format_pool(POOL).splitlines():
        assert line in user
    assert "at most 4 steps" in user
    assert msgs[0]["content"] == PROMPTS["v1"].system
    assert msgs[2]["content"] == PROMPTS["v1"].prefill
    # every template field is filled
    assert not re.search(r"\{(max_steps|examples|question|models)\}", user)


def test_order_of_template_blocks() -> None:
    user = conductor_messages(QUESTION, POOL)[1]["content"]
    fmt = user.index("access_list = [...]")
    example = user.index(FEWSHOT_SETS["ood"][0].question)
    question = user.index(QUESTION)
    models = user.index("Model id 0")
    assert fmt < example < question < models


def test_prefill_has_no_lists() -> None:
    prefill = PROMPTS["v1"].prefill
    assert "[" not in prefill and "model_id" not in prefill.lower()
    assert "subtask" in prefill.lower()


def test_question_with_braces_is_kept_verbatim() -> None:
    question = "Evaluate {x: 1}[x] and f(x) = {x}^2."
    assert question in conductor_messages(question, POOL)[1]["content"]


def test_masked_display_hides_names() -> None:
    text = format_pool(POOL)
    assert text.splitlines() == ["Model id 0", "Model id 1", "Model id 2"]
    user = conductor_messages(QUESTION, POOL)[1]["content"]
    for entry in POOL:
        assert entry.name not in user
    assert "strong generalist" not in user


def test_names_and_descriptions_displays() -> None:
    assert format_pool(POOL, "names").splitlines() == [
        "Model id 0: gemini-2.5-pro",
        "Model id 1: claude-sonnet-4",
        "Model id 2: gpt-5",
    ]
    assert format_pool(POOL, "descriptions").splitlines() == [
        "Model id 0: gemini-2.5-pro - strong generalist",
        "Model id 1: claude-sonnet-4 - careful reviewer",
        "Model id 2: gpt-5",
    ]
    user = conductor_messages(QUESTION, POOL, display="descriptions")[1]["content"]
    assert "Model id 1: claude-sonnet-4 - careful reviewer" in user


def test_subpool_keeps_its_own_ids() -> None:
    pool = [PoolEntry(0), PoolEntry(2), PoolEntry(5)]
    assert format_pool(pool).splitlines() == ["Model id 0", "Model id 2", "Model id 5"]


def test_bad_pools_and_displays() -> None:
    with pytest.raises(ConfigError):
        format_pool([])
    with pytest.raises(ConfigError):
        format_pool([PoolEntry(1), PoolEntry(1)])
    with pytest.raises(ConfigError, match="masked"):
        format_pool(POOL, "sizes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        conductor_messages(QUESTION, POOL, max_steps=0)


def test_none_fewshots_contain_no_example_lists() -> None:
    assert format_examples("none") == ""
    user = conductor_messages(QUESTION, POOL, fewshots="none")[1]["content"]
    assert not EXAMPLE_LISTS.search(user)
    assert 'subtasks = ["' not in user
    for ex in FEWSHOT_SETS["ood"]:
        assert ex.question not in user


def test_ood_fewshots_composition() -> None:
    ood = FEWSHOT_SETS["ood"]
    assert len(ood) == 4
    workers = [[s.worker for s in ex.workflow.steps] for ex in ood]
    access = [[s.access_json() for s in ex.workflow.steps] for ex in ood]
    assert workers == [[0, 2, 0], [1, 0, 2], [6, 5, 3, 2], [3, 4, 5]]
    assert access == [
        [[], "all", "all"],
        [[], [], "all"],
        [[], [], "all", "all"],
        [[], "all", "all"],
    ]
    block = format_examples("ood")
    assert len(block) < 2500
    for ex in ood:
        assert ex.question in block and ex.plan in block
        assert ex.workflow.to_text() in block
        assert 1 <= ex.plan.count(". ") + 1 <= 4
    assert len(EXAMPLE_LISTS.findall(block)) == 4


def test_ood_fewshots_are_not_from_evaluated_benchmarks() -> None:
    # podium's own examples: only the two sets exist and their questions name no benchmark
    assert set(FEWSHOT_SETS) == {"ood", "none"}
    banned = ("gsm8k", "mmlu", "aime", "gpqa", "humaneval", "bigcodebench", "livecodebench")
    for ex in FEWSHOT_SETS["ood"]:
        assert not any(name in ex.question.lower() for name in banned)


def test_ood_examples_parse_back() -> None:
    if importlib.util.find_spec("podium.workflow.parse") is None:
        pytest.skip("podium.workflow.parse is not written yet")
    parse = pytest.importorskip("podium.workflow.parse")
    for ex in FEWSHOT_SETS["ood"]:
        text = f"{ex.plan}\n{ex.workflow.to_text()}"
        result = parse.parse_workflow(text, num_workers=7, max_steps=5)
        parsed = getattr(result, "workflow", result)
        assert isinstance(parsed, Workflow)
        assert parsed == ex.workflow


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="v1"):
        get_prompt("v9")
    with pytest.raises(ConfigError, match="v1"):
        conductor_messages(QUESTION, POOL, prompt="v9")
    with pytest.raises(ConfigError) as info:
        format_examples("mixed-nope")
    assert "ood" in str(info.value) and "none" in str(info.value)
    with pytest.raises(ConfigError, match="ood"):
        conductor_messages(QUESTION, POOL, fewshots="mixed-nope")


COMPLETION = (
    " First a solver, then a checker.\n"
    'model_id = [0, 1]\nsubtasks = ["Solve it.", "Check it."]\naccess_list = [[], "all"]'
)


def test_recursion_messages_layout() -> None:
    root = conductor_messages(QUESTION, POOL)
    answer = "The next prime is <answer>101</answer>"
    msgs = recursion_messages(root, COMPLETION, answer)
    assert roles(msgs) == ["system", "user", "assistant", "user", "assistant"]
    assert msgs[:2] == root[:2]
    assert msgs[2]["content"] == root[2]["content"] + COMPLETION
    assert answer in msgs[3]["content"]
    assert "model_id = []" in msgs[3]["content"]
    assert msgs[4]["content"] == PROMPTS["v1"].recursion_prefill
    # the previous round's messages are not modified
    assert roles(root) == ["system", "user", "assistant"]
    assert root[2]["content"] == PROMPTS["v1"].prefill


def test_recursion_templates() -> None:
    recursion = PROMPTS["v1"].recursion
    assert {"v0", "v1", "v2"} <= set(recursion)
    assert "{answer}" in recursion["v0"] and "{workflow}" not in recursion["v0"]
    assert "{workflow}" in recursion["v2"]
    # v0 shows only the keep form; v1 and v2 add the examples
    assert len(EXAMPLE_LISTS.findall(recursion["v0"])) == 0
    assert len(EXAMPLE_LISTS.findall(recursion["v1"])) == 2
    assert '"all"' in recursion["v1"]


def test_recursion_v2_shows_the_workflow() -> None:
    root = conductor_messages(QUESTION, POOL)
    wf = Workflow.of([(0, "Solve it.", ()), (1, "Check it.", "all")]).to_text()
    msgs = recursion_messages(root, COMPLETION, "101", template="v2", workflow_text=wf)
    assert wf in msgs[3]["content"]
    assert "101" in msgs[3]["content"]
    with pytest.raises(ConfigError, match="workflow_text"):
        recursion_messages(root, COMPLETION, "101", template="v2")
    with pytest.raises(ConfigError, match="v0"):
        recursion_messages(root, COMPLETION, "101", template="v7")


def test_long_answer_is_cropped() -> None:
    root = conductor_messages(QUESTION, POOL)
    answer = "a" * 3000 + "b" * 3000 + "<answer>101</answer>"
    msgs = recursion_messages(root, COMPLETION, answer, max_answer_chars=1000)
    user = msgs[3]["content"]
    assert CROP_NOTE in user
    assert answer not in user
    assert "a" * 500 in user and "<answer>101</answer>" in user
    assert user.count("a") + user.count("b") < 1100
    full = recursion_messages(root, COMPLETION, answer, max_answer_chars=None)
    assert answer in full[3]["content"] and CROP_NOTE not in full[3]["content"]


def test_recursion_needs_an_open_assistant_turn() -> None:
    root = conductor_messages(QUESTION, POOL)
    with pytest.raises(ValueError):
        recursion_messages(root[:2], COMPLETION, "101")
