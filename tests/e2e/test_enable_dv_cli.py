"""``rlcd enable-dv``: a table delta-rs wrote without DVs is upgraded (with consent) so that
``rlcd delete`` works on it, and independent readers still read it right."""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pytest

from tests.e2e.test_delete_cli import ids, rlcd
from tests.integration.tables import append, batch, kernel_rows

pytestmark = pytest.mark.e2e


def protocol(path: Path) -> tuple[int, int, set[str], set[str]]:
    """Reader and writer versions and features, as delta-rs reads them."""
    p = deltalake.DeltaTable(str(path)).protocol()
    readers, writers = set(p.reader_features or ()), set(p.writer_features or ())
    return p.min_reader_version, p.min_writer_version, readers, writers


@pytest.mark.parametrize("partitioned", [False, True])
def test_enable_dv_then_delete(tmp_path: Path, partitioned: bool) -> None:
    """Refused without --yes, shown by --dry-run, committed with --yes; then a delete lands."""
    for i in range(3):
        extra = {"part": [["a", "b"][i % 2]] * 10} if partitioned else {}
        append(
            tmp_path,
            batch(i * 10, 10, **extra),
            partition_by=["part"] if partitioned else None,
            configuration={"delta.appendOnly": "false"} if i == 0 else None,
        )
    before = protocol(tmp_path)
    refused = rlcd("enable-dv", str(tmp_path))
    assert refused.returncode == 2
    assert "reader version 3" in refused.stderr and "--yes" in refused.stderr
    shown = rlcd("enable-dv", str(tmp_path), "--dry-run")
    assert shown.returncode == 0, shown.stderr
    assert "would upgrade the protocol" in shown.stdout
    assert "delta.enableDeletionVectors=true" in shown.stdout
    assert protocol(tmp_path) == before
    done = rlcd("enable-dv", str(tmp_path), "--yes")
    assert done.returncode == 0, done.stderr
    assert "committed version 3" in done.stdout
    reader, writer, readers, writers = protocol(tmp_path)
    assert (reader, writer) == (3, 7) and "deletionVectors" in readers
    assert {"appendOnly", "invariants", "deletionVectors"} <= writers
    config = deltalake.DeltaTable(str(tmp_path)).metadata().configuration
    assert config["delta.enableDeletionVectors"] == "true"
    assert config["delta.appendOnly"] == "false"
    again = rlcd("enable-dv", str(tmp_path))
    assert again.returncode == 0 and "nothing to do" in again.stdout
    deleted = rlcd("delete", str(tmp_path), "--where", "id >= 5 AND id < 15")
    assert deleted.returncode == 0, deleted.stderr
    assert ids(tmp_path) == [*range(5), *range(15, 30)]
    with pytest.raises(deltalake.exceptions.DeltaProtocolError, match="deletionVectors"):
        deltalake.DeltaTable(str(tmp_path)).to_pyarrow_table()  # as READER_WARNING says
    assert sorted(dict(r)["id"] for r in kernel_rows(tmp_path).elements()) == ids(tmp_path)
    commit = tmp_path / "_delta_log" / f"{3:020d}.json"
    kinds = [next(iter(json.loads(line))) for line in commit.read_text().splitlines()]
    assert kinds == ["commitInfo", "protocol", "metaData"]
