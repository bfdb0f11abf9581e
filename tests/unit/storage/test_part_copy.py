"""The copying writer's part rules (S3's: every part but the last at least 5 MiB, at most
5 GiB, at most 10,000 parts) and its refusals, over an in-memory sink that copies ranges of
objects it holds."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rlcd.errors import CopyRefusedError, StorageError, TransientStorageError
from rlcd.storage._multipart import CopyingWriter, Pieces, _part_ends
from rlcd.storage.base import MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE, ObjectMeta

pytestmark = pytest.mark.anyio

P = MIN_PART_SIZE
SOURCE = bytes(range(256)) * (3 * P // 256)
"""A 15 MiB object the sink holds under the key ``src``."""


class CopySink:
    """Holds ``src``; records every part as bytes, and the range each copy named (``ranges``;
    the bytes are left empty where ``src`` is not big enough to hold it). ``refuse`` lists the
    copy calls (0-based) that are refused; ``fail`` those that fail for good."""

    def __init__(self, refuse: Sequence[int] = (), fail: Sequence[int] = ()) -> None:
        self.parts: list[bytes] = []
        self.ranges: list[tuple[int, int]] = []
        self.copies = 0
        self.refuse, self.fail = set(refuse), set(fail)
        self.aborted = False
        self.completed = False

    async def put_whole(self, key: str, data: Pieces) -> ObjectMeta:
        self.parts = [b"".join(data)]
        return ObjectMeta(key, len(self.parts[0]), 0)

    async def start_upload(self, _key: str) -> str:
        return "upload-1"

    async def upload_part(self, _key: str, _upload_id: str, number: int, data: Pieces) -> str:
        assert number == len(self.parts) + 1
        self.parts.append(b"".join(data))
        return f"etag-{number}"

    async def copy_part(
        self, key: str, _upload_id: str, number: int, source: str, start: int, stop: int
    ) -> str:
        call, self.copies = self.copies, self.copies + 1
        if call in self.refuse:
            raise CopyRefusedError("AccessDenied (HTTP 403)", operation="copy", key=key)
        if call in self.fail:
            raise TransientStorageError("InternalError (HTTP 500)", operation="copy", key=key)
        assert number == len(self.parts) + 1 and source == "src"
        self.ranges.append((start, stop))
        self.parts.append(SOURCE[start:stop] if stop <= len(SOURCE) else b"")
        return f"etag-{number}"

    async def complete_upload(self, key: str, _upload_id: str, tags: Sequence[str]) -> ObjectMeta:
        assert len(tags) == len(self.parts)
        assert all(len(part) >= P for part in self.parts[:-1]), self.sizes()
        self.completed = True
        return ObjectMeta(key, sum(map(len, self.parts)), 0)

    async def abort_upload(self, _key: str, _upload_id: str) -> None:
        self.aborted = True

    def sizes(self) -> list[int]:
        return [len(part) for part in self.parts]

    def body(self) -> bytes:
        return b"".join(self.parts)


async def append(writer: CopyingWriter, start: int, stop: int) -> bool:
    """Append ``SOURCE[start:stop]`` as a caller does: copied when the writer can, after the
    lead it asks for; True when copied."""
    lead = writer.lead(stop - start)
    if lead is None:
        await writer.write(SOURCE[start:stop])
        return False
    await writer.write(SOURCE[start : start + lead])
    await writer.copy("src", start + lead, stop)
    return True


@pytest.mark.parametrize(
    ("buffered", "length", "lead"),
    [
        (0, P - 1, None),  # just under a part: fetched
        (0, P, 0),  # just a part: copied whole
        (4, P, None),  # the part before it must be filled first, leaving too little
        (4, 2 * P - 4, P - 4),
        (4, 2 * P - 5, None),
        (P - 1, P + 1, 1),
    ],
)
async def test_lead_fills_the_part_before_a_copy(buffered: int, length: int, lead: int) -> None:
    writer = CopyingWriter("k", CopySink())
    await writer.write(b"x" * buffered)
    assert writer.lead(length) == lead


async def test_a_part_bigger_than_the_minimum_is_sent_before_the_copy() -> None:
    """With 8 MiB parts, 6 MiB written are a part of their own: nothing to lead with."""
    sink = CopySink()
    writer = CopyingWriter("k", sink, part_size=8 * 2**20)
    await writer.write(SOURCE[: P + 2**20])
    assert writer.lead(P) == 0
    await writer.copy("src", P + 2**20, 2 * P + 2**20)
    await writer.write(b"footer")
    await writer.complete()
    assert sink.sizes() == [P + 2**20, P, 6]
    assert sink.body() == SOURCE[: 2 * P + 2**20] + b"footer"


async def test_runs_around_and_between_copies_keep_the_part_rules() -> None:
    """Magic, a long run (led by 5 MiB less the magic), a short run, a long one (led by what
    fills the short run's part), then a footer: every part but the footer's at least 5 MiB,
    the bytes those of the appends in order."""
    sink = CopySink()
    writer = CopyingWriter("k", sink)
    await writer.write(b"PAR1")
    runs = [(0, 2 * P), (2 * P, 2 * P + 1000), (2 * P + 1000, 3 * P)]
    copied = [await append(writer, start, stop) for start, stop in runs]
    # the last run, led by P - 1000 bytes, leaves 1000 to copy: fetched instead
    assert copied == [True, False, False]
    await writer.write(b"footer")
    await writer.complete()
    assert sink.body() == b"PAR1" + SOURCE[: 3 * P] + b"footer"
    assert sink.ranges == [(P - 4, 2 * P)]


async def test_footer_only_after_a_copy() -> None:
    sink = CopySink()
    writer = CopyingWriter("k", sink)
    assert await append(writer, 0, P)
    await writer.write(b"footer")
    await writer.complete()
    assert sink.sizes() == [P, 6] and sink.body() == SOURCE[:P] + b"footer"


async def test_a_copy_ends_the_object() -> None:
    sink = CopySink()
    writer = CopyingWriter("k", sink)
    assert await append(writer, 10, P + 10)
    await writer.complete()
    assert sink.sizes() == [P] and sink.completed


async def test_a_refused_copy_appends_nothing_and_keeps_the_writer_open() -> None:
    """The caller may fetch the range instead; the part sent before the copy stays."""
    sink = CopySink(refuse=[0])
    writer = CopyingWriter("k", sink)
    await writer.write(SOURCE[:4])
    lead = writer.lead(2 * P)
    assert lead == P - 4
    await writer.write(SOURCE[4 : 4 + lead])
    with pytest.raises(CopyRefusedError):
        await writer.copy("src", 4 + lead, 2 * P)
    await writer.write(SOURCE[4 + lead : 2 * P])
    await writer.complete()
    assert sink.body() == SOURCE[: 2 * P] and not sink.aborted


async def test_a_refusal_after_part_of_a_range_was_copied_aborts() -> None:
    """A range of more than 5 GiB is several parts; a refusal of a later one cannot be
    undone by fetching: the upload is aborted."""
    sink = CopySink(refuse=[1])
    writer = CopyingWriter("k", sink)
    with pytest.raises(StorageError, match="refused part of") as caught:
        await writer.copy("src", 0, MAX_PART_SIZE + P)
    assert not isinstance(caught.value, CopyRefusedError) and sink.aborted


async def test_a_failed_copy_aborts() -> None:
    sink = CopySink(fail=[0])
    writer = CopyingWriter("k", sink)
    with pytest.raises(TransientStorageError):
        await writer.copy("src", 0, P)
    assert sink.aborted


async def test_a_copy_that_breaks_the_rules_is_a_caller_error() -> None:
    writer = CopyingWriter("k", CopySink())
    with pytest.raises(ValueError, match="a copy of"):
        await writer.copy("src", 0, P - 1)
    await writer.write(b"PAR1")
    with pytest.raises(ValueError, match="a copy of"):
        await writer.copy("src", 0, P)


async def test_a_long_range_is_cut_into_parts_of_at_most_5_gib() -> None:
    sink = CopySink()
    writer = CopyingWriter("k", sink)
    length = 2 * MAX_PART_SIZE + 1
    await writer.copy("src", 0, length)
    assert sink.ranges == [
        (0, length // 3),
        (length // 3, length * 2 // 3),
        (length * 2 // 3, length),
    ]


@pytest.mark.parametrize("length", [P, MAX_PART_SIZE, MAX_PART_SIZE + 1, 7 * MAX_PART_SIZE - 3])
def test_part_ends_are_contiguous_and_within_the_sizes(length: int) -> None:
    ends = _part_ends(100, 100 + length)
    sizes = [b - a for a, b in zip([100, *ends], ends, strict=False)]
    assert ends[-1] == 100 + length and sum(sizes) == length
    assert all(P <= size <= MAX_PART_SIZE for size in sizes)
    assert len(ends) == -(-length // MAX_PART_SIZE)


async def test_more_than_10000_parts_are_refused_before_sending() -> None:
    sink = CopySink()
    writer = CopyingWriter("k", sink)
    with pytest.raises(StorageError, match=f"more than {MAX_PARTS} parts"):
        await writer.copy("src", 0, MAX_PARTS * MAX_PART_SIZE + 1)
    assert sink.copies == MAX_PARTS and sink.aborted
