"""One precedence for run settings (podium.settings): pool < card < training < flags < request
< what the job requires; a request lowers caps only; a bad source is named."""

from __future__ import annotations

import pytest

from podium.config import RunSettings
from podium.errors import ConfigError
from podium.settings import resolve_settings


def test_each_later_source_wins_over_the_earlier_ones() -> None:
    pool = RunSettings(prompt="v1", recursion=0, fewshots="ood", cache=True)
    s = resolve_settings(pool, card={"prompt": "compact", "recursion": 1},
                         training={"recursion": 2, "fewshots": "short"},
                         flags={"recursion": 3}, request={"recursion": 4},
                         required={"recursion": 0})
    assert (s.prompt, s.fewshots, s.recursion, s.cache) == ("compact", "short", 0, True)
    s = resolve_settings(pool, card={"recursion": 1}, flags={"recursion": 3})
    assert s.recursion == 3
    assert resolve_settings(pool) == pool
    assert resolve_settings(pool, card=None, flags={}) == pool


def test_a_request_lowers_a_cap_and_never_raises_it() -> None:
    pool = RunSettings(max_calls=4, max_cost=0.5)
    s = resolve_settings(pool, request={"max_calls": 9, "max_cost": 0.1, "max_tokens": 100})
    assert (s.max_calls, s.max_cost, s.max_tokens) == (4, 0.1, 100)
    assert resolve_settings(pool, request={"max_calls": 2}).max_calls == 2
    # a flag is the operator's own: it may raise the pool's cap
    assert resolve_settings(pool, flags={"max_calls": 9}).max_calls == 9


def test_a_bad_source_is_named_with_the_fix() -> None:
    pool = RunSettings()
    with pytest.raises(ConfigError, match=r"the training config's \[run\] sets recursoin"):
        resolve_settings(pool, training={"recursoin": 1})
    with pytest.raises(ConfigError, match=r"the checkpoint's card gives a \[run\] value .*"
                                          r"recursion"):
        resolve_settings(pool, card={"recursion": -1})
