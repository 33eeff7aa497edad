"""tools.instructions: its callgrind parser, on small files written by hand.

No valgrind here: the files are in callgrind's own format (name compression, calls
with their inclusive cost line, relative positions), as ``--compress-strings=yes``
writes them, and the figures expected are added up by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.instructions import _group, _self_costs

# Two objects and the C library. ``main`` (python) runs 100 + 20 of its own and calls
# into SQLite (inclusive 5000, not its own); sqlite3_step runs 3000 + 1000 + 7 and calls
# memset (inclusive 400); memset runs 400. The second ``ob=(2)`` comes back without its
# name, as compressed files name each object once.
CALLGRIND = """\
# callgrind format
version: 1
creator: callgrind-3.22.0
pid: 4242
cmd: python -c ...
part: 1

desc: I1 cache:
positions: line
events: Ir

ob=(1) /usr/bin/python3.12
fl=(1) Python/ceval.c
fn=(1) main
10 100
+2 20
cob=(2) /usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6
cfi=(2) sqlite3.c
cfn=(2) sqlite3_step
calls=3 500
12 5000

ob=(2)
fl=(2)
fn=(2)
500 3000
-10 1000
* 7
cob=(3) /usr/lib/x86_64-linux-gnu/libc.so.6
cfi=(3) ???
cfn=(3) memset
calls=41 0
501 400

ob=(3)
fl=(3)
fn=(3)
0 400

ob=(4) /usr/lib/x86_64-linux-gnu/libcrypto.so.3
fl=(4) ???
fn=(4) SHA256_Update
0 9

totals: 4536
"""


def test_self_costs_count_each_objects_own_instructions(tmp_path: Path) -> None:
    """Own costs by group; a call's inclusive cost line is not counted twice."""
    path = tmp_path / "callgrind.out"
    path.write_text(CALLGRIND)
    assert _self_costs(path) == {"python": 120, "sqlite": 4007, "libc": 400, "other": 9}


def test_self_costs_add_up_to_the_totals_line(tmp_path: Path) -> None:
    """Every instruction is counted once: the groups sum to callgrind's own total."""
    path = tmp_path / "callgrind.out"
    path.write_text(CALLGRIND)
    assert sum(_self_costs(path).values()) == 120 + 4007 + 400 + 9 == 4536


def test_self_costs_of_a_file_without_costs_are_empty(tmp_path: Path) -> None:
    path = tmp_path / "callgrind.out"
    path.write_text("version: 1\npositions: line\nevents: Ir\n")
    assert _self_costs(path) == {}


@pytest.mark.parametrize(
    ("objects", "group"),
    [
        ("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6", "sqlite"),
        ("/usr/bin/python3.12", "python"),
        ("/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0", "python"),
        ("/usr/lib/python3.12/lib-dynload/_sqlite3.cpython-312-x86_64-linux-gnu.so", "python"),
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", "libc"),
        ("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "libc"),
        ("/usr/lib/x86_64-linux-gnu/libm.so.6", "libc"),
        ("/usr/lib/x86_64-linux-gnu/libcrypto.so.3", "other"),
        ("???", "other"),
    ],
)
def test_group_places_each_object(objects: str, group: str) -> None:
    """SQLite, Python (its extension modules with it), the C library and the loader, or other."""
    assert _group(objects) == group
