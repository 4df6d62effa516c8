"""Enum labels in ``args`` written inline (``CASE ref WHEN id THEN 'label' ... ELSE ref
END``) against the per-row look-up they replace (``coalesce((SELECT label FROM enum
WHERE id = ref), ref)``), evaluated by SQLite on the same rows, including values of
other types, codes without a label, NULL labels and quotes in labels."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.io.nsys_schema import Catalog, _enum_case

VALUES = st.one_of(st.none(), st.integers(-3, 6), st.sampled_from(
    [1.0, 1.5, "1", " 2", "x", b"\x01"]))
LABELS = st.one_of(st.none(), st.sampled_from(["None", "It's", "", "Ünï", "L1"]))


def _compare(enum_rows: list[tuple[int, str | None]], values: list[object]) -> None:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE E (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)")
    con.executemany("INSERT INTO E VALUES (?, 'n', ?)", enum_rows)
    con.execute("CREATE TABLE T (k INTEGER)")
    con.executemany("INSERT INTO T VALUES (?)", [(v,) for v in values])
    labels = _enum_case(Catalog(con, "t"), "E")
    assert labels is not None
    inline = f"CASE a.k {labels}ELSE a.k END" if labels else "a.k"
    lookup = "coalesce((SELECT label FROM E WHERE id = a.k), a.k)"
    got = con.execute(f"SELECT {inline}, typeof({inline}) FROM T AS a ORDER BY rowid").fetchall()
    want = con.execute(f"SELECT {lookup}, typeof({lookup}) FROM T AS a ORDER BY rowid").fetchall()
    assert got == want


def test_by_hand() -> None:
    _compare([(0, "None"), (1, "It's"), (2, None), (5, "Ünï")],
             [0, 1, 2, 3, 5, None, 1.0, 1.5, "1", " 2", b"\x01"])


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(-2, 5), LABELS, max_size=6), st.lists(VALUES, max_size=20))
def test_same_as_the_lookup(enum: dict[int, str | None], values: list[object]) -> None:
    _compare(sorted(enum.items()), values)


def test_large_or_untyped_enum_keeps_the_lookup(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / "e.sqlite")
    con.execute("CREATE TABLE BIG (id INTEGER PRIMARY KEY, label TEXT)")
    con.executemany("INSERT INTO BIG VALUES (?, 'l')", [(i,) for i in range(100)])
    con.execute("CREATE TABLE LOOSE (id, label TEXT)")
    con.execute("INSERT INTO LOOSE VALUES (1, 'a')")
    con.execute("CREATE TABLE BLOBBY (id INTEGER PRIMARY KEY, label)")
    con.execute("INSERT INTO BLOBBY VALUES (1, x'00ff')")
    cat = Catalog(con, "e")
    assert _enum_case(cat, "BIG") is None
    assert _enum_case(cat, "LOOSE") is None
    assert _enum_case(cat, "BLOBBY") is None
