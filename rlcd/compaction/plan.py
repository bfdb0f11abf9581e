"""The planner: a snapshot and a policy in, bins of files to rewrite out (design §7). Pure.

Theory of operation
-------------------
*Candidates.* A live file is a candidate when it is smaller than the policy's small-file
threshold ``M``, or when it should be rewritten to purge its deletion vector: its DV deletes
more than ``max_deleted_rows_ratio`` of its ``numRecords`` physical rows, or it has a DV and
no ``numRecords`` (Spark selects those too, protocol notes §3.8; such a bin is flagged
:attr:`Bin.needs_footer_counts`, because the capture guard needs every source's physical count
and must then read it from the Parquet footer, design §2). Files with a ``clusteringProvider``
are never candidates: rlcd is not a clustering implementation (§5.3). Files outside the
partition filter are not either, nor files the caller excludes by their ``(path, DV id)``
key (the daemon's quarantined sources, which failed to read: the partition's healthy files
are planned without them).

*Settled files.* A small file whose add carries ``OPTIMIZE_TARGET_SIZE`` (the tag Spark,
Databricks and rlcd put on OPTIMIZE outputs) of at least ``T`` was already compacted for this
target: it is small because its bin's rows compress better than its sources did (snappy
files rewritten as zstd often shrink), or because its partition holds little data. It is
a candidate only in a partition whose other candidates make a bin by themselves (two or more
new small files, or a DV to purge); it is then worth folding in. Otherwise it is left alone.

*Grouping.* Candidates are grouped by their exact raw ``partitionValues`` map, so ``"1"`` and
``"01"``, or ``null`` and ``""``, land in different bins: the output copies the map verbatim
(§2.11), which is only right when every source has the same one. Within a partition the
candidates keep log order (the snapshot's order).

*Packing.* Each file weighs its estimated live bytes ``w = size * live / physical`` (its size
when the counts are unknown). Next-fit with target ``T``: a file goes into the open bin unless
it would take the bin over ``T``, in which case the bin is closed and a new one opened. A bin
needs two or more sources unless it purges a DV; other bins are dropped. One change makes a
second run right after a compaction plan nothing: a file with ``w > T - M`` is rewritten in a
bin of its own and does not interrupt the next-fit sequence of the others. Only a DV-purge
candidate can be that heavy, because the policy keeps ``2M <= T``: a small file has
``w < M <= T - M``. (With ``M > T/2`` the rule would strand small files between ``T - M``
and ``M`` alone forever; without the rule, a closed bin could be small again, as below.)

*Why a second run plans nothing.* Simulate the compaction: each bin becomes one file of ``w``
equal to its ``estimated_bytes``, with no DV. In one partition, next-fit closes a bin only
when the next file ``f`` does not fit, so a closed bin holds more than ``T - w(f) >= M`` bytes
(every file in the sequence has ``w <= T - M``): its output is not small, and it held at least
two files (two small ones fit together). A file rewritten alone had ``w > T - M >= M``: not
small either. So the only small file the run can leave in a partition is the last bin's output
(or its one source, if that bin was dropped). Every purge candidate was in a kept bin and
outputs carry no DV, so nothing is over the ratio. One small file and nothing to purge is no
bin. The outputs are tagged with ``T``, so one that came out smaller than estimated (its rows
compress better than its sources did) is settled, and settled files are left alone unless the
other candidates make a bin by themselves, which that one leftover file cannot.
``max_bins`` only postpones the tail: bins are ordered by their first source's log
position, so a cut keeps a prefix of every partition's bins, and the next run plans the rest
as before, except that outputs of the cut that came out small are folded into their
partition's remaining bins.

*Layouts.* An output has one Parquet schema, and a row group is copied as it is only into an
output of its own file's schema (:mod:`rlcd.parquet.copy_plan`): pyarrow stores decimals as
fixed-length bytes, Spark and delta-rs as integers. A bin mixing both has one kind's decimal
chunks transcoded, and on S3 those bytes pass through rlcd. The caller may give each file a
*layout*, a number naming the output schema its row groups copy under (0 for files of the
default schema or none to copy). Each partition's candidates of one layout are then packed
as above on their own, and the candidates no bin took are packed again, layouts mixed, so
a file left alone by its layout is still compacted with its partition's others. The second
run's argument holds per layout (a layout's bins are a partition's in the argument above)
and then for the leftovers: every output is tagged with ``T``, so the small ones are
settled, and the run leaves no unsettled candidate that makes a bin.

*Columns.* The planner never makes a Python object per file (issue 40). Eligibility, the
partition filter (evaluated once per distinct ``partitionValues`` map) and the exact candidate
rule are Arrow compute over :attr:`Snapshot.adds`. Next-fit runs per partition on the prefix
sums of its sequence's weights: a bin from candidate ``s`` ends where a bisection finds the sum
past ``T``, so packing costs a Python step per bin, not per file. A bin holds its sources as
rows of the snapshot, its counts and sizes summed on the columns; its :class:`AddFile` objects
are made when it runs (:attr:`Bin.sources`).

*Order.* Bins come out by the log position of their first source, oldest first: older files
are colder, and compacting cold data makes conflicts with concurrent DML rarer (§0 item 10).
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, islice
from typing import Final, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from rlcd.compaction.policy import CompactionPolicy, effective_policy
from rlcd.delta.actions import AddFile
from rlcd.delta.protocol import TableConfig
from rlcd.delta.replay import Snapshot
from rlcd.delta.schema import ColumnMappingMode, parse_schema
from rlcd.errors import ConfigError, CorruptLogError, InternalError
from rlcd.reconcile.tags import OPTIMIZE_TARGET_SIZE, optimized_for

__all__ = ("Bin", "plan_bins")
__pure__ = True

_BIN_ID_HEX: Final = 16
_KEY_WINDOW: Final = 65_536
"""Rows whose keys a plan's bin ids are made from at once."""


class Bin:
    """Files to rewrite into one output, all from one partition.

    Invariants (checked on construction): ``sources`` is non-empty with no repeated path, and
    every source's raw ``partitionValues`` equals ``partition_values``; two or more sources
    unless ``purges_dvs``. The planner lists sources in log order. ``bin_id`` is a short stable
    hash of the sources' ``(path, DV unique id)`` keys, for logs and metrics.

    A planned bin holds its sources as rows of the snapshot's adds (:meth:`planned`) and makes
    their :class:`AddFile` objects on first use of :attr:`sources`: a plan of a million files
    costs no object per file until its bins run. Its counts and sizes come from the columns,
    and the planner checks the invariants on the columns; the objects, once made, are checked
    again.

    Attributes:
        partition_values: the sources' raw map, to copy verbatim into the output (§2.11).
        estimated_bytes: the sum of the sources' estimated live bytes.
        purges_dvs: some source is over the deleted-rows ratio (or has a DV and no
            ``numRecords``); such a bin is worth rewriting even with one source.
        needs_footer_counts: some source has no ``stats.numRecords``: the rewrite must take its
            physical count from the Parquet footer for the capture guard (design §2).
        num_sources: how many sources.
        source_bytes: the sum of the sources' sizes.
        largest_source_bytes: the size of the largest source.
    """

    __slots__ = (
        "_bin_id",
        "_range",
        "_rows",
        "_sources",
        "estimated_bytes",
        "largest_source_bytes",
        "needs_footer_counts",
        "num_sources",
        "partition_values",
        "purges_dvs",
        "source_bytes",
    )
    partition_values: Mapping[str, str | None]
    estimated_bytes: int
    purges_dvs: bool
    needs_footer_counts: bool
    num_sources: int
    source_bytes: int
    largest_source_bytes: int
    _range: range | None
    _rows: _PlannedRows | None
    _sources: tuple[AddFile, ...] | None
    _bin_id: str | None

    def __init__(
        self,
        partition_values: Mapping[str, str | None],
        sources: Sequence[AddFile],
        estimated_bytes: int,
        purges_dvs: bool,
        needs_footer_counts: bool,
    ) -> None:
        """A bin of these source objects (the planner makes :meth:`planned` ones)."""
        sizes = [s.size for s in sources]
        sums = (len(sizes), sum(sizes), max(sizes, default=0))
        self._set(partition_values, estimated_bytes, purges_dvs, needs_footer_counts, sums, None)
        self._set_sources(tuple(sources))

    @classmethod
    def planned(
        cls,
        rows: _PlannedRows,
        bin_range: range,
        partition_values: Mapping[str, str | None],
        estimated_bytes: int,
        purges_dvs: bool,
        needs_footer_counts: bool,
        sizes: tuple[int, int],
    ) -> Bin:
        """A bin whose sources are ``rows``' ``bin_range``; ``sizes`` their sum and maximum."""
        self = cls.__new__(cls)
        sums = (len(bin_range), *sizes)
        self._set(
            partition_values, estimated_bytes, purges_dvs, needs_footer_counts, sums, bin_range
        )
        object.__setattr__(self, "_rows", rows)
        object.__setattr__(self, "_sources", None)
        _check_counts(self)
        return self

    def _set(
        self,
        partition_values: Mapping[str, str | None],
        estimated_bytes: int,
        purges_dvs: bool,
        needs_footer_counts: bool,
        sums: tuple[int, int, int],
        bin_range: range | None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "partition_values", dict(partition_values))
        setter(self, "estimated_bytes", estimated_bytes)
        setter(self, "purges_dvs", purges_dvs)
        setter(self, "needs_footer_counts", needs_footer_counts)
        setter(self, "num_sources", sums[0])
        setter(self, "source_bytes", sums[1])
        setter(self, "largest_source_bytes", sums[2])
        setter(self, "_range", bin_range)
        setter(self, "_rows", None)
        setter(self, "_bin_id", None)

    def _set_sources(self, sources: tuple[AddFile, ...]) -> None:
        """Check the objects against the invariants, then hold them."""
        _check_counts(self)
        if len({s.path for s in sources}) != len(sources):
            raise InternalError("a bin lists a source twice")
        if any(s.partition_values != self.partition_values for s in sources):
            raise InternalError("a bin mixes raw partition values")
        object.__setattr__(self, "_sources", sources)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Bin is immutable: cannot set {name}")

    def __repr__(self) -> str:
        return (  # no id: it hashes the sources' keys, and a report's repr holds every bin
            f"Bin({self.partition_values!r}, {self.num_sources} sources, "
            f"{self.estimated_bytes} bytes, purges_dvs={self.purges_dvs})"
        )

    @property
    def sources(self) -> tuple[AddFile, ...]:
        """The files to remove, in log order; the output holds their live rows in this order
        (design §2). Made from the snapshot's rows on first use for a planned bin."""
        if self._sources is None:
            assert self._rows is not None and self._range is not None  # a planned bin
            self._set_sources(tuple(self._rows.files(self._range)))
            assert self._sources is not None
        return self._sources

    @property
    def bin_id(self) -> str:
        """A short stable hash of the sources' ``(path, DV unique id)`` keys (made once)."""
        if self._bin_id is not None:
            return self._bin_id
        if self._sources is not None:
            digest = _key_digest([s.key for s in self._sources])
        else:
            assert self._rows is not None and self._range is not None  # a planned bin
            digest = self._rows.bin_id(self._range)
        object.__setattr__(self, "_bin_id", digest)
        return digest


def _key_digest(keys: Iterable[tuple[str, str | None]]) -> str:
    """A bin id: the start of the SHA-256 of its sources' keys as compact JSON."""
    text = json.dumps(list(keys), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:_BIN_ID_HEX]


def _check_counts(b: Bin) -> None:
    if not b.num_sources:
        raise InternalError("a bin needs at least one source")
    if b.num_sources < 2 and not b.purges_dvs:
        raise InternalError("a bin with one source must purge its deletion vector")


class _PlannedRows:
    """The rows of a plan's bins in the snapshot's adds, bin after bin, shared by its bins:
    each bin's objects are made when it asks, the ids of all the bins at once when the first
    is asked for (a report names every bin)."""

    def __init__(self, snapshot: Snapshot, positions: pa.Array, lengths: Sequence[int]) -> None:
        self._snapshot = snapshot
        self._positions = positions
        self._lengths = lengths
        self._ids: dict[int, str] | None = None

    def files(self, bin_range: range) -> list[AddFile]:
        rows = self._positions.slice(bin_range.start, len(bin_range)).to_pylist()
        return self._snapshot.files_at(rows)

    def bin_id(self, bin_range: range) -> str:
        if self._ids is None:
            self._ids = dict(self._all_ids())
        return self._ids[bin_range.start]

    def _all_ids(self) -> Iterator[tuple[int, str]]:
        """Each bin's first row and id, from the keys of about ``_KEY_WINDOW`` rows at a time:
        a million files' keys at once, as Python strings, raised a dry run's peak by 240 MiB."""
        start = 0
        for window in self._windows():
            rows = self._positions.slice(start, sum(window)).to_pylist()
            paths, ids = self._snapshot.keys_at(rows)
            keys = zip(paths, ids, strict=True)
            for n in window:
                yield start, _key_digest(islice(keys, n))
                start += n

    def _windows(self) -> Iterator[list[int]]:
        """The bins' lengths in runs of at least ``_KEY_WINDOW`` rows (the last may be less)."""
        window: list[int] = []
        rows = 0
        for n in self._lengths:
            window.append(n)
            rows += n
            if rows >= _KEY_WINDOW:
                yield window
                window, rows = [], 0
        if window:
            yield window


def plan_bins(
    snapshot: Snapshot,
    config: TableConfig,
    policy: CompactionPolicy,
    *,
    exclude: Collection[tuple[str, str | None]] = frozenset(),
    before_ms: int | None = None,
    layouts: Mapping[str, int] | None = None,
) -> list[Bin]:
    """The bins to compact in ``snapshot``, oldest first, at most ``max_bins``.

    Candidates are selected and packed on the snapshot's columns; the bins make their
    :class:`AddFile` objects when they run.

    Args:
        snapshot: the table state to plan from.
        config: the same snapshot's protocol and metadata, joined.
        policy: the configured policy; the table's ``delta.targetFileSize`` is applied here
            (:func:`effective_policy`, idempotent).
        exclude: ``(path, DV unique id)`` keys of files never to plan (left as they are).
        before_ms: leave out the files modified at or after this time (younger than the
            minimum file age); None: every file.
        layouts: a layout number per path, for the files whose Parquet layout the rewrite
            copies under only one of its output schemas (0, the default, for the others):
            each layout's files are packed apart first (*Layouts* in the module header).

    Raises:
        UnsupportedFeatureError: rlcd cannot write the table safely (it names the features).
        ConfigError: the partition filter names a column that is not a partition column or a
            value its column's type cannot hold, or the policy conflicts with the table's
            target size.
        TableError: the table's ``delta.targetFileSize`` is not a size, or the filter needs
            partition columns' types and names that the schema does not give, or a file's
            partition value is not a value of its column's type, or a candidate has no size.
        InternalError: ``config`` does not describe ``snapshot``.
    """
    if config.protocol != snapshot.protocol or config.metadata != snapshot.metadata:
        raise InternalError(f"table config does not match snapshot version {snapshot.version}")
    config.ensure_writable()
    policy = effective_policy(policy, config)
    matches = _partition_matcher(policy, config, snapshot.version)
    adds = snapshot.adds
    # §5.3: only the clustering implementation rewrites files with a clusteringProvider
    eligible = adds["clustering_provider"].is_null()
    if before_ms is not None:
        eligible = pc.and_(eligible, pc.less(adds["modification_time"], before_ms))
    rows = pc.indices_nonzero(eligible.combine_chunks())
    if exclude:
        rows = rows.filter(pc.invert(pc.is_in(rows, value_set=_rows_of(snapshot, exclude))))
    partitions = _Partitions(adds, rows)
    if matches is not None:
        rows = rows.filter(partitions.mask([matches(v, path) for v, path in partitions.first]))
        partitions = _Partitions(adds, rows)
    found = _Candidates(snapshot, rows, partitions, policy, layouts or {})
    packing = found.packed(policy)
    packed = sorted(packing.groups, key=lambda group: group.first)  # candidates: in log order
    chosen = packed if policy.max_bins is None else packed[: policy.max_bins]
    return found.bins(snapshot, packing, chosen, partitions)


def _rows_of(snapshot: Snapshot, keys: Collection[tuple[str, str | None]]) -> pa.Array:
    """The rows of the snapshot's adds whose ``(path, DV unique id)`` is one of ``keys``: the
    path column narrows them, the few files it names are made to compare their DVs."""
    paths = pa.array(sorted({path for path, _ in keys}), pa.string())
    named = pc.indices_nonzero(pc.is_in(snapshot.adds["path"], value_set=paths).combine_chunks())
    rows = named.to_pylist()
    hit = [row for row, add in zip(rows, snapshot.files_at(rows), strict=True) if add.key in keys]
    return pa.array(hit, named.type)


def _at(column: pa.ChunkedArray, rows: pa.Array) -> pa.ChunkedArray:
    """``column`` at ``rows`` (ascending, each once): the column itself when they are all its
    rows (the usual plan: no clustered, young or excluded file), not a copy of it."""
    return column if len(rows) == len(column) else column.take(rows)


_ENTRIES = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))


class _Partitions:
    """The raw ``partitionValues`` maps of some rows of a snapshot's adds, grouped without a
    Python object per row: each row's map is spelled as one string (its entries in stored
    order, :func:`_spelled`), and only the distinct spellings are read as dicts.

    ``groups`` gives each row its spelling's index; ``first`` each spelling's map and the path
    of its first row (log order); ``keys`` each spelling's grouping key, the map's sorted items:
    maps that differ only in entry order share it.
    """

    def __init__(self, adds: pa.Table, rows: pa.Array) -> None:
        values = _at(adds["partition_values"], rows)
        text = _spelled(values.cast(_ENTRIES)).combine_chunks()
        encoded = pc.dictionary_encode(text)
        self.groups: pa.Array = encoded.indices
        # each spelling's first row: found among the rows' codes, not their strings again
        spellings = pa.array(range(len(encoded.dictionary)), self.groups.type)
        firsts = pc.index_in(spellings, value_set=self.groups)
        self.first: list[tuple[dict[str, str | None], str]] = [
            (dict(values[i].as_py() or []), adds["path"][rows[i].as_py()].as_py())
            for i in firsts.to_pylist()
        ]
        self.keys = [tuple(sorted(v.items(), key=lambda item: item[0])) for v, _ in self.first]

    def mask(self, keep: Sequence[bool]) -> pa.Array:
        """Per row, ``keep`` of its spelling."""
        return pa.array(keep, pa.bool_()).take(self.groups)


def _spelled(entries: pa.ChunkedArray) -> pa.ChunkedArray:
    """Each row's map as one string, one to one: per entry ``key NUL v value`` (``key NUL v NUL
    n`` for a null value), the entries joined by ``NUL e``, a NUL inside a key or value
    doubled. Read from the left, a lone NUL is always a separator, so two maps spell alike only
    when they are equal (in the same entry order), and rows are grouped by their exact map."""
    chunks = []
    for chunk in entries.chunks:
        flat = chunk.flatten()
        key, value = (_escaped(flat.field(name)) for name in ("key", "value"))
        options = pc.JoinOptions(null_handling="replace", null_replacement="\x00n")
        text = pc.binary_join_element_wise(key, value, "\x00v", options=options)
        lengths = pc.coalesce(pc.list_value_length(chunk), 0)
        offsets = pa.concat_arrays(
            [pa.array([0], pa.int32()), pc.cumulative_sum(lengths).cast(pa.int32())]
        )
        chunks.append(pc.binary_join(pa.ListArray.from_arrays(offsets, text), "\x00e"))
    return pa.chunked_array(chunks, pa.string())


def _escaped(text: pa.Array) -> pa.Array:
    """``text`` with each NUL doubled (looked for first: partition values hold none)."""
    if not pc.any(pc.match_substring(text, "\x00")).as_py():
        return text
    return pc.replace_substring(text, "\x00", "\x00\x00")


_EXACT: Final = 2**53
"""Counts up to this are exact as floats: Python's ``deleted / physical`` and Arrow's agree."""
_INT64_MAX: Final = 2**63 - 1


class _Candidates:
    """The candidates among some rows (in log order), selected on the columns: ``position``
    (row in the snapshot's adds), ``key`` (partition grouping key), ``spelling`` (exact
    partition map), ``weight`` (estimated live bytes), ``purge``, ``settled``, ``size`` and
    ``counted`` (numRecords known), one Arrow array each.

    The rule is the module header's, in integers: ``w = size * live // physical`` in int64 and
    the deleted ratio in float64, which are Python's results exactly where no product leaves
    int64 and no count passes 2**53; the rows where one does (none in a sane log) take Python's
    own arithmetic. A size, numRecords or DV cardinality below zero is a corrupt log.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        rows: pa.Array,
        partitions: _Partitions,
        policy: CompactionPolicy,
        layouts: Mapping[str, int],
    ) -> None:
        adds = snapshot.adds
        size = _at(adds["size"], rows).combine_chunks()
        cardinality = pc.struct_field(adds["deletion_vector"], "cardinality")
        deleted = pc.coalesce(_at(cardinality, rows), 0).combine_chunks()
        # the first cut: a null size (never a sane log) is never a candidate, as before
        maybe = pc.or_(pc.less(size, policy.small_file_threshold), pc.greater(deleted, 0))
        cut = pc.indices_nonzero(pc.fill_null(maybe, False))
        rows, size, deleted = rows.take(cut), size.take(cut), deleted.take(cut)
        physical = adds["num_records"].take(rows).combine_chunks()
        _refuse_negative(snapshot, rows, (size, physical, deleted))
        known = pc.fill_null(pc.not_equal(physical, 0), False)
        divisor = pc.if_else(known, physical, 1)
        live = pc.max_element_wise(pc.subtract(divisor, deleted), 0)
        weight = pc.if_else(known, pc.divide(pc.multiply(size, live), divisor), size)
        as_float = pc.CastOptions(pa.float64(), allow_float_truncate=True)
        ratio = pc.divide(pc.cast(deleted, options=as_float), pc.cast(divisor, options=as_float))
        over = pc.greater(ratio, policy.max_deleted_rows_ratio)
        purge = pc.if_else(known, over, pc.greater(deleted, 0))
        inexact = pc.or_(
            pc.or_(pc.greater(divisor, _EXACT), pc.greater(deleted, _EXACT)),
            pc.greater(size, pc.divide(_INT64_MAX, pc.max_element_wise(live, 1))),
        )
        redo = pc.and_(known, inexact)
        if pc.any(redo).as_py():
            weight, purge = _exactly(redo, (size, physical, deleted), (weight, purge), policy)
        picked = pc.indices_nonzero(pc.or_(purge, pc.less(size, policy.small_file_threshold)))
        self.position = rows.take(picked)
        self.weight = weight.take(picked)
        self.purge = purge.take(picked)
        self.size = size.take(picked)
        self.counted = physical.take(picked).is_valid()
        made_for = pc.map_lookup(adds["tags"].take(self.position), OPTIMIZE_TARGET_SIZE, "last")
        settling = [
            t
            for t in pc.unique(made_for).drop_null().to_pylist()
            if (target := optimized_for({OPTIMIZE_TARGET_SIZE: t})) is not None
            and target >= policy.target_file_size
        ]
        settling_tags = pa.array(settling, pa.string())
        self.settled = pc.and_(pc.invert(self.purge), pc.is_in(made_for, value_set=settling_tags))
        self.spelling = partitions.groups.take(cut).take(picked)
        key_index = {key: i for i, key in enumerate(dict.fromkeys(partitions.keys))}
        self.key = pa.array([key_index[k] for k in partitions.keys], pa.int64()).take(self.spelling)
        self.layout = _layouts(adds["path"], self.position, layouts)

    def packed(self, policy: CompactionPolicy) -> _Packing:
        """Each partition's kept bins (module header), unordered. With layouts, each
        partition's candidates of one layout are packed first, then what no bin took, layouts
        mixed (*Layouts* in the module header)."""
        if not pc.any(pc.not_equal(self.layout, 0)).as_py():
            return self._packed(self.key, None, policy)
        kinds = pc.max(self.layout).as_py() + 1
        by_layout = pc.add(pc.multiply(self.key, kinds), self.layout)
        first = self._packed(by_layout, None, policy)
        taken = [first.arranged.slice(g.start, g.stop - g.start) for g in first.groups]
        every = pc.subtract(pc.cumulative_sum(pa.repeat(1, len(self.key))), 1)
        value_set = pa.concat_arrays(taken) if taken else pa.array([], pa.int64())
        rest = every.filter(pc.invert(pc.is_in(every, value_set=value_set)))
        second = self._packed(self.key, rest, policy)
        shift = len(first.arranged)
        return _Packing(
            pa.concat_arrays([first.arranged, second.arranged]),
            first.groups
            + [
                _Group(g.key, g.first, g.start + shift, g.stop + shift, g.weight, g.purges)
                for g in second.groups
            ],
        )

    def _packed(self, key: pa.Array, subset: pa.Array | None, policy: CompactionPolicy) -> _Packing:
        """The kept bins of the candidates ``subset`` (ascending; None: all) grouped by
        ``key``. A group whose candidates but the settled ones make no bin by themselves plans
        nothing; without settled candidates those are the kept bins themselves."""
        packing = self._next_fit(subset, key, policy)
        settled = self.settled if subset is None else self.settled.take(subset)
        if not pc.any(settled).as_py():
            return packing
        open_ = pc.indices_nonzero(pc.invert(settled)).cast(pa.int64())
        unsettled = self._next_fit(open_ if subset is None else subset.take(open_), key, policy)
        planning = {g.key for g in unsettled.groups}
        return _Packing(packing.arranged, [g for g in packing.groups if g.key in planning])

    def _next_fit(
        self, subset: pa.Array | None, key: pa.Array, policy: CompactionPolicy
    ) -> _Packing:
        """The kept bins of next-fit over the candidates ``subset`` (ascending indices; None:
        all), each ``key`` (a partition, or a partition's layout) apart in log order. A
        candidate heavier than ``T - M`` is a bin of its own and out of the sequence; in the
        sequence a bin from candidate ``s`` takes every next one while the sum fits ``T``: one
        bisection of the prefix sums (weights are >= 0).
        A bin is a range of the candidates arranged (no list of its members)."""
        target = policy.target_file_size
        if subset is None:
            order = pc.sort_indices(key).cast(pa.int64())  # stable: log order kept
        else:
            order = subset.take(pc.sort_indices(key.take(subset)))
        solo = pc.greater(self.weight.take(order), target - policy.small_file_threshold)
        alone = order.filter(solo)
        sequence = order.filter(pc.invert(solo))
        arranged = pa.concat_arrays([alone, sequence])
        groups = [
            _Group(k, i, j, j + 1, w, p)
            for j, (i, k, w, p) in enumerate(
                zip(
                    alone.to_pylist(),
                    key.take(alone).to_pylist(),
                    self.weight.take(alone).to_pylist(),
                    self.purge.take(alone).to_pylist(),
                    strict=True,
                )
            )
            if p  # a lone candidate is kept only to purge its DV
        ]
        if not len(sequence):
            return _Packing(arranged, groups)
        runs = pc.run_end_encode(key.take(sequence))
        ends, keys = runs.run_ends.to_pylist(), runs.values.to_pylist()
        cum = [0, *pc.cumulative_sum_checked(self.weight.take(sequence)).to_pylist()]
        purging = pc.indices_nonzero(self.purge.take(sequence)).to_pylist()
        kept: list[tuple[int, int, int, int, bool]] = []
        start = 0
        for key, end in zip(keys, ends, strict=True):
            s = start
            while s < end:
                e = bisect_right(cum, cum[s] + target, s + 1, end + 1) - 1
                purges = bisect_left(purging, s) < bisect_left(purging, e)
                if e - s >= 2 or purges:
                    kept.append((key, s, e, cum[e] - cum[s], purges))
                s = e
            start = end
        firsts = sequence.take(pa.array([s for _, s, _, _, _ in kept], pa.int64())).to_pylist()
        shift = len(alone)
        groups += [
            _Group(key, first, s + shift, e + shift, weight, purges)
            for (key, s, e, weight, purges), first in zip(kept, firsts, strict=True)
        ]
        return _Packing(arranged, groups)

    def bins(
        self,
        snapshot: Snapshot,
        packing: _Packing,
        chosen: Sequence[_Group],
        partitions: _Partitions,
    ) -> list[Bin]:
        """The chosen groups as bins over the snapshot's rows, their sizes summed on the
        columns, one partition per bin checked there (:meth:`Bin.planned` checks the counts,
        :attr:`Bin.sources` the objects)."""
        lengths = [g.stop - g.start for g in chosen]
        offsets = pa.array(accumulate(lengths, initial=0), pa.int32())
        numbers = pc.list_parent_indices(
            pa.ListArray.from_arrays(offsets, pa.nulls(offsets[-1].as_py()))
        )
        # the candidates of the chosen groups, one after the other: each group's range of the
        # arranged candidates, offset by where the group starts there
        starts = pa.array(
            [g.start - offset for g, offset in zip(chosen, offsets.to_pylist(), strict=False)],
            pa.int64(),
        )
        ordinal = pc.subtract(pc.cumulative_sum(pa.repeat(1, len(numbers))), 1)
        flat = packing.arranged.take(pc.add(pc.take(starts, numbers), ordinal))
        aggregates = [("size", "sum"), ("size", "max"), ("counted", "all")]
        aggregates += [("key", "min"), ("key", "max")]
        columns = {"bin": numbers, "size": self.size, "counted": self.counted, "key": self.key}
        per_bin = (
            pa.table({name: c if name == "bin" else c.take(flat) for name, c in columns.items()})
            .group_by("bin", use_threads=False)
            .aggregate(aggregates)
            .sort_by("bin")
        )
        if per_bin["key_min"] != per_bin["key_max"]:
            raise InternalError("the planner mixed partitions in a bin")
        rows = _PlannedRows(snapshot, self.position.take(flat), lengths)
        spellings = self.spelling.take(pa.array([g.first for g in chosen], pa.int64()))
        return [
            Bin.planned(
                rows,
                range(start, start + length),
                partitions.first[spelling][0],
                g.weight,
                g.purges,
                not counted,
                (total, largest),
            )
            for g, start, length, spelling, total, largest, counted in zip(
                chosen,
                offsets.to_pylist(),
                lengths,
                spellings.to_pylist(),
                per_bin["size_sum"].to_pylist(),
                per_bin["size_max"].to_pylist(),
                per_bin["counted_all"].to_pylist(),
                strict=False,
            )
        ]


class _Group(NamedTuple):
    """A packed group of candidates: its partition key, its first candidate (log order), its
    candidates as a range of :attr:`_Packing.arranged`, their total weight, and whether one
    purges a DV."""

    key: int
    first: int
    start: int
    stop: int
    weight: int
    purges: bool


class _Packing(NamedTuple):
    """Packed groups and the candidates they are ranges of (indices, in partition and log
    order)."""

    arranged: pa.Array
    groups: list[_Group]


def _layouts(paths: pa.ChunkedArray, rows: pa.Array, layouts: Mapping[str, int]) -> pa.Array:
    """Each row's layout in ``layouts`` (by path), 0 where it has none."""
    if not layouts:
        return pa.repeat(pa.scalar(0, pa.int64()), len(rows))
    named = pc.index_in(_at(paths, rows), value_set=pa.array(list(layouts), pa.string()))
    kinds = pa.array(list(layouts.values()), pa.int64())
    return pc.fill_null(kinds.take(named.combine_chunks()), 0)


def _refuse_negative(snapshot: Snapshot, rows: pa.Array, columns: Sequence[pa.Array]) -> None:
    """A size, numRecords or DV cardinality below zero is a corrupt log (the weights of such a
    file would not add up)."""
    negative = pc.less(columns[0], 0)
    for column in columns[1:]:
        negative = pc.or_kleene(negative, pc.less(column, 0))
    if pc.any(negative).as_py():
        row = rows[pc.index(negative, True).as_py()].as_py()
        raise CorruptLogError(
            "a live add has a negative size, numRecords or deletion vector cardinality",
            table=snapshot.table,
            version=snapshot.version,
            path=snapshot.adds["path"][row].as_py(),
        )


def _exactly(
    rows: pa.Array,
    counts: tuple[pa.Array, pa.Array, pa.Array],
    rule: tuple[pa.Array, pa.Array],
    policy: CompactionPolicy,
) -> tuple[pa.Array, pa.Array]:
    """``rule`` (weights and purges) with the ``rows`` (a mask) whose ``counts`` (size,
    numRecords, deleted) Arrow may not compute exactly redone in Python's integers."""
    found = pc.indices_nonzero(rows)
    size, physical, deleted = (c.take(found).to_pylist() for c in counts)
    weight = [s * max(p - d, 0) // p for s, p, d in zip(size, physical, deleted, strict=True)]
    ratio = policy.max_deleted_rows_ratio
    purge = [d / p > ratio for p, d in zip(physical, deleted, strict=True)]
    return (
        pc.replace_with_mask(rule[0], rows, pa.array(weight, pa.int64())),
        pc.replace_with_mask(rule[1], rows, pa.array(purge, pa.bool_())),
    )


def _partition_matcher(
    policy: CompactionPolicy, config: TableConfig, version: int
) -> Callable[[Mapping[str, str | None], str], bool] | None:
    """The policy's partition filter bound to this table's partition columns (their types
    and physical ``partitionValues`` keys, §5.1), as a test of a raw map; the path names the
    file a bad value is read from."""
    if policy.partition_filter is None:
        return None
    partition_columns = config.metadata.partition_columns
    try:
        schema = parse_schema(config.metadata.schema_string)
        mode = ColumnMappingMode(config.column_mapping_mode)
        bound = policy.partition_filter.bind(
            schema, partition_columns=partition_columns, mode=mode, partition_only=True
        )
    except ConfigError as exc:
        raise ConfigError(str(exc), table=config.table) from exc
    except (ValueError, KeyError) as exc:
        raise CorruptLogError(
            f"cannot map partition columns {list(partition_columns)} to the schema: {exc}",
            table=config.table,
            version=version,
        ) from exc

    def matches(values: Mapping[str, str | None], path: str) -> bool:
        try:
            return bound.matches_partition(values)
        except ValueError as exc:
            raise CorruptLogError(str(exc), table=config.table, version=version, path=path) from exc

    return matches
