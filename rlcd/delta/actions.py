"""Delta log actions as frozen records, parsed from and written back to JSON. Pure.

Each record keeps the fields rlcd knows as typed attributes and every other JSON member in
``extra``, so a field another engine wrote survives a read/write round trip untouched
(delta-protocol.md §2). JSON keys are the attribute names in camelCase.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from rlcd.delta.dv.descriptor import DeletionVectorDescriptor

__all__ = (
    "AddFile",
    "RemoveFile",
    "Metadata",
    "Protocol",
    "CommitInfo",
    "Txn",
    "DomainMetadata",
    "AddCdcFile",
    "CheckpointMetadata",
    "Sidecar",
    "UnknownAction",
    "Action",
    "ActionError",
    "parse_action",
    "parse_commit",
    "action_to_json",
    "serialize_commit",
)
__pure__ = True


class ActionError(ValueError):
    """A JSON action is malformed; the loader turns it into a CorruptLogError naming the file."""


@functools.cache  # a few dozen attribute names, asked for every field of every action
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_EMPTY: Mapping[str, Any] = {}
_STRING_MAPS = frozenset({"partition_values", "tags"})
"""File action maps whose values the protocol types as strings (or null)."""


def _all_strings(value: Mapping[str, Any]) -> bool:
    return all(v is None or type(v) is str for v in value.values())


def _check(value: Any, types: tuple[type, ...], key: str, kind: str) -> Any:
    """Reject a JSON value of the wrong type (``true`` is not an integer here)."""
    if value is None:
        return None
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        expected = "/".join(t.__name__ for t in types)
        raise ActionError(f"{kind}.{key} is a {type(value).__name__}, expected {expected}")
    return value


@dataclass(frozen=True, slots=True)
class _Field:
    """How a record takes one JSON key: its attribute, and the value types it keeps as they
    are, checked no further (None: any value). Anything else goes through ``_convert``."""

    attr: str
    plain: frozenset[type] | None
    string_map: bool


_FIELDS: dict[type, Mapping[str, _Field]] = {}


def _fields(cls: Any) -> Mapping[str, _Field]:
    """JSON key -> :class:`_Field` for a record class (computed once per class). A value whose
    exact type is one of its field's types passes :func:`_check` as it is; a subclass (``bool``
    for ``int``, a ``Mapping`` other than ``dict``) takes the checked path."""
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = {}
        for f in dataclasses.fields(cls):
            if f.name == "extra":
                continue
            types = cls.TYPES.get(f.name)
            if f.name == "deletion_vector":
                plain: frozenset[type] | None = frozenset()
            elif types is None:
                plain = None
            else:
                plain = frozenset(types)
            fields[_camel(f.name)] = _Field(f.name, plain, f.name in _STRING_MAPS)
        _FIELDS[cls] = fields
    return fields


class _Record:
    """JSON (de)serialisation shared by every action record.

    Subclasses declare ``KIND`` (the action's top-level key), ``REQUIRED`` (JSON keys that must be
    present) and ``TYPES`` (attribute -> accepted Python types for scalar validation).
    """

    KIND: ClassVar[str]
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = _EMPTY
    extra: Mapping[str, Any]

    @classmethod
    def from_json(cls, obj: Any) -> Any:
        if type(obj) is not dict and not isinstance(obj, Mapping):
            raise ActionError(f"{cls.KIND} is not a JSON object")
        for required in cls.REQUIRED:
            if obj.get(required) is None:
                missing = [k for k in cls.REQUIRED if obj.get(k) is None]
                raise ActionError(f"{cls.KIND} lacks required field(s) {', '.join(missing)}")
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        fields = _fields(cls)
        for key, value in obj.items():
            f = fields.get(key)
            if f is None:
                extra[key] = value
            elif value is None or (
                (f.plain is None or type(value) in f.plain)
                and (not f.string_map or _all_strings(value))
            ):
                known[f.attr] = value
            else:
                known[f.attr] = cls._convert(f.attr, value)
        factory: Any = cls  # a dataclass subclass: its fields are the JSON keys
        return factory(**known, extra=extra)

    @classmethod
    def _convert(cls, attr: str, value: Any) -> Any:
        if attr == "deletion_vector":
            if value is None:
                return None
            try:
                return DeletionVectorDescriptor.from_json(value)
            except (ValueError, TypeError, KeyError) as exc:
                raise ActionError(f"{cls.KIND}.deletionVector: {exc}") from exc
        types = cls.TYPES.get(attr)
        if types is not None:
            value = _check(value, types, _camel(attr), cls.KIND)
        if attr in _STRING_MAPS and value is not None:
            for k, v in value.items():
                if not isinstance(v, str | None):
                    raise ActionError(
                        f"{cls.KIND}.{_camel(attr)}[{k!r}] is a {type(v).__name__}, "
                        "expected a string or null"
                    )
        return value

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, DeletionVectorDescriptor):
                value = value.to_json()
            out[_camel(f.name)] = value
        out.update(self.extra)
        return out


_STR = (str,)
_INT = (int,)
_BOOL = (bool,)
_MAP = (dict, Mapping)
_LIST = (list, tuple)


class _FileAction(_Record):
    path: str
    deletion_vector: DeletionVectorDescriptor | None

    @property
    def dv_unique_id(self) -> str | None:
        dv = self.deletion_vector
        return dv.unique_id if dv is not None else None

    @property
    def key(self) -> tuple[str, str | None]:
        """The log-replay key ``(path, DV unique id)`` (delta-protocol.md §1.9)."""
        return (self.path, self.dv_unique_id)


_FILE_TYPES: Mapping[str, tuple[type, ...]] = {
    "path": _STR,
    "size": _INT,
    "modification_time": _INT,
    "deletion_timestamp": _INT,
    "data_change": _BOOL,
    "extended_file_metadata": _BOOL,
    "stats": _STR,
    "partition_values": _MAP,
    "tags": _MAP,
    "base_row_id": _INT,
    "default_row_commit_version": _INT,
    "clustering_provider": _STR,
}


@dataclass(frozen=True)
class AddFile(_FileAction):
    """A live data file. ``stats`` is the JSON text as written; ``num_records`` parses it."""

    KIND: ClassVar[str] = "add"
    REQUIRED: ClassVar[tuple[str, ...]] = ("path", "size")
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = _FILE_TYPES

    path: str
    partition_values: Mapping[str, str | None] = field(default_factory=dict)
    size: int = 0
    modification_time: int = 0
    data_change: bool = True
    stats: str | None = None
    tags: Mapping[str, str | None] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def parsed_stats(self) -> Mapping[str, Any]:
        """The stats document, or ``{}`` when absent or unparsable (stats are optional). Parsed
        at each call: a snapshot holds every live file, and keeping each parsed document (a
        few KiB of dicts per file) grew a run's memory with the table's file count."""
        if not self.stats:
            return {}
        try:
            value = json.loads(self.stats)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @cached_property
    def num_records(self) -> int | None:
        """Physical rows in the file per its stats, when recorded (parsed once, kept alone)."""
        n = self.parsed_stats.get("numRecords")
        return n if isinstance(n, int) and not isinstance(n, bool) else None

    @property
    def deleted_rows(self) -> int:
        return self.deletion_vector.cardinality if self.deletion_vector is not None else 0

    def tombstone(
        self, *, now_ms: int, data_change: bool, tags: Mapping[str, str] | None = None
    ) -> RemoveFile:
        """The remove for this live add: the same path string and DV (the replay key), plus what
        Spark copies (delta-protocol.md §2.12); ``tags`` are added to the add's own tags."""
        merged = {**(self.tags or {}), **(tags or {})}
        rows = self.num_records
        return RemoveFile(
            path=self.path,
            deletion_timestamp=now_ms,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=self.partition_values,
            size=self.size,
            stats=json.dumps({"numRecords": rows}, separators=(",", ":"))
            if rows is not None
            else None,
            tags=merged or None,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


@dataclass(frozen=True, slots=True)
class RemoveFile(_FileAction):
    """A tombstone; keyed like the add it removes by (path, DV unique id)."""

    KIND: ClassVar[str] = "remove"
    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = _FILE_TYPES

    path: str
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: Mapping[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: Mapping[str, str | None] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Metadata(_Record):
    """The table's ``metaData``: schema, partitioning and properties."""

    KIND: ClassVar[str] = "metaData"
    # schemaString is required by the protocol, but Spark's own test tables omit it; rlcd
    # refuses such a table only when it needs the schema.
    REQUIRED: ClassVar[tuple[str, ...]] = ("id",)
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = {
        "id": _STR,
        "schema_string": _STR,
        "partition_columns": _LIST,
        "configuration": _MAP,
        "format": _MAP,
        "created_time": _INT,
    }

    id: str
    name: str | None = None
    description: str | None = None
    format: Mapping[str, Any] = field(
        default_factory=lambda: {"provider": "parquet", "options": {}}
    )
    schema_string: str = ""
    partition_columns: Sequence[str] = ()
    configuration: Mapping[str, str] = field(default_factory=dict)
    created_time: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Protocol(_Record):
    """Reader/writer versions and, at reader 3 / writer 7, the explicit feature lists."""

    KIND: ClassVar[str] = "protocol"
    REQUIRED: ClassVar[tuple[str, ...]] = ("minReaderVersion", "minWriterVersion")
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = {
        "min_reader_version": _INT,
        "min_writer_version": _INT,
        "reader_features": _LIST,
        "writer_features": _LIST,
    }

    min_reader_version: int
    min_writer_version: int
    reader_features: Sequence[str] | None = None
    writer_features: Sequence[str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CommitInfo(_Record):
    """Free-form provenance; only the fields rlcd reads are typed."""

    KIND: ClassVar[str] = "commitInfo"
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = {
        "timestamp": _INT,
        "in_commit_timestamp": _INT,
        "operation": _STR,
        "txn_id": _STR,
    }

    timestamp: int | None = None
    in_commit_timestamp: int | None = None
    operation: str | None = None
    txn_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Txn(_Record):
    KIND: ClassVar[str] = "txn"
    REQUIRED: ClassVar[tuple[str, ...]] = ("appId", "version")
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = {
        "app_id": _STR,
        "version": _INT,
        "last_updated": _INT,
    }

    app_id: str
    version: int
    last_updated: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DomainMetadata(_Record):
    KIND: ClassVar[str] = "domainMetadata"
    REQUIRED: ClassVar[tuple[str, ...]] = ("domain",)
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = {
        "domain": _STR,
        "configuration": _STR,
        "removed": _BOOL,
    }

    domain: str
    configuration: str = ""
    removed: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AddCdcFile(_Record):
    KIND: ClassVar[str] = "cdc"
    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = {"path": _STR}

    path: str
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CheckpointMetadata(_Record):
    """Checkpoint-only (V2 spec): the checkpoint's version."""

    KIND: ClassVar[str] = "checkpointMetadata"
    REQUIRED: ClassVar[tuple[str, ...]] = ("version",)
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = {"version": _INT}

    version: int
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Sidecar(_Record):
    """Checkpoint-only (V2 spec): a file under ``_delta_log/_sidecars/`` with more file actions."""

    KIND: ClassVar[str] = "sidecar"
    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)
    TYPES: ClassVar[Mapping[str, tuple[type, ...]]] = {
        "path": _STR,
        "size_in_bytes": _INT,
        "modification_time": _INT,
    }

    path: str
    size_in_bytes: int | None = None
    modification_time: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UnknownAction:
    """An action type rlcd does not know; kept so it can be written back verbatim."""

    kind: str
    value: Any


Action = (
    AddFile
    | RemoveFile
    | Metadata
    | Protocol
    | CommitInfo
    | Txn
    | DomainMetadata
    | AddCdcFile
    | CheckpointMetadata
    | Sidecar
    | UnknownAction
)

_KINDS: Mapping[str, type[_Record]] = {
    cls.KIND: cls
    for cls in (
        AddFile,
        RemoveFile,
        Metadata,
        Protocol,
        CommitInfo,
        Txn,
        DomainMetadata,
        AddCdcFile,
        CheckpointMetadata,
        Sidecar,
    )
}


def parse_action(obj: Any) -> Action:
    """One action from its JSON object (exactly one top-level key)."""
    if (type(obj) is not dict and not isinstance(obj, Mapping)) or len(obj) != 1:
        raise ActionError("an action must be a JSON object with exactly one key")
    ((kind, value),) = obj.items()
    cls = _KINDS.get(kind)
    if cls is None:
        return UnknownAction(kind, value)
    action: Action = cls.from_json(value)
    return action


_JSON = json.JSONDecoder()
_JSON_SPACE = " \t\n\r"
_BYTES_SPACE = " \t\n\r\x0b\x0c"
"""What ``bytes.isspace`` takes for space: a blank line of :func:`parse_commit`."""


def parse_commit(data: bytes | bytearray) -> list[Action]:
    """Every action of a newline-delimited JSON commit (or JSON checkpoint).

    Raises:
        ActionError: naming the 1-based line that is not valid JSON or not a valid action.
    """
    try:
        return _parse_commit_text(data.decode())
    except (ValueError, TypeError):
        return _parse_commit_lines(data)  # the same actions, or the error and its line


def _parse_commit_text(text: str) -> list[Action]:
    """:func:`parse_commit` for a commit of well-formed UTF-8 JSON lines, each decoded in
    place (a third of the JSON's cost: no per-line encoding detection and decoding). Anything
    else raises, for :func:`_parse_commit_lines` to read line by line."""
    actions: list[Action] = []
    for line in text.split("\n"):
        if not line.strip(_BYTES_SPACE):
            continue
        obj, end = _JSON.raw_decode(line)  # no leading space, else it raises
        if end != len(line) and line[end:].strip(_JSON_SPACE):
            raise ValueError("extra data after a JSON value")
        actions.append(parse_action(obj))
    return actions


def _parse_commit_lines(data: bytes | bytearray) -> list[Action]:
    actions: list[Action] = []
    lines = bytes(data).split(b"\n")  # a store may hand a bytearray: lines as bytes, one copy
    for lineno, line in enumerate(lines, start=1):
        if not line or line.isspace():  # isspace: what strip() strips, without a copy
            continue
        try:
            actions.append(parse_action(json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise ActionError(f"line {lineno}: {exc}") from exc
    return actions


def action_to_json(action: Action) -> dict[str, Any]:
    """The single-key JSON object for an action."""
    if isinstance(action, UnknownAction):
        return {action.kind: action.value}
    return {action.KIND: action.to_json()}


def serialize_commit(actions: Sequence[Action]) -> bytes:
    """Newline-delimited JSON, one action per line, as Spark writes commits."""
    return b"".join(
        json.dumps(action_to_json(a), separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        for a in actions
    )
