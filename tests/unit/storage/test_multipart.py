"""The streaming writer's buffering and failure handling, over an in-memory sink."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.lowlevel
import pytest
from structlog.testing import capture_logs

from rlcd.errors import StorageError, TransientStorageError
from rlcd.storage._multipart import MultipartWriter, Pieces
from rlcd.storage.base import MIN_PART_SIZE, ObjectMeta

pytestmark = pytest.mark.anyio

P = MIN_PART_SIZE


class Sink:
    """Records every call; ``fail`` names a method that raises a transient error."""

    def __init__(self, fail: str | None = None, fail_abort: bool = False) -> None:
        self.calls: list[str] = []
        self.parts: list[bytes] = []
        self.whole: bytes | None = None
        self.fail = fail
        self.fail_abort = fail_abort

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail:
            raise TransientStorageError("SlowDown", operation=name, key="k")

    async def put_whole(self, key: str, data: Pieces) -> ObjectMeta:
        self._call("put_whole")
        self.whole = b"".join(data)
        return ObjectMeta(key, len(self.whole), 0)

    async def start_upload(self, _key: str) -> str:
        self._call("start_upload")
        return "upload-1"

    async def upload_part(self, _key: str, upload_id: str, number: int, data: Pieces) -> str:
        self._call("upload_part")
        assert (upload_id, number) == ("upload-1", len(self.parts) + 1)
        self.parts.append(b"".join(data))
        return f"etag-{number}"

    async def complete_upload(self, key: str, _upload_id: str, tags: Sequence[str]) -> ObjectMeta:
        self._call("complete_upload")
        assert list(tags) == [f"etag-{n}" for n in range(1, len(self.parts) + 1)]
        return ObjectMeta(key, sum(map(len, self.parts)), 0)

    async def abort_upload(self, key: str, _upload_id: str) -> None:
        await anyio.lowlevel.checkpoint()  # must run even when the writer was cancelled
        self.calls.append("abort_upload")
        if self.fail_abort:
            raise StorageError("AccessDenied", operation="abort", key=key)


async def fail_inside(writer: MultipartWriter) -> None:
    """Write more than a part, then fail the way an encoder would."""
    async with writer:
        await writer.write(b"x" * (P + 1))
        raise KeyError("bad row")


def chunks(total: int, size: int) -> list[bytes]:
    return [
        bytes([n % 251]) * min(size, total - start) for n, start in enumerate(range(0, total, size))
    ]


async def test_small_object_is_one_put() -> None:
    """Less than a part in total goes out whole at complete, never as a multipart upload."""
    sink = Sink()
    async with MultipartWriter("k", sink) as writer:
        for chunk in chunks(P - 1, 1000):
            await writer.write(chunk)
        assert sink.calls == []
    assert sink.calls == ["put_whole"]
    assert sink.whole == b"".join(chunks(P - 1, 1000))


async def test_empty_object_is_one_put() -> None:
    """A writer completed without writes stores an empty object."""
    sink = Sink()
    assert await MultipartWriter("k", sink).complete() == ObjectMeta("k", 0, 0)
    assert sink.whole == b""


@pytest.mark.parametrize("write_size", [7_777, 999_983, P, 3 * P + 17])
async def test_parts_are_exactly_part_size_but_the_last(write_size: int) -> None:
    """Whatever the write sizes, every part but the last is exactly part_size bytes, and the
    parts are the data in order."""
    data = chunks(2 * P + P // 2, write_size)
    sink = Sink()
    async with MultipartWriter("k", sink) as writer:
        for chunk in data:
            await writer.write(chunk)
    assert [len(part) for part in sink.parts[:-1]] == [P] * (len(sink.parts) - 1)
    assert 0 < len(sink.parts[-1]) <= P
    assert b"".join(sink.parts) == b"".join(data)
    assert sink.calls[0] == "start_upload"
    assert sink.calls[-1] == "complete_upload"


async def test_parts_go_out_as_they_fill() -> None:
    """A full part is sent during write, so at most one part is ever buffered."""
    sink = Sink()
    writer = MultipartWriter("k", sink)
    await writer.write(b"a" * (P - 1))
    assert sink.parts == []
    await writer.write(b"ab")
    assert [len(part) for part in sink.parts] == [P]
    await writer.complete()
    assert [len(part) for part in sink.parts] == [P, 1]


async def test_exactly_one_part_is_a_one_part_upload() -> None:
    """An object of exactly part_size bytes is one full part, with nothing left at complete."""
    sink = Sink()
    async with MultipartWriter("k", sink) as writer:
        await writer.write(b"x" * P)
    assert sink.calls == ["start_upload", "upload_part", "complete_upload"]


async def test_larger_part_size() -> None:
    """part_size may be larger than S3's minimum, but not smaller."""
    sink = Sink()
    async with MultipartWriter("k", sink, part_size=2 * P) as writer:
        await writer.write(b"x" * (3 * P))
    assert [len(part) for part in sink.parts] == [2 * P, P]
    with pytest.raises(ValueError, match="below the minimum"):
        MultipartWriter("k", sink, part_size=P - 1)


@pytest.mark.parametrize("failing", ["upload_part", "complete_upload"])
async def test_sink_failure_aborts_and_propagates(failing: str) -> None:
    """When a part or the completion fails for good, the upload is aborted and the error
    propagates; the writer is then unusable."""
    sink = Sink(fail=failing)
    writer = MultipartWriter("k", sink)

    async def write_and_complete() -> None:
        await writer.write(b"x" * P)
        await writer.complete()

    with pytest.raises(TransientStorageError):
        await write_and_complete()
    assert sink.calls[-1] == "abort_upload"
    with pytest.raises(StorageError, match="completed or aborted"):
        await writer.write(b"x")


async def test_failed_small_put_needs_no_abort() -> None:
    """A failed single put leaves nothing to abort."""
    sink = Sink(fail="put_whole")
    with pytest.raises(TransientStorageError):
        await MultipartWriter("k", sink).complete()
    assert sink.calls == ["put_whole"]


async def test_exception_in_block_aborts() -> None:
    """An exception inside the block aborts instead of completing."""
    sink = Sink()
    with pytest.raises(KeyError):
        await fail_inside(MultipartWriter("k", sink))
    assert sink.calls == ["start_upload", "upload_part", "abort_upload"]


async def test_cancellation_still_aborts() -> None:
    """A cancelled writer aborts its upload under a shield, even though abort awaits."""
    sink = Sink()
    with anyio.CancelScope() as scope:
        async with MultipartWriter("k", sink) as writer:
            await writer.write(b"x" * (P + 1))
            scope.cancel()
            await anyio.sleep(1)
    assert sink.calls == ["start_upload", "upload_part", "abort_upload"]


async def test_failed_cleanup_abort_is_logged_not_raised() -> None:
    """If the cleanup abort fails too, the original error propagates and the failure is logged."""
    sink = Sink(fail_abort=True)
    with capture_logs() as logs, pytest.raises(KeyError):
        await fail_inside(MultipartWriter("k", sink))
    assert [(e["event"], e["key"]) for e in logs] == [("multipart_abort_failed", "k")]


async def test_explicit_abort_reports_failure_and_can_be_repeated() -> None:
    """An explicit abort raises its failure, and may be called again to retry it."""
    sink = Sink(fail_abort=True)
    writer = MultipartWriter("k", sink)
    await writer.write(b"x" * (P + 1))
    with pytest.raises(StorageError, match="AccessDenied"):
        await writer.abort()
    sink.fail_abort = False
    await writer.abort()
    await writer.abort()
    assert sink.calls.count("abort_upload") == 2


async def test_explicit_complete_inside_block() -> None:
    """Completing inside the block returns the metadata; leaving the block does not repeat it."""
    sink = Sink()
    async with MultipartWriter("k", sink) as writer:
        await writer.write(b"abc")
        assert await writer.complete() == ObjectMeta("k", 3, 0)
    assert sink.calls == ["put_whole"]
