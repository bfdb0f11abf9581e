"""Server-side part copies on moto's S3 (issue 39, phase 3): a copied run of at least 5 MiB
becomes ``UploadPartCopy`` parts, the rest is fetched and uploaded, S3's part rules hold (moto
refuses a short part that is not the last one), and the output is byte for byte what the
local path writes. A refused copy falls back to fetching, said once in the log."""

from __future__ import annotations

import random
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import WriterProperties
from structlog.testing import capture_logs

from rlcd.compaction._copy import CopiedBytes, LocalFiles, write_streamed
from rlcd.compaction.compact import CompactionReport, compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.daemon.metrics import Metrics
from rlcd.errors import CopyRefusedError
from rlcd.operations.verify import verify_table
from rlcd.parquet.assemble import Assembly, EncodedRange, Piece, SourceRange
from rlcd.storage import MIN_PART_SIZE, open_store
from rlcd.storage._multipart import CopyingWriter, Pieces
from rlcd.storage.base import ObjectMeta, ObjectStore
from rlcd.storage.metered import MeteredStore
from tests.contract.support import boto_client, moto_config
from tests.integration.tables import S3Mirror, delta_rs_rows

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

P = MIN_PART_SIZE
MIB = 2**20
MAGIC = b"PAR1"
FOOTER = b"footer-bytes" * 100
_random = random.Random(39)
OBJECTS = {"a": MAGIC + _random.randbytes(12 * MIB), "b": _random.randbytes(12 * MIB)}
ENCODED = _random.randbytes(2 * MIB + 10)


@pytest.fixture
async def store(s3_bucket: str, moto_endpoint: str) -> AsyncIterator[MeteredStore]:
    """A metered S3 store on moto holding ``OBJECTS``."""
    async with open_store(f"s3://{s3_bucket}/t", s3=moto_config(moto_endpoint)) as inner:
        for key, data in OBJECTS.items():
            await inner.put(key, data)
        metered = MeteredStore(inner)
        yield metered


def _assembly(pieces: Sequence[Piece]) -> Assembly:
    return Assembly(tuple(pieces), len(_expected(pieces)), (), b"")


def _expected(pieces: Sequence[Piece]) -> bytes:
    keys = list(OBJECTS)
    out = bytearray()
    for piece in pieces:
        if isinstance(piece, bytes):
            out += piece
        elif isinstance(piece, SourceRange):
            out += OBJECTS[keys[piece.source]][piece.start : piece.stop]
        else:
            out += ENCODED[piece.start : piece.stop]
    return bytes(out)


def A(start: int, stop: int) -> SourceRange:
    return SourceRange(0, start, stop)


def B(start: int, stop: int) -> SourceRange:
    return SourceRange(1, start, stop)


ENCODED_THEN_SHORT: list[Piece] = [EncodedRange(2 * MIB, 2 * MIB + 10), B(0, 3 * MIB), FOOTER]

CASES: dict[str, tuple[list[Piece], int]] = {
    # pieces, and the row group bytes S3 copies itself
    "a run just under a part: fetched": ([MAGIC, A(4, P - 1), FOOTER], 0),
    "a run of a part with the magic: copied": ([MAGIC, A(4, P), FOOTER], P - 4),
    "a run just over a part: copied": ([MAGIC, A(4, P + 1), FOOTER], P - 3),
    "a short run between two long ones": (
        [MAGIC, A(4, 4 + 6 * MIB), B(0, 1000), B(1000, 1000 + 11 * MIB), FOOTER],
        6 * MIB + 11 * MIB - (P - 1000),
    ),
    "encoded runs around a copied one": (
        [MAGIC, EncodedRange(0, 2 * MIB), A(100, 100 + 8 * MIB), *ENCODED_THEN_SHORT],
        8 * MIB - (P - 2 * MIB - 4),
    ),
    "the first run past the magic cannot take it": ([MAGIC, A(5, 5 + 6 * MIB), FOOTER], 0),
}


async def _write(store: ObjectStore, pieces: Sequence[Piece], tmp_path: Path) -> CopiedBytes:
    encoded = tmp_path / "encoded"
    encoded.write_bytes(ENCODED)
    async with store.open_writer("out") as writer:
        local = LocalFiles(str(encoded), "")
        moved = await write_streamed(store, writer, _assembly(pieces), list(OBJECTS), local)
        await writer.complete()
    return moved


@pytest.mark.parametrize("case", list(CASES))
async def test_copied_runs_keep_s3s_part_rules(
    store: MeteredStore, tmp_path: Path, s3_bucket: str, moto_endpoint: str, case: str
) -> None:
    """The output holds the pieces' bytes in order (moto refuses to complete an upload with a
    short part before the last), copied by S3 where a run allows it, and no upload is left."""
    pieces, server = CASES[case]
    moved = await _write(store, pieces, tmp_path)
    client = boto_client(moto_endpoint)
    body = client.get_object(Bucket=s3_bucket, Key="t/out")["Body"].read()
    assert body == _expected(pieces)
    assert moved.server == server
    magic_copied = server and pieces[1] == A(4, pieces[1].stop)  # type: ignore[union-attr]
    assert store.bytes["copy"] == server + (4 if magic_copied else 0)
    # what passed through rlcd: the rest of the output, and the magic check's 4 bytes
    fetched = sum(p.stop - p.start for p in pieces if isinstance(p, SourceRange)) - server
    assert store.bytes["get"] == fetched + (4 if magic_copied else 0)
    assert not client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads")


class RefusingSink:
    """A :class:`~rlcd.storage._multipart.PartCopySink` in memory whose store refuses every
    copy, as S3 does when the credentials may not read the copy source (moto cannot)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.refused = 0

    async def put_whole(self, _key: str, _data: Pieces) -> ObjectMeta:
        raise AssertionError("an output of copies is a multipart upload")

    async def start_upload(self, _key: str) -> str:
        return "upload"

    async def upload_part(self, _key: str, _upload_id: str, number: int, data: Pieces) -> str:
        self.parts.append(b"".join(data))
        return str(number)

    async def copy_part(
        self, key: str, _upload_id: str, _number: int, source: str, _start: int, _stop: int
    ) -> str:
        self.refused += 1
        raise CopyRefusedError(f"{source}: AccessDenied (HTTP 403)", operation="copy", key=key)

    async def complete_upload(self, key: str, _upload_id: str, _tags: Sequence[str]) -> ObjectMeta:
        assert all(len(part) >= P for part in self.parts[:-1])
        return ObjectMeta(key, sum(map(len, self.parts)), 0)

    async def abort_upload(self, _key: str, _upload_id: str) -> None:
        raise AssertionError("a refusal does not abort")


async def test_a_refused_copy_falls_back_to_fetching(store: MeteredStore, tmp_path: Path) -> None:
    """The first refusal is logged once and the rest of the output fetched: the same bytes."""
    pieces, _ = CASES["a short run between two long ones"]
    sink = RefusingSink()
    encoded = tmp_path / "encoded"
    encoded.write_bytes(ENCODED)
    with capture_logs() as logs:
        async with CopyingWriter("out", sink) as writer:
            moved = await write_streamed(
                store, writer, _assembly(pieces), list(OBJECTS), LocalFiles(str(encoded), "")
            )
    assert b"".join(sink.parts) == _expected(pieces)
    assert moved.server == 0 and sink.refused == 1
    refusals = [e for e in logs if e["event"] == "part_copy_refused"]
    assert len(refusals) == 1 and "AccessDenied" in refusals[0]["error"]


# --- whole compactions: the S3 output is the local one, byte for byte ------------------------


def _table(path: Path) -> None:
    """Four appends of 3 MiB row groups (random bytes: any codec keeps them as they are), two
    each, four in the last; the second append snappy and the others zstd, the output's codec.
    With ``recompress`` the second is re-encoded between copied runs: the third run must lead
    with fetched bytes, leaving too few to copy, and the fourth, long enough, is copied after
    its lead."""
    rng = random.Random(7)
    start = 0
    for f, rows in enumerate((6_000, 6_000, 6_000, 12_000)):
        ids = range(start, start + rows)
        start += rows
        table = pa.table(
            {"id": pa.array(ids, pa.int64()), "blob": [rng.randbytes(1024) for _ in ids]}
        )
        props = WriterProperties(
            max_row_group_size=3_000, compression="SNAPPY" if f == 1 else "ZSTD"
        )
        deltalake.write_deltalake(str(path), table, mode="append", writer_properties=props)


async def _compact(uri: str, s3: Any = None) -> CompactionReport:
    async with open_store(uri, s3=s3) as store:
        policy = CompactionPolicy(min_copy_row_group=1, recompress=True)
        report = await compact_table(store, policy)
        assert report.committed_version is not None and not report.failed
        assert (await verify_table(store)).ok
    return report


async def test_an_s3_output_of_server_copies_is_the_local_output(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    source = tmp_path / "source"
    _table(source)
    before = delta_rs_rows(source)
    local = tmp_path / "local"
    shutil.copytree(source, local)
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(source, "tables/t")
    on_s3 = await _compact(uri, mirror.config)
    on_disk = await _compact(str(local))
    [done] = on_s3.committed
    [done_local] = on_disk.committed
    assert done.copied_row_groups == 8 and done_local.server_copied_bytes == 0
    # the first run and most of the last are copied by S3, the third fetched
    assert 12 * MIB < done.server_copied_bytes < done.copied_bytes - 5 * MIB
    assert done.copied_bytes == done_local.copied_bytes
    remote = mirror.download("tables/t", tmp_path / "remote")
    assert done.path is not None and done_local.path is not None
    assert (remote / done.path).read_bytes() == (local / done_local.path).read_bytes()
    assert delta_rs_rows(remote) == before == delta_rs_rows(local)
    assert mirror.multipart_uploads() == 0
    metrics = Metrics()
    metrics.record_compaction("t", on_s3, now_s=0)
    copied = {
        where: metrics.registry.get_sample_value(
            "rlcd_bytes_copied_total", {"table": "t", "where": where}
        )
        for where in ("server", "local")
    }
    server = done.server_copied_bytes
    assert copied == {"server": server, "local": done.copied_bytes - server}
