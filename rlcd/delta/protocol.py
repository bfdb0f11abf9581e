"""The protocol gate: which table features rlcd can read and write. Pure.

Feature verdicts follow delta-protocol.md §5. Legacy protocol versions imply features (§2.4).
:meth:`TableConfig.ensure_readable` and :meth:`TableConfig.ensure_writable` are the only places
that decide; each refusal names every feature it does not support.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rlcd.delta.actions import Metadata, Protocol
from rlcd.delta.schema import ArrayType, DataType, MapType, PrimitiveType, StructType, parse_schema
from rlcd.errors import UnsupportedFeatureError

__all__ = (
    "READABLE_FEATURES",
    "WRITABLE_FEATURES",
    "TableConfig",
)
__pure__ = True

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

READABLE_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "timestampWithoutTimezone",  # kernel-rs alias
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
        "vacuumProtocolCheck",
    }
)
"""Reader features whose data rlcd reads correctly."""

WRITABLE_FEATURES = frozenset(
    {
        # SAFE for a dataChange=false rewrite (§5): nothing to do.
        "appendOnly",
        "invariants",
        "checkConstraints",
        "generatedColumns",
        "identityColumns",
        "allowColumnDefaults",
        "changeDataFeed",
        "vacuumProtocolCheck",
        "checkpointProtection",
        # SUPPORTED: rlcd implements what the feature asks of a writer.
        "columnMapping",
        "deletionVectors",
        "domainMetadata",
        "inCommitTimestamp",
        "timestampNtz",
        "timestampWithoutTimezone",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
    }
)
"""Writer features rlcd may commit to. Everything else (row tracking, clustering, Iceberg
compatibility, catalog-managed, variant, ...) makes rlcd refuse to write."""

UNUSED_OK_FEATURES = frozenset({"variantType", "variantType-preview"})
"""Features harmless while no column uses them: delta-rs lists ``variantType`` on every table
it creates with deletion vectors enabled."""

_LEGACY_WRITER: Mapping[int, tuple[str, ...]] = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}


@dataclass(frozen=True, slots=True)
class TableConfig:
    """Protocol, metadata and properties joined: the validated view of what a table needs."""

    table: str
    protocol: Protocol
    metadata: Metadata

    @property
    def reader_features(self) -> frozenset[str]:
        p = self.protocol
        if p.min_reader_version >= 3:
            return frozenset(p.reader_features or ())
        return frozenset({"columnMapping"}) if p.min_reader_version == 2 else frozenset()

    @property
    def writer_features(self) -> frozenset[str]:
        p = self.protocol
        if p.min_writer_version >= 7:
            return frozenset(p.writer_features or ())
        implied: set[str] = set()
        for level, names in _LEGACY_WRITER.items():
            if p.min_writer_version >= level:
                implied.update(names)
        return frozenset(implied)

    @property
    def properties(self) -> Mapping[str, str]:
        return self.metadata.configuration

    def _flag(self, key: str) -> bool:
        return str(self.properties.get(key, "false")).lower() == "true"

    @property
    def column_mapping_mode(self) -> str:
        if "columnMapping" not in self.writer_features | self.reader_features:
            return "none"
        return str(self.properties.get("delta.columnMapping.mode", "none")).lower()

    @property
    def deletion_vectors_supported(self) -> bool:
        return "deletionVectors" in self.writer_features

    @property
    def deletion_vectors_enabled(self) -> bool:
        """New DVs may be written only when the property is true (§0 item 8)."""
        return self.deletion_vectors_supported and self._flag("delta.enableDeletionVectors")

    @property
    def in_commit_timestamps(self) -> bool:
        return "inCommitTimestamp" in self.writer_features and self._flag(
            "delta.enableInCommitTimestamps"
        )

    def _unused(self) -> frozenset[str]:
        """The conditional features this table lists but does not use."""
        if not self.metadata.schema_string:
            return frozenset()
        try:
            schema = parse_schema(self.metadata.schema_string)
        except ValueError:
            return frozenset()
        return frozenset() if _has_variant(schema) else UNUSED_OK_FEATURES

    def _refuse(
        self,
        kind: str,
        version: int,
        limit: int,
        features: frozenset[str],
        known: frozenset[str],
        verb: str,
    ) -> None:
        if version > limit:
            raise UnsupportedFeatureError(
                f"{kind} version {version} is not supported (rlcd {verb} up to {limit})",
                table=self.table,
            )
        unknown = tuple(sorted(features - known - self._unused()))
        if unknown:
            raise UnsupportedFeatureError(
                f"rlcd cannot {verb.rstrip('s')} a table with {kind} feature(s): "
                f"{', '.join(unknown)}",
                table=self.table,
                features=unknown,
            )

    def ensure_readable(self) -> None:
        """Raise :class:`UnsupportedFeatureError` unless rlcd can read the table's data."""
        p = self.protocol
        self._refuse(
            "reader",
            p.min_reader_version,
            MAX_READER_VERSION,
            self.reader_features,
            READABLE_FEATURES,
            "reads",
        )

    def ensure_writable(self) -> None:
        """Raise :class:`UnsupportedFeatureError` unless rlcd can commit to the table safely."""
        self.ensure_readable()
        p = self.protocol
        self._refuse(
            "writer",
            p.min_writer_version,
            MAX_WRITER_VERSION,
            self.writer_features,
            WRITABLE_FEATURES,
            "writes",
        )

    def ensure_rows_deletable(self) -> None:
        """Raise :class:`UnsupportedFeatureError` unless rlcd may commit a row deletion: the
        table is writable, not append-only, and keeps no change data feed (a DELETE must
        write the feed's delete rows, which rlcd does not)."""
        self.ensure_writable()
        for key in ("delta.appendOnly", "delta.enableChangeDataFeed"):
            if self._flag(key):
                raise UnsupportedFeatureError(
                    f"rlcd does not delete rows from a table with {key}=true",
                    table=self.table,
                    features=(key,),
                )


def _has_variant(dtype: DataType) -> bool:
    match dtype:
        case PrimitiveType(name=name):
            return name == "variant"
        case StructType(fields=fields):
            return any(_has_variant(f.type) for f in fields)
        case ArrayType():
            return _has_variant(dtype.element_type)
        case MapType():
            return _has_variant(dtype.key_type) or _has_variant(dtype.value_type)
    return False
