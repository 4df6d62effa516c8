"""The host-chain sort of the critical-path graph: one packed stable argsort must give
exactly ``np.lexsort`` 's order (the reference), ties and wide ranges included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.ops.critical_graph import _order, _pack

keys = st.integers(0, 200).flatmap(lambda n: st.tuples(
    st.lists(st.integers(-3, 5), min_size=n, max_size=n),
    st.lists(st.one_of(st.integers(10**18, 10**18 + 40), st.integers(-2**62, 2**62)),
             min_size=n, max_size=n),
    st.lists(st.integers(-4, 4), min_size=n, max_size=n)))


@settings(max_examples=80, deadline=None)
@given(keys)
def test_order_equals_lexsort(k: tuple[list[int], list[int], list[int]]) -> None:
    k1, k2, k3 = (np.array(x, np.int64) for x in k)
    assert (_order(k1, k2, k3) == np.lexsort((k3, k2, k1))).all()


@settings(max_examples=50, deadline=None)
@given(keys)
def test_pack_orders_as_pairs(k: tuple[list[int], list[int], list[int]]) -> None:
    hi, lo, _ = (np.array(x, np.int64) for x in k)
    assert (np.argsort(_pack(hi, lo), kind="stable") == np.lexsort((lo, hi))).all()


def test_narrow_keys_take_the_packed_path() -> None:
    """Typical chain keys (8 ranks x 40 tracks, 10 s of ns, class x depth) fit 62 bits."""
    rng = np.random.default_rng(1)
    n = 10_000
    k1 = rng.integers(0, 320, n)
    k2 = 1_700_000_000_000_000_000 + rng.integers(0, 10_000_000_000, n)
    k3 = rng.integers(0, 400, n)
    assert sum((int(k.max()) - int(k.min()) + 1).bit_length() for k in (k1, k2, k3)) <= 62
    assert (_order(k1, k2, k3) == np.lexsort((k3, k2, k1))).all()
