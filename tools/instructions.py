"""Instructions per claim, counted by callgrind: what a claim costs, whatever the load.

``python -m tools.instructions [--case claim|sql|claim_outcome|effect] [--small N] [--large M]``
runs a case of ``ledger bench`` with the disk taken out (``synchronous=OFF``, as its
``cpu_off`` and ``sql_off`` cases) twice under ``valgrind --tool=callgrind``, once with
N operations and once with M, and prints the instructions one operation costs: the
difference of the two runs over M - N, so that start-up, imports and warm-up cancel out.
It splits them by where they ran, from each function's own cost: Python (the
interpreter running the library's and the stdlib's code, and its extension modules, the
``sqlite3`` binding included), SQLite's library, the C library, and the rest (hashing's
``libcrypto``, the loader). Instruction counts do not depend on the machine's load, so
two versions of the code compare on a busy machine, and a change says what it bought.

Needs valgrind (Debian's package ``valgrind``); not installed with the package.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

__all__ = ["count", "main"]

CASES = ("claim", "sql", "claim_outcome", "effect")

# The child: one case, ``n`` operations after its warm-up, on a fresh directory.
CHILD = """
import sys
from pathlib import Path
from ledger._bench import cases

case, directory, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
if case == "claim":
    off = cases.CpuOff(directory / "store")
    off.chunk(n)
    off.keeper.close()
elif case == "sql":
    sql = cases.Sql(directory / "store", "OFF")
    sql.chunk(n)
    sql.conn.close()
else:
    with cases._unsynchronised(directory / "store"):
        library = cases.Library(directory / "store")
        try:
            getattr(library, case)(n)
        finally:
            library.close()
"""

_NAMED = re.compile(r"^(ob|fl|fi|fe|fn|cob|cfi|cfl|cfn)=\((\d+)\)(?: (.*))?$")


def _group(objects: str) -> str:
    """Where an object's instructions count.

    SQLite's library, Python (the interpreter and its extension modules, the ``sqlite3``
    binding included), the C library, or other.
    """
    name = Path(objects).name
    if name.startswith("libsqlite3"):
        return "sqlite"
    if "python" in name or ".cpython-" in name:
        return "python"
    if name.startswith(("libc.", "libc-", "ld-linux", "libm.")):
        return "libc"
    return "other"


def _self_costs(path: Path) -> dict[str, int]:
    """Each object's own instructions (not those of what it calls) in a callgrind file."""
    objects: dict[str, str] = {}  # objects, files and functions are numbered apart
    costs: dict[str, int] = defaultdict(int)
    current = "?"
    skip_next = False
    for line in path.read_text(errors="replace").splitlines():
        named = _NAMED.match(line)
        if named:
            kind, ident, name = named.groups()
            if kind in {"ob", "cob"} and name is not None:
                objects[ident] = name
            if kind == "ob":
                current = objects.get(ident, "?")
            continue
        if line.startswith("calls="):
            skip_next = True  # the next cost line is the call's inclusive cost
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            if skip_next:
                skip_next = False
                continue
            fields = line.split()
            if len(fields) >= 2:
                costs[_group(current)] += int(fields[1])
    return dict(costs)


def _run(case: str, operations: int, scratch: Path) -> dict[str, int]:
    out = scratch / f"callgrind.{case}.{operations}"
    directory = scratch / f"{case}-{operations}"
    directory.mkdir()
    env = os.environ | {"PYTHONHASHSEED": "0"}
    subprocess.run(  # noqa: S603 - valgrind on this Python, with our own child
        [  # noqa: S607 - valgrind, wherever the PATH has it
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--compress-strings=yes",
            "--compress-pos=no",
            sys.executable,
            "-c",
            CHILD,
            case,
            str(directory),
            str(operations),
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return _self_costs(out)


def count(case: str, small: int, large: int) -> dict[str, float]:
    """Instructions per operation of ``case``, by group (python, sqlite, libc, other, total)."""
    with tempfile.TemporaryDirectory(prefix="ledger-instructions-") as scratch:
        low = _run(case, small, Path(scratch))
        high = _run(case, large, Path(scratch))
    groups = sorted(set(low) | set(high))
    per = {g: (high.get(g, 0) - low.get(g, 0)) / (large - small) for g in groups}
    per["total"] = sum(per.values())
    return per


def main(argv: Sequence[str] | None = None) -> int:
    """Print a case's instructions per operation, by group; 0 when measured."""
    parser = argparse.ArgumentParser(prog="python -m tools.instructions", description=__doc__)
    parser.add_argument("--case", choices=CASES, default="claim")
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--large", type=int, default=250)
    args = parser.parse_args(argv)
    if args.large <= args.small:
        parser.error("--large must be more than --small")
    per = count(args.case, args.small, args.large)
    out = sys.stdout
    out.write(f"{args.case}: instructions per operation ({args.small} and {args.large})\n")
    for group, value in sorted(per.items(), key=lambda kv: (kv[0] == "total", -kv[1])):
        out.write(f"  {group:<8} {value:>12,.0f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
