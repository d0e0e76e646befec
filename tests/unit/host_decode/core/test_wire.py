import numpy as np
import pytest

from host_decode.core import wire


def test_tag_fields_round_trip():
    lane = np.array([0, 1, wire.MAX_LANES - 1], np.int64)
    ev = np.array([0, 1023, 517], np.int64)
    ty = np.array([0, 3, 2], np.int64)
    timer = np.array([0, 0xFFFF_FFFF, 123456], np.int64)
    rec = wire.pack_records(timer, lane, ev, ty)
    t, lanes, e, y = wire.unpack_records(rec)
    assert (t == timer).all() and (lanes == lane).all() and (e == ev).all() and (y == ty).all()


def test_tag_matches_v1_definition():
    assert wire.make_tag(5, 3, 1) == (5 << 12) | (3 << 2) | 1
    assert wire.pack_record(7, wire.make_tag(5, 3, 1)) == (7 << 32) | (5 << 12) | (3 << 2) | 1


def test_header_and_limits():
    assert wire.unpack_header(wire.pack_header(132, 3)) == (132, 3)
    assert wire.pack_header(7, 2) == (2 << 32) | 7
    with pytest.raises(ValueError, match="exceeds"):
        wire.pack_header(wire.MAX_LANES, 2)
    with pytest.raises(ValueError):
        wire.pack_header(0, 1)


def test_layout_and_reserved_ids():
    assert wire.slot_index(3, 2, 10) == 1 + 3 + 20
    assert wire.buffer_slots(10, 4) == 41
    assert wire.user_capacity(16) == 12
    assert len(set(wire.RESERVED_INSTANT_IDS)) == 5 and max(wire.RESERVED_INSTANT_IDS) == wire.MAX_EVENT_ID
    assert set(wire.PAYLOAD_IDS) < set(wire.RESERVED_INSTANT_IDS)
    assert (wire.FLAG_ADDR_EVENT_ID, wire.FLAG_VALUE_EVENT_ID, wire.MAX_USER_EVENT_ID) == (1020, 1019, 1018)
    assert wire.MAX_USER_EVENT_ID < min(wire.RESERVED_INSTANT_IDS)
    assert wire.block_linear(1, 2, 3, 4, 5) == 1 + 2 * 4 + 3 * 20
