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

*Columns.* The planner reads the snapshot's live files as Arrow columns
(:attr:`Snapshot.adds`), not as objects: eligibility (no clustering provider, old enough),
the partition filter (evaluated once per distinct ``partitionValues`` map) and a first cut of
the candidates (small, or with deleted rows) are Arrow compute; the exact candidate rule runs
on the rows that pass, and only the chosen bins' rows become :class:`AddFile` objects.

*Order.* Bins come out by the log position of their first source, oldest first: older files
are colder, and compacting cold data makes conflicts with concurrent DML rarer (§0 item 10).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

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


@dataclass(frozen=True, slots=True)
class Bin:
    """Files to rewrite into one output, all from one partition.

    Invariants (checked on construction): ``sources`` is non-empty with no repeated path, and
    every source's raw ``partitionValues`` equals ``partition_values``; two or more sources
    unless ``purges_dvs``. The planner lists sources in log order. ``bin_id`` is a short stable
    hash of the sources' ``(path, DV unique id)`` keys, for logs and metrics.

    Attributes:
        partition_values: the sources' raw map, to copy verbatim into the output (§2.11).
        sources: the files to remove, in log order; the output holds their live rows in this
            order (design §2).
        estimated_bytes: the sum of the sources' estimated live bytes.
        purges_dvs: some source is over the deleted-rows ratio (or has a DV and no
            ``numRecords``); such a bin is worth rewriting even with one source.
        needs_footer_counts: some source has no ``stats.numRecords``: the rewrite must take its
            physical count from the Parquet footer for the capture guard (design §2).
    """

    partition_values: Mapping[str, str | None]
    sources: tuple[AddFile, ...]
    estimated_bytes: int
    purges_dvs: bool
    needs_footer_counts: bool
    bin_id: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.sources:
            raise InternalError("a bin needs at least one source")
        if len(self.sources) < 2 and not self.purges_dvs:
            raise InternalError("a bin with one source must purge its deletion vector")
        if len({s.path for s in self.sources}) != len(self.sources):
            raise InternalError("a bin lists a source twice")
        if any(s.partition_values != self.partition_values for s in self.sources):
            raise InternalError("a bin mixes raw partition values")
        object.__setattr__(self, "partition_values", dict(self.partition_values))
        keys = json.dumps([list(s.key) for s in self.sources], separators=(",", ":"))
        digest = hashlib.sha256(keys.encode()).hexdigest()
        object.__setattr__(self, "bin_id", digest[:_BIN_ID_HEX])


@dataclass(frozen=True, slots=True)
class _Candidate:
    position: int  # row in the snapshot's adds: its log order
    live_bytes: int
    purge: bool
    settled: bool  # an earlier OPTIMIZE's output for this target (or a bigger one)
    counted: bool  # its stats give numRecords


def plan_bins(
    snapshot: Snapshot,
    config: TableConfig,
    policy: CompactionPolicy,
    *,
    exclude: Collection[tuple[str, str | None]] = frozenset(),
    before_ms: int | None = None,
) -> list[Bin]:
    """The bins to compact in ``snapshot``, oldest first, at most ``max_bins``.

    Candidates are selected on the snapshot's columns; only the chosen bins' files become
    :class:`AddFile` objects.

    Args:
        snapshot: the table state to plan from.
        config: the same snapshot's protocol and metadata, joined.
        policy: the configured policy; the table's ``delta.targetFileSize`` is applied here
            (:func:`effective_policy`, idempotent).
        exclude: ``(path, DV unique id)`` keys of files never to plan (left as they are).
        before_ms: leave out the files modified at or after this time (younger than the
            minimum file age); None: every file.

    Raises:
        UnsupportedFeatureError: rlcd cannot write the table safely (it names the features).
        ConfigError: the partition filter names a column that is not a partition column or a
            value its column's type cannot hold, or the policy conflicts with the table's
            target size.
        TableError: the table's ``delta.targetFileSize`` is not a size, or the filter needs
            partition columns' types and names that the schema does not give, or a file's
            partition value is not a value of its column's type.
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
    by_partition: dict[tuple[tuple[str, str | None], ...], list[_Candidate]] = {}
    for group, candidate in _candidates(adds, rows, partitions.groups, policy):
        by_partition.setdefault(partitions.keys[group], []).append(candidate)
    packed = [
        b
        for candidates in by_partition.values()
        if _pack([c for c in candidates if not c.settled], policy)
        for b in _pack(candidates, policy)
    ]
    packed.sort(key=lambda group: group[0].position)
    chosen = packed if policy.max_bins is None else packed[: policy.max_bins]
    positions = [c.position for group in chosen for c in group]
    files = dict(zip(positions, snapshot.files_at(positions), strict=True))
    return [_bin(group, files) for group in chosen]


def _rows_of(snapshot: Snapshot, keys: Collection[tuple[str, str | None]]) -> pa.Array:
    """The rows of the snapshot's adds whose ``(path, DV unique id)`` is one of ``keys``: the
    path column narrows them, the few files it names are made to compare their DVs."""
    paths = pa.array(sorted({path for path, _ in keys}), pa.string())
    named = pc.indices_nonzero(pc.is_in(snapshot.adds["path"], value_set=paths).combine_chunks())
    rows = named.to_pylist()
    hit = [row for row, add in zip(rows, snapshot.files_at(rows), strict=True) if add.key in keys]
    return pa.array(hit, named.type)


_ENTRIES = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))


class _Partitions:
    """The raw ``partitionValues`` maps of some rows of a snapshot's adds, grouped without a
    Python object per row: each row's map is spelled as one string (its entries in stored
    order), and only the distinct spellings are read as dicts.

    ``groups`` gives each row its spelling's index; ``first`` each spelling's map and the path
    of its first row (log order); ``keys`` each spelling's grouping key, the map's sorted items:
    maps that differ only in entry order share it.
    """

    def __init__(self, adds: pa.Table, rows: pa.Array) -> None:
        values = adds["partition_values"].take(rows)
        text = _spelled(values.cast(_ENTRIES)).combine_chunks()
        encoded = pc.dictionary_encode(text)
        self.groups: pa.Array = encoded.indices
        firsts = pc.index_in(encoded.dictionary, value_set=text)
        self.first: list[tuple[dict[str, str | None], str]] = [
            (dict(values[i].as_py() or []), adds["path"][rows[i].as_py()].as_py())
            for i in firsts.to_pylist()
        ]
        self.keys = [tuple(sorted(v.items(), key=lambda item: item[0])) for v, _ in self.first]

    def mask(self, keep: Sequence[bool]) -> pa.Array:
        """Per row, ``keep`` of its spelling."""
        return pa.array(keep, pa.bool_()).take(self.groups)


def _spelled(entries: pa.ChunkedArray) -> pa.ChunkedArray:
    """Each row's map as one string: ``key NUL (v value | n)`` per entry, joined by ``SOH``. Two
    maps that spell alike but differ would be grouped together; :class:`Bin` checks its sources'
    maps, so that fails loudly rather than mixing partitions."""
    chunks = []
    for chunk in entries.chunks:
        flat = chunk.flatten()
        value = pc.coalesce(pc.binary_join_element_wise("v", flat.field("value"), ""), "n")
        text = pc.binary_join_element_wise(flat.field("key"), value, "\x00")
        lengths = pc.coalesce(pc.list_value_length(chunk), 0)
        offsets = pa.concat_arrays(
            [pa.array([0], pa.int32()), pc.cumulative_sum(lengths).cast(pa.int32())]
        )
        chunks.append(pc.binary_join(pa.ListArray.from_arrays(offsets, text), "\x01"))
    return pa.chunked_array(chunks, pa.string())


def _candidates(
    adds: pa.Table, rows: pa.Array, groups: pa.Array, policy: CompactionPolicy
) -> Iterator[tuple[int, _Candidate]]:
    """The candidates among ``rows`` (in log order), each with its partition group.

    Arrow compute keeps the rows that may be candidates (small, or with deleted rows); the
    exact rule (:func:`_candidate`, integer arithmetic) runs on those alone.
    """
    size = adds["size"].take(rows)
    deleted = pc.coalesce(pc.struct_field(adds["deletion_vector"].take(rows), "cardinality"), 0)
    maybe = pc.or_(pc.less(size, policy.small_file_threshold), pc.greater(deleted, 0))
    picked = pc.indices_nonzero(maybe.combine_chunks())
    positions = rows.take(picked)
    made_for = pc.map_lookup(adds["tags"].take(positions), OPTIMIZE_TARGET_SIZE, "last")
    columns = zip(
        positions.to_pylist(),
        groups.take(picked).to_pylist(),
        size.take(picked).to_pylist(),
        adds["num_records"].take(positions).to_pylist(),
        deleted.take(picked).to_pylist(),
        made_for.to_pylist(),
        strict=True,
    )
    for position, group, file_size, physical, deleted_rows, tag in columns:
        candidate = _candidate(position, file_size, physical, deleted_rows, tag, policy)
        if candidate is not None:
            yield group, candidate


def _candidate(
    position: int,
    size: int,
    physical: int | None,
    deleted: int,
    made_for_tag: str | None,
    policy: CompactionPolicy,
) -> _Candidate | None:
    """A file as a candidate with its weight, or None when it is fine as it is."""
    if physical is None or physical == 0:
        # Unknown counts (or an empty file with a DV, which is inconsistent): weigh the whole
        # file and purge any DV, as Spark does for a DV without numRecords (§3.8).
        live_bytes, purge = size, deleted > 0
    else:
        live_bytes = size * max(physical - deleted, 0) // physical
        purge = deleted / physical > policy.max_deleted_rows_ratio
    if not purge and size >= policy.small_file_threshold:
        return None
    made_for = optimized_for({OPTIMIZE_TARGET_SIZE: made_for_tag} if made_for_tag else None)
    settled = not purge and made_for is not None and made_for >= policy.target_file_size
    return _Candidate(position, live_bytes, purge, settled, physical is not None)


def _pack(candidates: Sequence[_Candidate], policy: CompactionPolicy) -> list[list[_Candidate]]:
    """Next-fit over one partition's candidates in log order; see the module header."""
    target = policy.target_file_size
    solo_above = target - policy.small_file_threshold
    groups: list[list[_Candidate]] = []
    current: list[_Candidate] = []
    current_bytes = 0
    for candidate in candidates:
        if candidate.live_bytes > solo_above:
            groups.append([candidate])  # a purge candidate: rewritten alone, out of sequence
            continue
        if current and current_bytes + candidate.live_bytes > target:
            groups.append(current)
            current, current_bytes = [], 0
        current.append(candidate)
        current_bytes += candidate.live_bytes
    if current:
        groups.append(current)
    return [g for g in groups if len(g) >= 2 or any(c.purge for c in g)]


def _bin(group: Sequence[_Candidate], files: Mapping[int, AddFile]) -> Bin:
    """A packed group as a bin, its sources the objects ``files`` made for its rows."""
    sources = tuple(files[c.position] for c in group)
    return Bin(
        partition_values=sources[0].partition_values,
        sources=sources,
        estimated_bytes=sum(c.live_bytes for c in group),
        purges_dvs=any(c.purge for c in group),
        needs_footer_counts=not all(c.counted for c in group),
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
