"""ikp_cute.pipelines.catalog: names, contiguous id blocks, levels, sidecar metadata (pure Python)."""

from __future__ import annotations

import pytest

from ikp_cute.pipelines.catalog import LEVEL_OPS, LEVELS, Catalog, Pipeline
from ikp_cute.spec import EventRegistry


def _pipe(name="k", stages=2):
    return Pipeline(name=name, cls="PipelineTmaAsync", site="fa.py:10", num_stages=stages,
                    producer_arrivals=1, consumer_arrivals=8, tx_bytes=32768)


def test_op_blocks_are_contiguous_and_named_per_stage():
    events = EventRegistry(["user_region"])
    cat = Catalog(events, "signals")
    k = cat.pipeline("key_k", lambda: _pipe("k", 3))
    v = cat.pipeline("key_v", lambda: _pipe("v", 2))
    base_k = cat.op_base(k, "acquire", "fa.py:20")
    base_v = cat.op_base(v, "wait", "fa.py:30")
    assert base_k == 1 and base_v == 4  # after the pre-declared event, in order of first use
    assert [events.name(base_k + s) for s in range(3)] == ["acquire_k[0]", "acquire_k[1]", "acquire_k[2]"]
    assert events.name(base_v + 1) == "wait_v[1]"
    assert cat.op_base(k, "acquire", "fa.py:21") == base_k  # same block for a second call site
    assert k.call_sites["acquire"] == ["fa.py:20", "fa.py:21"]


def test_barrier_blocks_have_16_ids():
    events = EventRegistry()
    cat = Catalog(events, "signals")
    base = cat.barrier_base("bar_sync", "fa.py:5", 3, "warp_scheduler_barrier_sync")
    assert [events.name(base + i) for i in (0, 15)] == ["bar_sync[0]", "bar_sync[15]"]
    meta = cat.metadata()["barriers"]
    assert meta["base_sync"] == base and meta["base_arrive"] is None
    assert meta["names"] == {"3": "warp_scheduler_barrier_sync"}


def test_non_contiguous_block_is_refused():
    events = EventRegistry({"pinned": 2})
    cat = Catalog(events, "waits")
    with pytest.raises(ValueError, match="not contiguous"):
        cat.op_base(cat.pipeline("p", lambda: _pipe("p", 4)), "acquire", "x.py:1")


def test_duplicate_pipeline_names_get_suffixes():
    cat = Catalog(EventRegistry(), "waits")
    a = cat.pipeline(1, lambda: _pipe("kv"))
    b = cat.pipeline(2, lambda: _pipe("kv"))
    assert (a.name, b.name) == ("kv", "kv_2")
    assert cat.pipeline(1, lambda: _pipe("other")) is a


def test_levels_are_cumulative():
    assert LEVELS == ("waits", "signals", "all")
    assert LEVEL_OPS["waits"] < LEVEL_OPS["signals"] < LEVEL_OPS["all"]
    assert {"acquire", "wait", "bar_sync", "flag_signal", "flag_wait"} == LEVEL_OPS["waits"]  # flags at every level
    with pytest.raises(ValueError, match="level"):
        Catalog(EventRegistry(), "everything")


def test_metadata_follows_the_contract():
    cat = Catalog(EventRegistry(), "signals")
    k = cat.pipeline("k", lambda: _pipe("k", 2))
    for op in ("acquire", "commit", "wait", "release"):
        cat.op_base(k, op, "fa.py:1")
    (entry,) = cat.metadata()["pipelines"]
    assert {"name", "class", "site", "num_stages", "producer_arrivals", "consumer_arrivals", "tx_bytes",
            "ids"} <= set(entry)
    assert entry["ids"] == {"acquire": 0, "commit": 2, "wait": 4, "release": 6}
    assert cat.metadata()["pipeline_level"] == "signals"


def test_a_pipeline_of_another_shape_in_a_later_kernel_gets_its_own_entry():
    """Two PipelineOrders made by one helper (same name, site and stage count) in two kernels: depth 2 x
    length 2 and depth 4 x length 1 differ in which first waits pass, so the later may not take the
    earlier's entry (its host matching would be one phase off)."""
    events = EventRegistry()
    cat = Catalog(events, "signals")

    def order(passes):
        pipe = _pipe("turns", 4)
        pipe.cls, pipe.first_wait_passes = "PipelineOrder", passes
        return pipe

    first = cat.pipeline("kernel_a", lambda: order([0, 2]), kernel="kernel a")
    second = cat.pipeline("kernel_b", lambda: order([0, 1, 2, 3]), kernel="kernel b")
    again = cat.pipeline("kernel_c", lambda: order([0, 2]), kernel="kernel c")
    assert second is not first and second.first_wait_passes == [0, 1, 2, 3]
    assert again is first  # the same pipeline traced again takes its entry


def test_a_pipeline_with_no_traced_op_is_listed_apart():
    """A pipeline seen only doing ops the level does not record has no ids: it goes to
    `pipelines_untraced` with the reason of each op, so `pipelines` holds only entries with ids (the
    host's reader refuses an entry without)."""
    cat = Catalog(EventRegistry(), "waits")
    k = cat.pipeline("k", lambda: _pipe("k", 2))
    v = cat.pipeline("v", lambda: _pipe("v", 2))
    cat.op_base(k, "acquire", "fa.py:1")
    assert cat.note_untraced(k, "commit") == "level waits does not record commit"
    assert cat.note_untraced(v, "release") == "level waits does not record release"
    meta = cat.metadata()
    assert [p["name"] for p in meta["pipelines"]] == ["k"]
    assert meta["pipelines"][0]["untraced"] == {"commit": "level waits does not record commit"}
    assert meta["pipelines_untraced"] == [{"name": "v", "class": "PipelineTmaAsync", "site": "fa.py:10",
                                           "num_stages": 2,
                                           "untraced": {"release": "level waits does not record release"}}]
    assert Catalog(EventRegistry(), "signals", ops={"wait"}).why_not("commit") == "ops= leaves out commit"


def test_removed_call_sites_move_apart():
    """The audit's verdict: a call site absent from the final PTX leaves `call_sites` for `removed_sites`
    (a pipeline's, or a named barrier's)."""
    cat = Catalog(EventRegistry(), "signals")
    k = cat.pipeline("k", lambda: _pipe("k", 2))
    for site in ("fa.py:1", "fa.py:2"):
        cat.op_base(k, "wait", site)
    cat.barrier_base("bar_sync", "fa.py:3", 1)
    cat.mark_removed([(k, "wait", "fa.py:1"), (None, "bar_sync", "fa.py:3")])
    (entry,) = cat.metadata()["pipelines"]
    assert entry["call_sites"]["wait"] == ["fa.py:2"] and entry["removed_sites"] == {"wait": ["fa.py:1"]}
    barriers = cat.metadata()["barriers"]
    assert barriers["call_sites"]["bar_sync"] == [] and barriers["removed_sites"] == {"bar_sync": ["fa.py:3"]}
