"""Tests for podium.conductor.parse: a table of Conductor outputs, plus fuzz and round-trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podium.conductor.parse import parse_workflow
from podium.errors import PARSE_REASONS, WorkflowParseError
from podium.workflow.types import Step, Workflow

PAPER = """To answer this I will first let a strong model solve the problem, then let a second
model verify the solution while seeing everything before it.

model_id = [2, 0]
subtasks = ["Solve the problem step by step.", "Check the solution above and fix any error."]
access_list = [[], ["all"]]
"""

SIX = (
    "model_id = [0, 1, 2, 3, 4, 5]\n"
    'subtasks = ["a", "b", "c", "d", "e", "f"]\n'
    "access_list = [[], [], [], [], [], []]"
)


def lists(ids: str, tasks: str, access: str) -> str:
    return f"model_id = {ids}\nsubtasks = {tasks}\naccess_list = {access}"


def case(case_id: str, text: str, expected: Any, **kwargs: Any) -> Any:
    return pytest.param(text, expected, kwargs, id=case_id)


CASES = [
    # --- well-formed outputs in their many spellings
    case(
        "paper_style",
        PAPER,
        [
            (2, "Solve the problem step by step.", ()),
            (0, "Check the solution above and fix any error.", "all"),
        ],
    ),
    case("colon", 'model_id: [1]\nsubtasks: ["x"]\naccess_list: [[]]', [(1, "x", ())]),
    case("no_spaces", 'model_id=[1]\nsubtasks=["x"]\naccess_list=[[]]', [(1, "x", ())]),
    case(
        "labels_case_and_spaces",
        'Model ID: [3]\nSubtasks: ["x"]\nAccess List = [[]]',
        [(3, "x", ())],
    ),
    case("model_ids", 'Model IDs: [3]\nsubtask = ["x"]\naccess = [[]]', [(3, "x", ())]),
    case("model_ids_underscore", 'model_ids = [4]\nSUBTASK: ["x"]\nACCESS: [[]]', [(4, "x", ())]),
    case(
        "word_boundary",
        'submodel_id = [6]\nmodel_id = [0]\nsubtasks = ["x"]\naccess_list = [[]]',
        [(0, "x", ())],
    ),
    case(
        "escaped_double_quotes",
        lists("[0]", r'["say \"hi\" ["]', "[[]]"),
        [(0, 'say "hi" [', ())],
    ),
    case(
        "single_inside_double", lists("[0]", '["it\'s ] fine"]', "[[]]"), [(0, "it's ] fine", ())]
    ),
    case("double_inside_single", lists("[0]", "['say \"hi\"']", "[[]]"), [(0, 'say "hi"', ())]),
    case(
        "brackets_in_strings",
        lists("[0, 1]", '["compute [a, b]", "then ]] close"]', "[[], [0]]"),
        [(0, "compute [a, b]", ()), (1, "then ]] close", (0,))],
    ),
    case(
        "code_fence",
        "Plan:\n```python\n" + lists("[1]", '["x"]', "[[]]") + "\n```\nDone.",
        [(1, "x", ())],
    ),
    case(
        "bullets",
        '- model_id = [0, 1]\n* subtasks = ["a", "b"]\n•  access_list = [[], "all"]',
        [(0, "a", ()), (1, "b", "all")],
    ),
    case(
        "think_decoy",
        "<think>maybe model_id = [6]\nsubtasks = ['decoy']\naccess_list = [[]]</think>\n"
        + lists("[1]", '["real"]', "[[]]"),
        [(1, "real", ())],
    ),
    case(
        "think_upper_multiline",
        "<THINK>\nmodel_id = [5, 5]\n</Think>" + lists("[2]", '["real"]', "[[]]"),
        [(2, "real", ())],
    ),
    case(
        "orphan_think_close",
        "model_id = [5]\nsubtasks = ['decoy']\n</think>\n" + lists("[3]", '["real"]', "[[]]"),
        [(3, "real", ())],
    ),
    case(
        "unclosed_think_kept",
        "<think> I will plan.\n" + lists("[3]", '["real"]', "[[]]"),
        [(3, "real", ())],
    ),
    case(
        "smart_quotes",
        "model_id = [0, 1]\nsubtasks = [“solve it”, ‘check it’]\naccess_list = [[], [“all”]]",
        [(0, "solve it", ()), (1, "check it", "all")],
    ),
    case(
        "json_style",
        '{"note": 1}\nmodel_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], [0]]',
        [(0, "a", ()), (1, "b", (0,))],
    ),
    case(
        "python_single_quotes",
        lists("[0, 1]", "['a', 'b']", "[[], ['all']]"),
        [(0, "a", ()), (1, "b", "all")],
    ),
    case(
        "trailing_commas",
        lists("[0, 1,]", '["a", "b",]', "[[], [0,],]"),
        [(0, "a", ()), (1, "b", (0,))],
    ),
    case(
        "multiline_lists",
        'model_id = [\n  0,\n  1\n]\nsubtasks = [\n  "a",\n  "b"\n]\naccess_list = [\n [],\n [0]\n]',
        [(0, "a", ()), (1, "b", (0,))],
    ),
    case(
        "labels_twice_first_wins",
        lists("[1]", '["first"]', "[[]]") + "\n" + lists("[2]", '["second"]', "[[]]"),
        [(1, "first", ())],
    ),
    case(
        "comma_split_fallback",
        lists("[0, 1]", "[solve it, check it]", "[[], [0]]"),
        [(0, "solve it", ()), (1, "check it", (0,))],
    ),
    case(
        "digit_string_ids",
        lists('["2", " 3 "]', '["a", "b"]', "[[], []]"),
        [(2, "a", ()), (3, "b", ())],
    ),
    case("numeric_subtask", lists("[0]", "[42]", "[[]]"), [(0, "42", ())]),
    case(
        "json_escaped_emoji",
        lists("[0]", r'["\ud83d\ude00 smile"]', "[[]]"),
        [(0, "\U0001f600 smile", ())],
    ),
    # --- access entries
    case(
        "all_bare_string",
        lists("[0, 1]", '["a", "b"]', '[[], "all"]'),
        [(0, "a", ()), (1, "b", "all")],
    ),
    case(
        "all_case_insensitive",
        lists("[0, 1]", '["a", "b"]', '[[], ["All"]]'),
        [(0, "a", ()), (1, "b", "all")],
    ),
    case(
        "all_at_step_0",
        lists("[0, 1]", '["a", "b"]', '["all", ["all"]]'),
        [(0, "a", "all"), (1, "b", "all")],
    ),
    case(
        "integer_access",
        lists("[0, 1, 2]", '["a", "b", "c"]', "[[], [0], [0, 1]]"),
        [(0, "a", ()), (1, "b", (0,)), (2, "c", (0, 1))],
    ),
    case(
        "access_sorted_dedup",
        lists("[0, 1, 2]", '["a", "b", "c"]', "[[], [0], [1, 0, 1]]"),
        [(0, "a", ()), (1, "b", (0,)), (2, "c", (0, 1))],
    ),
    case(
        "bare_integer_access",
        lists("[0, 1]", '["a", "b"]', "[[], 0]"),
        [(0, "a", ()), (1, "b", (0,))],
    ),
    case(
        "digit_string_access",
        lists("[0, 1]", '["a", "b"]', '[[], ["0"]]'),
        [(0, "a", ()), (1, "b", (0,))],
    ),
    case("self_reference", lists("[0]", '["a"]', "[[0]]"), "bad_access"),
    case("forward_reference", lists("[0, 1, 2]", '["a", "b", "c"]', "[[], [2], []]"), "bad_access"),
    case("negative_access", lists("[0, 1]", '["a", "b"]', "[[], [-1]]"), "bad_access"),
    case("access_none_string", lists("[0, 1]", '["a", "b"]', '[[], "none"]'), "bad_access"),
    case("access_null", lists("[0, 1]", '["a", "b"]', "[[], None]"), "bad_access"),
    case("access_bool", lists("[0, 1]", '["a", "b"]', "[[], [True]]"), "bad_access"),
    case(
        "binary_rejects_indices",
        lists("[0, 1]", '["a", "b"]', "[[], [0]]"),
        "bad_access",
        access_mode="binary",
    ),
    case(
        "binary_rejects_bare_int",
        lists("[0, 1]", '["a", "b"]', "[[], 0]"),
        "bad_access",
        access_mode="binary",
    ),
    case(
        "binary_accepts_all",
        lists("[0, 1, 2]", '["a", "b", "c"]', '[["all"], "all", []]'),
        [(0, "a", "all"), (1, "b", "all"), (2, "c", ())],
        access_mode="binary",
    ),
    # --- model ids
    case("id_out_of_range", lists("[0, 9]", '["a", "b"]', "[[], []]"), "bad_model_id"),
    case("id_negative", lists("[-1]", '["a"]', "[[]]"), "bad_model_id"),
    case("id_non_numeric", lists('["gpt-4"]', '["a"]', "[[]]"), "bad_model_id"),
    case("id_bool", lists("[True]", '["a"]', "[[]]"), "bad_model_id"),
    case("id_float", lists("[1.0]", '["a"]', "[[]]"), "bad_model_id"),
    case(
        "allowed_workers_reject",
        lists("[0, 2]", '["a", "b"]', "[[], []]"),
        "bad_model_id",
        allowed_workers={0, 1},
    ),
    case(
        "allowed_workers_accept",
        lists("[0, 1]", '["a", "b"]', "[[], []]"),
        [(0, "a", ()), (1, "b", ())],
        allowed_workers={0, 1},
    ),
    case("id_at_pool_edge", lists("[2]", '["a"]', "[[]]"), "bad_model_id", num_workers=2),
    # --- subtasks
    case("subtask_list_item", lists("[0]", '[["a"]]', "[[]]"), "unparseable"),
    case("subtask_none", lists("[0]", "[None]", "[[]]"), "unparseable"),
    # --- structure
    case("six_steps_too_many", SIX, "too_many_steps"),
    case("six_steps_unlimited", SIX, [(i, c, ()) for i, c in enumerate("abcdef")], max_steps=None),
    case(
        "max_steps_two",
        lists("[0, 1, 2]", '["a", "b", "c"]', "[[], [], []]"),
        "too_many_steps",
        max_steps=2,
    ),
    case("length_mismatch", lists("[0, 1]", '["a"]', "[[], []]"), "length_mismatch"),
    case("empty_access_list", lists("[0]", '["a"]', "[]"), "length_mismatch"),
    case("missing_access", 'model_id = [0]\nsubtasks = ["a"]', "length_mismatch"),
    case("missing_subtasks", "model_id = [0]\naccess_list = [[]]", "length_mismatch"),
    case(
        "unbalanced_list", 'model_id = [0\nsubtasks = ["a"]\naccess_list = [[]', "length_mismatch"
    ),
    case("all_empty", lists("[]", "[]", "[]"), "empty"),
    case("empty_string", "", "unparseable"),
    case(
        "random_prose",
        "I think the answer is 42. Let me explain why [citation needed.",
        "unparseable",
    ),
    case("label_without_list", "model_id: two\nsubtasks: solve it\naccess: all", "unparseable"),
    # --- validation order: first failure wins
    case("order_mismatch_before_ids", lists("[9, 9]", '["a"]', "[[], []]"), "length_mismatch"),
    case(
        "order_steps_before_ids",
        lists("[9, 9, 9]", '["a", "b", "c"]', "[[], [], []]"),
        "too_many_steps",
        max_steps=2,
    ),
    case("order_ids_before_subtasks", lists("[9]", "[None]", "[[0]]"), "bad_model_id"),
    case("order_subtasks_before_access", lists("[0]", "[None]", "[[0]]"), "unparseable"),
]


@pytest.mark.parametrize(("text", "expected", "kwargs"), CASES)
def test_parse_table(text: str, expected: Any, kwargs: dict[str, Any]) -> None:
    kwargs = {"num_workers": 7, "access_mode": "indices", **kwargs}
    if isinstance(expected, str):
        with pytest.raises(WorkflowParseError) as info:
            parse_workflow(text, **kwargs)
        assert info.value.reason == expected
        assert info.value.detail
    else:
        assert parse_workflow(text, **kwargs) == Workflow(tuple(Step(*s) for s in expected))


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 45


def test_detail_names_the_step() -> None:
    with pytest.raises(WorkflowParseError) as info:
        parse_workflow(lists("[0, 9]", '["a", "b"]', "[[], []]"), num_workers=7)
    assert info.value.detail == "step 1: model id 9 is not in 0..6"


def test_huge_and_deep_input_is_a_parse_error() -> None:
    deep = "model_id = " + "[" * 5000 + "]" * 5000 + "\nsubtasks = [" + "1+" * 50000 + "1]"
    with pytest.raises(WorkflowParseError):
        parse_workflow(deep, num_workers=3)
    long_id = lists("[" + "9" * 5000 + "]", '["a"]', "[[]]")
    with pytest.raises(WorkflowParseError) as info:
        parse_workflow(long_id, num_workers=3)
    assert info.value.reason == "bad_model_id"


# --- properties

FRAGMENTS = [
    "model_id",
    "model id",
    "Model IDs",
    "subtasks",
    "subtask",
    "access_list",
    "access list",
    "access",
    " = ",
    ":",
    "=",
    "[",
    "]",
    "[[",
    "]]",
    "[]",
    '"',
    "'",
    "\\",
    ",",
    " ",
    "\n",
    "all",
    '"all"',
    "['all']",
    "0",
    "1",
    "2",
    "-1",
    "9",
    "True",
    "None",
    "1e999",
    "1j",
    "(",
    ")",
    "{",
    "}",
    "<think>",
    "</think>",
    "```",
    "- ",
    "* ",
    "•",
    "“",
    "”",
    "‘",
    "’",
    "٣",
]
near_valid = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=40).map(
    "".join
)


def _check(text: str, num_workers: int, max_steps: int | None, mode: str, allowed: Any) -> None:
    try:
        wf = parse_workflow(
            text,
            num_workers=num_workers,
            max_steps=max_steps,
            access_mode=mode,  # type: ignore[arg-type]
            allowed_workers=allowed,
        )
    except WorkflowParseError as exc:
        assert exc.reason in PARSE_REASONS
        return
    assert isinstance(wf, Workflow) and len(wf) >= 1
    wf.validate(num_workers)
    if max_steps is not None:
        assert len(wf) <= max_steps
    for step in wf.steps:
        assert type(step.worker) is int and isinstance(step.subtask, str)
        if allowed is not None:
            assert step.worker in allowed
        if mode == "binary":
            assert step.access in ((), "all")
        else:
            assert step.access == "all" or all(type(j) is int for j in step.access)


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(st.text(), near_valid),
    num_workers=st.integers(0, 5),
    max_steps=st.sampled_from([None, 1, 5]),
    mode=st.sampled_from(["indices", "binary"]),
    allowed=st.one_of(st.none(), st.frozensets(st.integers(0, 4))),
)
def test_never_raises_anything_else(
    text: str, num_workers: int, max_steps: int | None, mode: str, allowed: Any
) -> None:
    _check(text, num_workers, max_steps, mode, allowed)


# Subtasks may hold any text except what normalisation rewrites (backticks, <think> tags) or
# what would be taken for a later label ("access"); non-ASCII is escaped by to_text.
subtask_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="`"), max_size=30
).filter(lambda s: "think" not in s.lower() and "access" not in s.lower())


@st.composite
def workflows(draw: st.DrawFn) -> tuple[Workflow, int]:
    num_workers = draw(st.integers(1, 6))
    steps = []
    for i in range(draw(st.integers(1, 8))):
        choices = [st.just(())]
        if i > 0:
            choices += [
                st.just("all"),
                st.sets(st.integers(0, i - 1)).map(lambda s: tuple(sorted(s))),
            ]
        access = draw(st.one_of(*choices))
        steps.append(Step(draw(st.integers(0, num_workers - 1)), draw(subtask_text), access))
    return Workflow(tuple(steps)), num_workers


@settings(max_examples=300, deadline=None)
@given(workflows())
def test_round_trip(pair: tuple[Workflow, int]) -> None:
    wf, num_workers = pair
    assert parse_workflow(wf.to_text(), num_workers=num_workers, max_steps=None,
                          access_mode="indices") == wf


# --- the cover rule for positional access (PAPER.md §4.3) ---------------------------------

COVER_CASES = [
    ("one_step", [[]], None),
    ("chain", [[], [0], [1]], None),
    ("fan_in", [[], [], [0, 1]], None),
    ("all_at_last", [[], [], "all"], None),
    ("all_in_middle", [[], "all", [1]], None),
    ("split_cover", [[], [0], [0], [1, 2]], None),
    ("first_unseen", [[], [], [1]], "[0]"),
    ("middle_unseen", [[], [0], []], "[1]"),
    ("none_seen", [[], [], []], "[0, 1]"),
    ("all_at_step_0", ["all", []], "[0]"),
    ("unseen_before_last", [[], [0], [0], [1]], "[2]"),
]


@pytest.mark.parametrize(
    ("access", "unseen"), [c[1:] for c in COVER_CASES], ids=[c[0] for c in COVER_CASES]
)
def test_cover_rule(access: list[Any], unseen: str | None) -> None:
    n = len(access)
    text = lists(str(list(range(n))), str(["s"] * n), json.dumps(access))
    assert len(parse_workflow(text, num_workers=7, access_mode="indices")) == n  # off by default
    if unseen is None:
        assert len(parse_workflow(text, num_workers=7, access_mode="indices",
                                  require_cover=True)) == n
        return
    with pytest.raises(WorkflowParseError) as info:
        parse_workflow(text, num_workers=7, access_mode="indices", require_cover=True)
    assert info.value.reason == "bad_access"
    assert unseen in info.value.detail


def test_the_public_parser_defaults_to_the_runs_binary_access() -> None:
    """`podium.parse_workflow` agrees with a run's default (`run.access_mode = "binary"`, the
    paper's main model): step lists are refused unless indices are asked for."""
    text = lists("[0, 1]", '["a", "b"]', "[[], [0]]")
    with pytest.raises(WorkflowParseError, match="bad_access"):
        parse_workflow(text, num_workers=7)
    assert len(parse_workflow(text, num_workers=7, access_mode="indices")) == 2


def test_cover_rule_is_for_indices_mode_only() -> None:
    text = lists("[0, 1, 2]", '["a", "b", "c"]', "[[], [], []]")
    wf = parse_workflow(text, num_workers=7, access_mode="binary", require_cover=True)
    assert len(wf) == 3


@settings(max_examples=300, deadline=None)
@given(workflows())
def test_cover_rule_round_trip(pair: tuple[Workflow, int]) -> None:
    wf, num_workers = pair
    seen = set().union(*(step.visible(i) for i, step in enumerate(wf.steps)))
    covered = set(range(len(wf) - 1)) <= seen
    text = wf.to_text()
    if covered:
        assert parse_workflow(text, num_workers=num_workers, max_steps=None,
                              access_mode="indices", require_cover=True) == wf
    else:
        with pytest.raises(WorkflowParseError) as info:
            parse_workflow(text, num_workers=num_workers, max_steps=None,
                           access_mode="indices", require_cover=True)
        assert info.value.reason == "bad_access"
