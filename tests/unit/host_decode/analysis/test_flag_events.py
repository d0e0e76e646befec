"""Flag events from captures (host_decode/analysis/flag_events.py), on captures built record by record."""

import json
import re

import numpy as np
import pytest

from host_decode.analysis.flag_events import PROBLEMS, flag_events
from host_decode.analysis.flags import ADD, EQ, GE, LT, SIGNAL, STORE, UNKNOWN, WAIT
from host_decode.analysis.sessions import load_trace
from host_decode.core.errors import DecodeError
from host_decode.load.capture import load_capture
from tests.support.flag_captures import (
    BEGIN,
    END,
    FLAG_ADDR,
    FLAG_VALUE,
    INSTANT,
    RankCapture,
    signal_site,
    symmetric_bases,
    symmetric_entries,
    wait_site,
)

T = 1_750_000_000_000_000_000
BASE = 0x7F55_0000_1000


def local(name="ready", base=BASE, nbytes=64, owner=0):
    return {"name": name, "owner_rank": owner, "base": base, "bytes": nbytes, "elem_bytes": 4}


def test_signals_and_waits_become_rows(tmp_path):
    sites = [signal_site(1, "a.py:1"), signal_site(3, "a.py:3", value="recorded"),
             signal_site(4, "a.py:4", op="ikp_cute.flags.signal(store)", update="store", value="recorded"),
             signal_site(7, "a.py:7", op="nvvm.store.ext", update="store", value=8),
             wait_site(2, "a.py:2", expected=2), wait_site(5, "a.py:5", expected="recorded", cmp="eq"),
             wait_site(6, "a.py:6", expected=1, cmp="eq", op="spin_lock_atom_cas_acquire_wait", reset=0),
             wait_site(8, "a.py:8", expected="recorded", cmp="lt", op="spin_lock_atom_cas_relaxed_wait",
                       reset="recorded")]
    cap = RankCapture(rank=0, num_blocks=2, warps=2, sites=sites, flag_buffers=[local()])
    cap.signal(0, 0, 1, T + 100, BASE + 8)  # one add of the site's 1
    cap.signal(0, 1, 1, T + 200, BASE + 8, value=3)  # three lanes of a warp at once: three adds
    cap.signal(1, 0, 3, T + 300, BASE + 12, value=2)  # a runtime amount: two adds
    cap.signal(1, 1, 4, T + 400, BASE + 16, value=5)  # a store of 5 (recorded)
    cap.signal(1, 1, 7, T + 450, BASE + 24)  # a store of the site's 8
    cap.wait(1, 0, 2, T + 500, T + 900, BASE + 8)  # >= 2, a constant
    cap.wait(0, 0, 5, T + 600, T + 800, BASE + 16, value=5)  # == 5, recorded
    cap.wait(0, 1, 6, T + 1000, T + 1100, BASE + 20)  # cas wait == 1 resetting to the site's 0
    cap.wait(0, 1, 8, T + 1200, T + 1300, BASE + 28, value=-4, reset=-7)  # < -4, resetting to -7: both recorded
    ev = flag_events(load_capture(cap.save(tmp_path / "c.npy")))
    t = ev.table
    assert not any(ev.problems.values())
    sig = t.kind == SIGNAL
    assert sig.sum() == 1 + 3 + 2 + 1 + 1 + 2 and (~sig).sum() == 4
    assert t.offset[sig].tolist() == [2] * 4 + [3, 3, 4, 6, 5, 7]
    assert t.op[sig].tolist() == [ADD] * 6 + [STORE] * 4
    assert t.value[sig].tolist() == [UNKNOWN] * 6 + [5, 8, 0, -7]
    assert t.end_ns[sig].tolist() == [T + 100] + [T + 200] * 3 + [T + 300] * 2 + [T + 400, T + 450, T + 1100,
                                                                                  T + 1300]
    w = ~sig
    # waits in lane order: (block 0, warp 0) == 5; (0, 1) the cas waits == 1, < -4; (1, 0) >= 2
    assert t.value[w].tolist() == [5, 1, -4, 2] and t.op[w].tolist() == [EQ, EQ, LT, GE]
    assert t.begin_ns[w].tolist() == [T + 600, T + 1000, T + 1200, T + 500]
    assert t.end_ns[w].tolist() == [T + 800, T + 1100, T + 1300, T + 900]
    assert t.block[w].tolist() == [0, 0, 0, 1] and t.warp[w].tolist() == [0, 1, 1, 0]
    assert set(t.buffers) == {"ready"} and (t.owner == 0).all()


def test_malformed_sequences_are_counted_by_name(tmp_path):
    sites = [signal_site(1, "a.py:1"), signal_site(4, "a.py:4", update="store", value="recorded"),
             wait_site(2, "a.py:2"), wait_site(3, "a.py:3", expected=1),
             wait_site(5, "a.py:5", expected=1, reset="recorded")]
    cap = RankCapture(rank=0, num_blocks=1, warps=4, sites=sites, flag_buffers=[local()], events={9: "other"})
    a = (BASE >> 2) & 0xFFFF_FFFF
    cap.signal(0, 0, 1, T + 100, BASE)  # good
    cap.raw(1, [(T + 110, 1, INSTANT)], T + 110)  # record_without_address
    cap.raw(1, [(T + 120, 2, BEGIN), (T + 130, 2, END), (a, FLAG_ADDR, INSTANT)], T + 120)  # wait_without_value
    cap.raw(1, [(T + 132, 5, BEGIN), (T + 134, 5, END), (a, FLAG_ADDR, INSTANT)], T + 132)  # wait_without_value
    cap.raw(2, [(T + 140, 4, INSTANT), (a, FLAG_ADDR, INSTANT)], T + 140)  # signal_without_value
    cap.raw(2, [(T + 150, 9, INSTANT), (a, FLAG_ADDR, INSTANT)], T + 150)  # payload_without_record (not a site)
    cap.raw(3, [(T + 160, 1, INSTANT), (a, FLAG_ADDR, INSTANT), (a, FLAG_ADDR, INSTANT)], T + 160)  # extra_payload
    cap.raw(3, [(T + 170, 1, INSTANT), (a, FLAG_ADDR, INSTANT), (0, FLAG_VALUE, INSTANT)], T + 170)  # zero_increments
    cap.raw(3, [(T + 175, 1, INSTANT), (a, FLAG_ADDR, INSTANT), (0xFFFF_FFFE, FLAG_VALUE, INSTANT)], T + 175)  # -2
    cap.raw(3, [(T + 180, 3, BEGIN), (T + 190, 3, END), (a, FLAG_ADDR, INSTANT)], T + 180)  # good
    cap.raw(3, [(T + 192, 3, BEGIN), (T + 194, 3, END), (7, FLAG_VALUE, INSTANT)], T + 192)  # no address first
    ev = flag_events(load_capture(cap.save(tmp_path / "m.npy")))
    assert set(ev.problems) == set(PROBLEMS)
    assert {k: v for k, v in ev.problems.items() if v} == {
        "record_without_address": 2, "wait_without_value": 2, "signal_without_value": 1,
        "payload_without_record": 1, "extra_payload": 1 + 1, "zero_increments": 1, "negative_add": 1}
    t = ev.table
    # rows: the good signal, the extra-payload signal (its first address), the good wait; zero and negative
    # amounts make no add
    assert (t.kind == SIGNAL).sum() == 2 and (t.kind == WAIT).sum() == 1


def test_payloads_the_decoder_orphans_are_its_loss_not_a_flag_problem(tmp_path):
    """A payload whose record the decoder did not keep (an END without its BEGIN) is counted once, in the
    decoder's payload_orphan bucket; the flag table neither sees nor recounts it."""
    sites = [wait_site(2, "a.py:2", expected=1)]
    cap = RankCapture(rank=0, num_blocks=1, sites=sites, flag_buffers=[local()])
    a = (BASE >> 2) & 0xFFFF_FFFF
    cap.raw(0, [(T + 130, 2, END), (a, FLAG_ADDR, INSTANT)], T + 130)
    cap.wait(0, 0, 2, T + 200, T + 300, BASE)
    trace = load_capture(cap.save(tmp_path / "o.npy"))
    assert trace.loss.totals["payload_orphan"] == 1 and trace.payloads.size == 1
    ev = flag_events(trace)
    assert not any(ev.problems.values()) and len(ev.table) == 1


def test_symmetric_buffers_map_to_one_identity(tmp_path):
    world, nbytes = 3, 3 * 4 * 4
    bases = symmetric_bases(world, nbytes, seed=7)
    sites = [signal_site(1, "ag.py:1", scope="sys"), wait_site(2, "ag.py:2", expected=1, scope="sys")]
    for r in range(world):
        cap = RankCapture(rank=r, num_blocks=1, sites=sites, flag_buffers=symmetric_entries("flags", bases, r, nbytes))
        dst = (r + 1) % world  # rank r signals element 5 of the next rank's copy, which waits on it
        cap.signal(0, 0, 1, T + 100, bases[r][dst] + 5 * 4)
        cap.wait(0, 0, 2, T + 50, T + 500, bases[r][r] + 5 * 4)
        cap.save(tmp_path / f"rank_{r}.npy")
    assert len({bases[v][o] for v in range(world) for o in range(world)}) == world * world
    ev = flag_events(load_trace([tmp_path]))
    t = ev.table
    assert not any(ev.problems.values()) and ev.unknown_addresses == 0
    sig, wait = t.kind == SIGNAL, t.kind == WAIT
    assert sorted(zip(t.owner[sig].tolist(), t.offset[sig].tolist())) == [(0, 5), (1, 5), (2, 5)]
    assert (t.owner[sig] == (t.rank[sig] + 1) % world).all() and (t.owner[wait] == t.rank[wait]).all()
    assert set(t.buffers) == {"flags"}


def test_aliasing_ranges_are_ambiguous_and_unknown_addresses_keep_theirs(tmp_path):
    sites = [signal_site(1, "a.py:1")]
    # two buffers 16 GiB apart: the same 32-bit window of addresses
    cap = RankCapture(rank=2, num_blocks=1, sites=sites, flag_buffers=[local("a"), local("b", base=BASE + (1 << 34))])
    cap.signal(0, 0, 1, T + 100, BASE + 4)
    cap.signal(0, 0, 1, T + 200, 0x1234_5670)
    ev = flag_events(load_capture(cap.save(tmp_path / "x.npy")))
    assert ev.problems["ambiguous_address"] == 1 and ev.unknown_addresses == 1
    assert ev.table.buffers[int(ev.table.buffer[0])] == "gmem@0x12345670"
    assert ev.table.owner.tolist() == [2] and ev.table.flag_name(0) == "gmem@0x12345670@rank2[0]"


SIGNAL_ENTRY = {"id": 1, "kind": "signal", "op": "red_add1", "site": "a.py:1", "order": "release", "scope": "gpu",
                "update": "add", "value": 1}
WAIT_ENTRY = {"id": 2, "kind": "wait", "op": "spin_lock_ld_lt_relaxed_wait", "site": "a.py:2", "order": "relaxed",
              "scope": "gpu", "cmp": "ge", "expected": 1}


@pytest.mark.parametrize("entry,key", [
    (dict(SIGNAL_ENTRY, kind="notify"), "flags[0].kind"),
    (dict(SIGNAL_ENTRY, id=5000), "flags[0].id"),
    (dict(WAIT_ENTRY, cmp="gt"), "flags[0].cmp"),
    (dict(WAIT_ENTRY, expected="soon"), "flags[0].expected"),
    ("signal", "flags[0]"),
])
def test_a_bad_site_names_the_capture_and_the_key(tmp_path, entry, key):
    """Read from disk the sidecar's validator refuses it; built in memory (a merged session's parts) the flag
    reader refuses it through the same validator."""
    cap = RankCapture(rank=0, num_blocks=1, sites=[signal_site(1, "a.py:1")], flag_buffers=[local()])
    cap.signal(0, 0, 1, T, BASE)
    path = cap.save(tmp_path / "bad.npy")
    trace = load_capture(path)
    side = json.loads(path.with_suffix(".json").read_text())
    side["flags"] = [entry]
    path.with_suffix(".json").write_text(json.dumps(side))
    with pytest.raises(DecodeError, match=rf"bad\.json.*'{re.escape(key)}"):
        load_capture(path)
    trace.meta["flags"] = [entry]
    with pytest.raises(DecodeError, match=rf"bad\.npy.*'{re.escape(key)}"):
        flag_events(trace)


def test_a_bad_buffer_entry_names_the_key(tmp_path):
    cap = RankCapture(rank=0, num_blocks=1, sites=[signal_site(1, "a.py:1")], flag_buffers=[dict(local(), bytes=0)])
    cap.signal(0, 0, 1, T, BASE)
    with pytest.raises(DecodeError, match=r"'flag_buffers\[0\]\.bytes'"):
        flag_events(load_capture(cap.save(tmp_path / "b.npy")))


def test_equal_times_take_their_payloads_in_order(tmp_path):
    cap = RankCapture(rank=0, num_blocks=1, sites=[signal_site(1, "a.py:1")], flag_buffers=[local()])
    for k in range(4):
        cap.signal(0, 0, 1, T + 64, BASE + 4 * k)  # four signals within one timer step
    t = flag_events(load_capture(cap.save(tmp_path / "e.npy"))).table
    assert t.offset.tolist() == [0, 1, 2, 3]
    assert np.unique(t.end_ns).tolist() == [T + 64]

