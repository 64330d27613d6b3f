"""Tests for podium.conductor.prompt: the Conductor's messages, pool display and few-shots."""

from __future__ import annotations

import hashlib
import re

import pytest

from podium.conductor.parse import parse_workflow
from podium.conductor.prompt import (
    CROP_NOTE,
    DEFAULT_MAX_PROMPT_TOKENS,
    DEFAULT_PROMPT,
    FEWSHOT_SETS,
    MESSAGE_OVERHEAD_TOKENS,
    MIN_ANSWER_CHARS,
    PROMPTS,
    PoolEntry,
    conductor_messages,
    estimate_messages_tokens,
    estimate_tokens,
    fit_example_ids,
    format_examples,
    format_pool,
    get_prompt,
    recursion_messages,
)
from podium.errors import ConfigError
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
    access = [[s.access for s in ex.workflow.steps] for ex in ood]
    assert workers == [[0, 2, 0], [1, 0, 2], [6, 5, 3, 2], [3, 4, 5]]
    assert access == [
        [(), "all", "all"],
        [(), (), "all"],
        [(), (), "all", "all"],
        [(), "all", "all"],
    ]
    block = format_examples("ood")
    assert len(block) < 2500
    for ex in ood:
        assert ex.question in block and ex.plan in block
        assert ex.workflow.to_text() in block
        assert 1 <= ex.plan.count(". ") + 1 <= 4
    assert len(EXAMPLE_LISTS.findall(block)) == 4


def test_ood_fewshots_are_not_from_evaluated_benchmarks() -> None:
    # podium's own examples: only these sets exist and their questions name no benchmark
    assert set(FEWSHOT_SETS) == {"ood", "short", "none"}
    banned = ("gsm8k", "mmlu", "aime", "gpqa", "humaneval", "bigcodebench", "livecodebench")
    for ex in (*FEWSHOT_SETS["ood"], *FEWSHOT_SETS["short"]):
        assert not any(name in ex.question.lower() for name in banned)


def test_the_short_set_shows_one_worker_alone_and_a_step_that_sees_the_first() -> None:
    short = FEWSHOT_SETS["short"]
    assert [len(ex.workflow) for ex in short] == [1, 2]
    assert short[1].workflow.steps[1].access == "all"
    block = format_examples("short", shown_ids=[4, 7], max_steps=2)
    assert "model_id = [4]" in block and "model_id = [7, 4]" in block  # fitted to the pool


def test_ood_examples_parse_back() -> None:
    from podium.conductor import parse
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
    p = PROMPTS["v1"]
    assert {"v0", "v1", "v2"} <= set(p.recursion)
    v0, v1, v2 = (p.recursion_text(name) for name in ("v0", "v1", "v2"))
    assert "{answer}" in v0 and "{workflow}" not in v0
    assert "{workflow}" in v2
    # v0 shows only the keep form; v1 and v2 add the examples, as written without shown ids
    assert len(EXAMPLE_LISTS.findall(v0)) == 0
    assert len(EXAMPLE_LISTS.findall(v1)) == 2
    assert '"all"' in v1
    assert "model_id = [2]\n" in v1 and "model_id = [0, 1]\n" in v1
    with pytest.raises(ConfigError, match="v0"):
        p.recursion_text("v7")


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
    base = estimate_messages_tokens(recursion_messages(root, COMPLETION, ""))
    limit = base + 1000 // 3  # room for about 1,000 answer characters
    msgs = recursion_messages(root, COMPLETION, answer, max_prompt_tokens=limit)
    user = msgs[3]["content"]
    assert CROP_NOTE in user
    assert answer not in user
    assert "a" * 400 in user and "<answer>101</answer>" in user
    assert user.count("a") + user.count("b") < 1100
    full = recursion_messages(root, COMPLETION, answer, max_prompt_tokens=None)
    assert answer in full[3]["content"] and CROP_NOTE not in full[3]["content"]


def test_recursion_needs_an_open_assistant_turn() -> None:
    root = conductor_messages(QUESTION, POOL)
    with pytest.raises(ValueError):
        recursion_messages(root[:2], COMPLETION, "101")


# --- few-shot examples fitted to the pool -------------------------------------------------

EXAMPLE_WORKFLOW = re.compile(
    r"^model_id = \[[^\]\n]+\]\nsubtasks = .*\naccess_list = .*$", re.MULTILINE
)
SUBPOOLS = {
    1: [4],
    2: [3, 6],
    3: [1, 4, 6],
    4: [0, 2, 5, 6],
    5: [1, 2, 3, 5, 6],
    6: [0, 1, 2, 3, 4, 6],
    7: [0, 1, 2, 3, 4, 5, 6],
}
POOLS = [list(range(k)) for k in range(1, 8)] + list(SUBPOOLS.values())
OOD_BLOCK_SHA256 = "0c185af56e9ac66a8856caf8c3678156e7597c4d10bca46372e2b3395d0da76d"


def shown_workflows(text: str) -> list[Workflow]:
    """Every non-empty example workflow written out in `text`, parsed back."""
    return [
        parse_workflow(m.group(), num_workers=100, max_steps=None)
        for m in EXAMPLE_WORKFLOW.finditer(text)
    ]


@pytest.mark.parametrize("ids", POOLS, ids=lambda ids: "-".join(map(str, ids)))
@pytest.mark.parametrize("max_steps", [1, 2, 3, 4, 5])
def test_root_examples_fit_the_pool(ids: list[int], max_steps: int) -> None:
    pool = [PoolEntry(i) for i in ids]
    user = conductor_messages(QUESTION, pool, max_steps=max_steps)[1]["content"]
    shown = shown_workflows(user)
    fitting = [ex for ex in FEWSHOT_SETS["ood"] if len(ex.workflow) <= max_steps]
    assert len(shown) == len(fitting)
    assert ("Examples of good plans" in user) == bool(fitting)
    for wf in shown:
        assert {step.worker for step in wf.steps} <= set(ids)
        assert len(wf) <= max_steps


@pytest.mark.parametrize("ids", POOLS, ids=lambda ids: "-".join(map(str, ids)))
@pytest.mark.parametrize("template", ["v1", "v2"])
def test_recursion_examples_fit_the_pool(ids: list[int], template: str) -> None:
    root = conductor_messages(QUESTION, [PoolEntry(i) for i in ids])
    msgs = recursion_messages(
        root, "", "101", template=template, workflow_text="(none)", shown_ids=ids
    )
    shown = shown_workflows(msgs[3]["content"])
    assert len(shown) == 2
    for wf in shown:
        assert {step.worker for step in wf.steps} <= set(ids)


@pytest.mark.parametrize("max_steps", [1, 2])
def test_recursion_examples_fit_the_step_limit(max_steps: int) -> None:
    root = conductor_messages(QUESTION, [PoolEntry(i) for i in range(3)], max_steps=max_steps)
    msgs = recursion_messages(root, "", "101", template="v1", shown_ids=[0, 1, 2],
                              max_steps=max_steps)
    shown = shown_workflows(msgs[3]["content"])
    assert shown and all(len(wf) <= max_steps for wf in shown)
    assert len(shown) == max_steps  # the verifier always fits; the re-attempt needs 2 steps
    assert "model_id = []" in msgs[3]["content"]  # keeping the answer is always an example


def test_paper_pool_sees_the_examples_as_written() -> None:
    ood = FEWSHOT_SETS["ood"]
    as_written = (
        "Examples of good plans:\n\n"
        + "\n\n".join(f"Example {i + 1}\n{ex.render()}" for i, ex in enumerate(ood))
        + "\n\n"
    )
    assert hashlib.sha256(as_written.encode()).hexdigest() == OOD_BLOCK_SHA256
    assert format_examples("ood") == as_written
    assert format_examples("ood", shown_ids=range(7), max_steps=5) == as_written
    pool = [PoolEntry(i) for i in range(7)]
    user = conductor_messages(QUESTION, pool, max_steps=5)[1]["content"]
    expected = PROMPTS["v1"].template.format(
        max_steps=5, examples=as_written, question=QUESTION, models=format_pool(pool)
    )
    assert user == expected
    root = conductor_messages(QUESTION, pool)
    for template in ("v0", "v1", "v2"):
        kwargs = {"template": template, "workflow_text": "(none)"}
        assert recursion_messages(root, "", "101", shown_ids=range(7), **kwargs) == (
            recursion_messages(root, "", "101", **kwargs)
        )


def test_fit_example_ids_rules() -> None:
    wf = Workflow.of([(6, "a", ()), (5, "b", ()), (3, "c", "all"), (2, "d", "all")])
    assert fit_example_ids(wf, None, 3) is wf
    assert fit_example_ids(wf, [2, 3, 5, 6], 1) is wf  # every id shown: as written
    workers = [s.worker for s in fit_example_ids(wf, [0, 1, 2, 3], 2).steps]
    assert workers == [2, 3, 0, 1]  # distinct ids stay distinct, starting at shown[2]
    assert [s.worker for s in fit_example_ids(wf, [0, 2, 5], 0).steps] == [0, 2, 5, 0]
    assert [s.worker for s in fit_example_ids(wf, [7], 1).steps] == [7, 7, 7, 7]
    repeated = Workflow.of([(4, "a", ()), (1, "b", "all"), (4, "c", "all")])
    assert [s.worker for s in fit_example_ids(repeated, [0, 2], 1).steps] == [2, 0, 2]
    mapped = fit_example_ids(wf, [0, 1, 2, 3], 2)
    assert [s.subtask for s in mapped.steps] == [s.subtask for s in wf.steps]
    assert [s.access for s in mapped.steps] == [s.access for s in wf.steps]
    with pytest.raises(ConfigError):
        fit_example_ids(wf, [], 0)


def test_examples_start_on_different_ids() -> None:
    block = format_examples("ood", shown_ids=[10, 11, 12])
    assert len({wf.steps[0].worker for wf in shown_workflows(block)}) > 1


def test_examples_dropped_past_max_steps() -> None:
    assert format_examples("ood", max_steps=2) == ""
    block = format_examples("ood", max_steps=3)
    assert len(shown_workflows(block)) == 3
    assert "Example 3\n" in block and "Example 4" not in block
    assert FEWSHOT_SETS["ood"][2].question not in block  # the 4-step example


# --- the recursion prompt's size ----------------------------------------------------------


def test_estimate_tokens() -> None:
    assert [estimate_tokens(t) for t in ("", "a", "abc", "abcd")] == [0, 1, 1, 2]
    text = "def f(x):\n    return x * 2\n" * 100
    assert estimate_tokens(text) >= len(text) / 3.5  # at least a code tokenizer's count
    msgs = [{"role": "user", "content": "abcd"}, {"role": "assistant", "content": ""}]
    assert estimate_messages_tokens(msgs) == 2 + 2 * MESSAGE_OVERHEAD_TOKENS


def test_long_answer_is_shown_whole_under_the_default_limit() -> None:
    root = conductor_messages(QUESTION, POOL)
    answer = "x = 1\n" * 1666 + "<answer>101</answer>"
    assert len(answer) >= 10_000
    msgs = recursion_messages(root, COMPLETION, answer)
    assert answer in msgs[3]["content"] and CROP_NOTE not in msgs[3]["content"]
    assert estimate_messages_tokens(msgs) <= DEFAULT_MAX_PROMPT_TOKENS


@pytest.mark.parametrize("template", ["v0", "v1", "v2"])
def test_crop_just_enough_to_fit(template: str) -> None:
    root = conductor_messages(QUESTION, POOL)
    answer = "".join(f"line {i}\n" for i in range(5000)) + "<answer>101</answer>"
    kwargs = {"template": template, "workflow_text": "model_id = [0]"}
    whole = estimate_messages_tokens(
        recursion_messages(root, COMPLETION, answer, max_prompt_tokens=None, **kwargs)
    )
    limit = whole - 5000
    msgs = recursion_messages(root, COMPLETION, answer, max_prompt_tokens=limit, **kwargs)
    user = msgs[3]["content"]
    assert CROP_NOTE in user and "line 0\n" in user and "<answer>101</answer>" in user
    assert limit - 1 <= estimate_messages_tokens(msgs) <= limit


def test_none_never_crops() -> None:
    root = conductor_messages(QUESTION, POOL)
    answer = "y" * 300_000
    msgs = recursion_messages(root, COMPLETION, answer, max_prompt_tokens=None)
    assert answer in msgs[3]["content"] and CROP_NOTE not in msgs[3]["content"]


def test_limit_below_the_prompt_keeps_a_minimum() -> None:
    root = conductor_messages(QUESTION, POOL)
    head, tail = "\u2603", "\u2604"  # characters the template never uses
    answer = head * 2000 + tail * 2000
    msgs = recursion_messages(root, COMPLETION, answer, max_prompt_tokens=10)
    user = msgs[3]["content"]
    assert CROP_NOTE in user
    assert user.count(head) + user.count(tail) == MIN_ANSWER_CHARS
    assert user.count(head) == user.count(tail) == MIN_ANSWER_CHARS // 2
    with pytest.raises(ConfigError, match="max_prompt_tokens"):
        recursion_messages(root, COMPLETION, answer, max_prompt_tokens=0)


def test_compact_subtask_is_compact_defined_telling_what_a_worker_sees() -> None:
    defined, subtask = get_prompt("compact-defined"), get_prompt("compact-subtask")
    assert "A model does not see the question, only its own subtask" in subtask.template
    assert subtask.template.replace(
        " A model does not see the question, only its own subtask: copy into the subtask what "
        "its step needs from the question.", "") == defined.template
    assert subtask.prefill == defined.prefill
