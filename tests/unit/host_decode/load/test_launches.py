"""--launches (host_decode.load.launches): every form parses to the canonical text the pool takes and back,
malformed specs name the bad item, and what a selection selects agrees with a launch-by-launch reference
written here and with the pool's own window words (host_decode.core.wire: what the device decides on)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from host_decode.core import wire
from host_decode.load.launches import (
    DEFAULT_SELECTION,
    LaunchPlan,
    Selection,
    parse_launches,
    parse_selection,
    split_items,
)

FORMS = {  # text -> (canonical text, selected out of 10 launches), worked out by hand
    "3": ("3", [3]),
    " 0 ": ("0", [0]),
    "3:6": ("3:6", [3, 4, 5]),
    "8:20": ("8:20", [8, 9]),
    "7:": ("7:", [7, 8, 9]),
    "0:": ("0:", list(range(10))),
    "every=4": ("every=4", [0, 4, 8]),
    "every=1": ("every=1", list(range(10))),
    "last": ("last", [9]),
    "all": ("all", list(range(10))),
    "none": ("none", []),
    "12": ("12", []),
}


@pytest.mark.parametrize("text", sorted(FORMS))
def test_every_form(text):
    canonical, selected = FORMS[text]
    s = parse_selection(text)
    assert s.text == canonical and parse_selection(s.text) == s
    assert s.selected(10) == selected
    assert s.describe()
    wire.pool_selection(s.text)  # the pool takes the canonical text (raises otherwise)


def reference(s: Selection, seen: int) -> list[int]:
    """What a selection selects, one launch at a time, as a device counting launches would decide it."""
    out = []
    for i in range(seen):
        if s.kind == "index":
            hit = i == s.start
        elif s.kind == "range":
            hit = s.start <= i < s.stop
        elif s.kind == "from":
            hit = i >= s.start
        elif s.kind == "every":
            hit = i % s.step == 0
        elif s.kind == "last":
            hit = i == seen - 1
        else:
            hit = s.kind == "all"
        if hit:
            out.append(i)
    return out


selections = st.one_of(
    st.integers(0, 50).map(str),
    st.tuples(st.integers(0, 40), st.integers(1, 20)).map(lambda t: f"{t[0]}:{t[0] + t[1]}"),
    st.integers(0, 50).map(lambda a: f"{a}:"),
    st.integers(1, 30).map(lambda k: f"every={k}"),
    st.sampled_from(["last", "all", "none"]),
)


@given(selections, st.integers(0, 120))
def test_selected_agrees_with_the_launch_by_launch_reference(text, seen):
    s = parse_selection(text)
    assert s.selected(seen) == reference(s, seen)
    assert [i for i in range(seen) if s.selects(i, seen)] == reference(s, seen)


@pytest.mark.parametrize("text, names", [
    ("5:5", "A < B"), ("6:3", "A < B"), ("every=0", "K >= 1"), ("-1", "not a launch selection"),
    (":3", "not a launch selection"), ("first", "not a launch selection"), ("1.5", "not a launch selection"),
    ("99999999999", "launch counter"),
])
def test_malformed_selections_say_what_is_wrong(text, names):
    with pytest.raises(ValueError, match=names) as e:
        parse_selection(text)
    assert repr(text) in str(e.value) or repr(text.strip()) in str(e.value)


@given(selections, st.integers(0, 120))
def test_the_pools_window_words_decide_as_the_selection_says(text, seen):
    """Launch by launch, the device's rule (wire.pool_decide) on the pool's window words for the canonical
    text records exactly `selected` (`last`: every launch records; the reader keeps the newest)."""
    s = parse_selection(text)
    words = wire.pool_selection(s.text)
    decided = [i for i in range(seen) if wire.pool_decide(*words, i)[0]]
    assert decided == (list(range(seen)) if s.kind == "last" else s.selected(seen))


def test_per_kernel_plan_first_match_wins_then_default():
    plan = parse_launches("flash.*fwd=2,gemm=every=10,default=last")
    assert plan.for_kernel("kernel_flash_attn_fwd_sm90").text == "2"
    assert plan.for_kernel("quack_gemm_sm90").text == "every=10"
    assert plan.for_kernel("rmsnorm").text == "last"
    assert plan.rule_for("quack_gemm_sm90") == "gemm" and plan.rule_for("rmsnorm") == "default"
    assert parse_launches("every=100").default.text == "every=100"  # a bare selection holding '=' is the default
    assert parse_launches("flash=3:5,0").default.text == "0"
    assert parse_launches("x=1").default.text == DEFAULT_SELECTION  # no default given: one launch after the first
    assert LaunchPlan().for_kernel("anything").text == DEFAULT_SELECTION


def test_commas_inside_a_regex_stay_in_it():
    assert split_items("a{1,3}=2,(b|c,d)=all,[x,y]=none,e\\,f=1") == ["a{1,3}=2", "(b|c,d)=all", "[x,y]=none",
                                                                      "e\\,f=1"]
    plan = parse_launches("fwd{1,2}=4,default=1")
    assert plan.for_kernel("fwdfwd").text == "4"


@pytest.mark.parametrize("text, bad", [
    ("flash=2,,default=1", "empty item"),
    ("flash=2,default=1,", "empty item"),
    ("flash=2,default=1,3", "two defaults"),
    ("flash=x", "'x' is not a launch selection"),
    ("flash=2,flash=3", "given twice"),
    ("(unclosed=2", "not a regular expression"),
    ("=2", "no kernel pattern"),
    ("every=abc", "every=K needs an integer"),
    ("flash", "nor PATTERN=SELECTION"),
    ("", "empty"),
])
def test_malformed_specs_name_the_bad_item(text, bad):
    with pytest.raises(ValueError, match=bad.replace("(", r"\(")):
        parse_launches(text)
