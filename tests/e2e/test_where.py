"""``rlcd compact --where`` as a user runs it: values compare by the partition column's type,
and a predicate that cannot mean what was written is refused before anything is written."""

from __future__ import annotations

import collections
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from tests.e2e.cli import rlcd
from tests.integration.tables import append, batch, delta_rs_rows

pytestmark = pytest.mark.e2e


def int_partitioned(path: Path) -> None:
    """Six files, three in each of the integer partitions n=1 and n=2."""
    for i in range(6):
        n = pa.array([1 + i % 2] * 20, pa.int32())
        append(path, batch(i * 20, 20).append_column("n", n), partition_by=["n"])


def files_per_partition(path: Path) -> dict[str, int]:
    actions = deltalake.DeltaTable(str(path)).get_add_actions(flatten=True)
    return dict(collections.Counter(str(n) for n in actions.column("partition.n").to_pylist()))


def test_where_matches_an_integer_partition_by_value(tmp_path: Path) -> None:
    """--where "n = 1.0" compacts the three files of partition n=1 and leaves n=2 alone."""
    int_partitioned(tmp_path)
    rows = delta_rs_rows(tmp_path)
    done = rlcd("compact", str(tmp_path), "--where", "n = 1.0")
    assert done.returncode == 0, done.stderr
    assert "committed version 6" in done.stdout
    assert files_per_partition(tmp_path) == {"1": 1, "2": 3}
    assert delta_rs_rows(tmp_path) == rows


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One table for the refusals, which must leave it as it is."""
    path = tmp_path_factory.mktemp("where")
    int_partitioned(path)
    return path


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("n = 1.5", "predicate 'n = 1.5': 1.5 is not an integer, so n = 1.5 would be false"),
        ("id = 1", "'id' is not a partition column (partition columns: n)"),
        ("n = one", "one is not a value: put a string in single quotes ('one')"),
        ("", "predicate '': the predicate is empty"),
        ("n IN (1, 2", "expected ), found nothing (at the end)"),
    ],
)
def test_a_bad_predicate_exits_2_naming_it(untouched: Path, where: str, message: str) -> None:
    """A predicate that does not parse or does not fit the table is a usage error (exit 2)
    with a message quoting it and naming the table once, and nothing is written but the run's
    lease, released (taken before the predicate meets the table's schema)."""
    files = sorted(p for p in untouched.rglob("*") if p.name != "_rlcd")
    result = rlcd("compact", str(untouched), "--where", where)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stderr.count(untouched.name) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p for p in untouched.rglob("*") if p.name != "_rlcd") == files
    assert not any((untouched / "_rlcd").glob("*"))
