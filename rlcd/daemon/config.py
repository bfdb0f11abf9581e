"""The daemon's TOML file → frozen, validated :class:`Settings`. Pure apart from
:func:`load_settings`, which reads the file.

Theory of operation
-------------------
The schema is data: each section is a tuple of :class:`_Key` (TOML name, field, parser), read by
one walker. Everything is checked before the daemon starts, and every error is a
:class:`ConfigError` that names the file and the key path (``table[2].policy.target_file_size``;
array indexes count from 0): an unknown key (with the closest known one), a wrong type, an
impossible value, a key named like a credential (credentials come only from the AWS chain or the
environment, never from this file, and their values are never echoed). The walker reports
every bad key of the file in one error, a line each; the rules across keys (``min_file_size``
at most half of ``target_file_size``, the shard instance within ``instances``) are checked
once every key is right.

The file's sections::

    [daemon]     poll_interval, bins_in_flight, memory_budget, shutdown_grace, orphan_grace,
                 lease, lease_ttl, snapshot_memory, snapshot_idle
    [s3]         endpoint_url, region, profile, addressing_style
    [log]        format (json | console | auto), level
    [metrics]    listen ("host:port"; "" disables the endpoint)
    [shard]      instance, instances
    [policy]     the defaults of every table's policy (:class:`TablePolicy`), its vacuum job's
                 included
    [[table]]    uri, and a [table.policy] of overrides
    [[discover]] prefix, include, exclude, max_depth, interval, and a [discover.policy]

*Policies* resolve in layers, by the pure :meth:`Settings.policy_for`: the ``[policy]`` defaults,
then the ``policy`` of the ``[[discover]]`` that takes the table (of several, the one with the
longest prefix), then the table's own ``[[table]]`` entry. Every combination a file can produce
is resolved (and so checked) when it is loaded, so resolution never fails later.

*Sizes* are a plain integer of bytes, or a string with a unit meaning what it says:
``128MiB`` is 128 * 2^20, ``128MB`` is 128 * 10^6 (``B kB MB GB TB``, ``KiB MiB GiB TiB``, any
case). A bare ``128m`` is refused as ambiguous (Spark's ``delta.targetFileSize`` reads it as MiB).
*Durations* are a number of seconds or a string :func:`parse_duration` reads (``250ms 30s 5m
1.5h 7d``).

*Local paths* (a ``uri`` or ``prefix`` with no scheme) are relative to the file's directory, so a
file and the tables beside it move together.

*Shards* (:func:`shard_of`) use rendezvous hashing over SHA-256 of the canonical table URI:
stable across processes, Python versions and hosts (unlike ``hash``), balanced, and when the
number of instances changes from n to n + 1 only about 1/(n + 1) of the tables move.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import re
import tomllib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Any, Final, get_args

from rlcd.compaction.lease import DEFAULT_LEASE_TTL_S
from rlcd.compaction.policy import (
    CODECS,
    DEFAULT_MAX_DELETED_ROWS_RATIO,
    DEFAULT_MIN_COPY_ROW_GROUP,
    DEFAULT_TARGET_FILE_SIZE,
    ENCODINGS,
    REWRITES,
    CompactionPolicy,
    parse_duration,
    parse_size,
)
from rlcd.errors import ConfigError
from rlcd.operations.vacuum import VacuumMode
from rlcd.storage.s3 import S3Config
from rlcd.storage.uri import TableUri

__all__ = (
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MIN_VACUUM_RETAIN_S",
    "DaemonSettings",
    "LogSettings",
    "MetricsSettings",
    "ShardSettings",
    "TablePolicy",
    "TableEntry",
    "DiscoverEntry",
    "Settings",
    "parse_settings",
    "load_settings",
    "schema_keys",
    "shard_of",
    "with_instance",
    "render_policies",
    "SettingsChanges",
    "settings_changes",
)

GIB: Final = 1024**3
LOG_FORMATS: Final = ("auto", "json", "console")
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
_MAX_LONG: Final = 2**63 - 1
MIN_VACUUM_RETAIN_S: Final = 3600.0
"""The shortest vacuum retention the daemon uses, whatever a table or the file says: the
composition tags need only the conflict window (minutes); time travel and writers in flight
need more, and only ``rlcd vacuum --force-short-retention`` may go lower."""
_VACUUM_MODES: Final = get_args(VacuumMode)


# --- the settings --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    """``[daemon]``: the loop's pace and the limits that hold across all tables at once.

    ``memory_budget`` is bytes for all bins in flight together; ``shutdown_grace_s`` is how long
    SIGTERM lets bins in flight finish; ``orphan_grace_s`` is how old an unreferenced rlcd file
    must be before cleanup deletes it; ``lease`` is whether a table's compaction and cleanup
    take its advisory lease (``_rlcd/lease``), which lasts ``lease_ttl_s`` unrenewed;
    ``snapshot_memory`` is bytes for the snapshots all watched tables hold between polls, and a
    table idle ``snapshot_idle_s`` releases its own (:mod:`rlcd.daemon._snapshots`).
    """

    poll_interval_s: float = 10.0
    bins_in_flight: int = 4
    memory_budget: int = 1 * GIB
    shutdown_grace_s: float = 60.0
    orphan_grace_s: float = 3600.0
    lease: bool = True
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S
    snapshot_memory: int = 1 * GIB
    snapshot_idle_s: float = 600.0


@dataclass(frozen=True, slots=True)
class LogSettings:
    """``[log]``: ``format`` is json, console, or auto (console on a TTY, else JSON lines)."""

    format: str = "auto"
    level: str = "info"

    @property
    def json(self) -> bool | None:
        """What :func:`rlcd.daemon.logging.configure_logging` takes: None lets it decide."""
        return {"auto": None, "json": True, "console": False}[self.format]


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """``[metrics]``: ``configured`` is the file's ``listen`` (None: no endpoints), and
    :attr:`listen` where this shard instance serves ``/metrics`` and ``/healthz``.

    Instance ``i`` takes the port + ``i``, so shards sharing one file on one host do not
    collide; port 0 (any free port, for tests) stays 0.
    """

    configured: tuple[str, int] | None = ("127.0.0.1", 9464)
    instance: int = 0

    def __post_init__(self) -> None:
        if self.configured is not None and self.configured[1] + self.instance > 65535:
            raise ConfigError(
                f"port {self.configured[1]} + shard instance {self.instance} is above 65535"
            )

    @property
    def listen(self) -> tuple[str, int] | None:
        """This instance's address, or None when the endpoints are off."""
        if self.configured is None:
            return None
        host, port = self.configured
        return host, port + self.instance if port else 0


@dataclass(frozen=True, slots=True)
class ShardSettings:
    """``[shard]``: this process is instance ``instance`` (from 0) of ``instances``.

    Invariant: ``0 <= instance < instances``.
    """

    instance: int = 0
    instances: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.instance < self.instances:
            raise ConfigError(
                f"shard instance {self.instance} is not within 0..{self.instances - 1} "
                f"(instances = {self.instances})"
            )

    def owns(self, uri: TableUri) -> bool:
        """Whether this instance compacts the table at ``uri``."""
        return shard_of(uri, self.instances) == self.instance


@dataclass(frozen=True, slots=True)
class TablePolicy:
    """One table's effective policy: what the compaction takes plus what the daemon decides by.

    * ``target_file_size``, ``min_file_size`` (None: half the target), ``max_deleted_rows_ratio``
      ``codec``, ``encodings``, ``rewrite``, ``min_copy_row_group``, ``recompress`` and
      ``max_masked_ratio`` make :attr:`compaction` (see
      :mod:`rlcd.compaction.policy`).
    * The table is due when some partition holds at least ``min_small_files`` small files, or
      its small files hold at least ``min_small_bytes`` bytes together, or a DV purge is due;
      and not sooner than ``min_interval_s`` after its last compaction.
    * Files younger than ``min_file_age_s`` are left alone (writers that cannot reconcile never
      race rlcd on fresh files): pass it to ``compact_table(min_file_age_ms=...)``.
    * ``enabled = false`` keeps the table watched but never compacted.
    * A source that fails to read in ``quarantine_after`` runs is quarantined: left out of
      later bins, never changed (:class:`~rlcd.daemon.schedule.Quarantine`), for
      ``quarantine_for_s`` (None: until a reload).
    * ``vacuum`` runs the table's vacuum (``vacuum_mode``) at start and every
      ``vacuum_interval_s``, with the table's own retention or ``vacuum_retain_s``.

    Invariants: those of :class:`CompactionPolicy` (checked by building it), counts >= 1,
    durations >= 0 (``quarantine_for_s`` > 0 or None), ``vacuum_interval_s`` > 0,
    ``vacuum_retain_s`` None or at least :data:`MIN_VACUUM_RETAIN_S`.
    """

    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_file_size: int | None = None
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO
    min_small_files: int = 10
    min_small_bytes: int = 256 * 1024 * 1024
    min_interval_s: float = 60.0
    min_file_age_s: float = 300.0
    codec: str = "zstd"
    encodings: str = ENCODINGS[0]
    rewrite: str = REWRITES[0]
    min_copy_row_group: int = DEFAULT_MIN_COPY_ROW_GROUP
    recompress: bool = False
    max_masked_ratio: float = 0.5
    enabled: bool = True
    quarantine_after: int = 3
    quarantine_for_s: float | None = 86400.0
    vacuum: bool = True
    vacuum_interval_s: float = 86400.0
    vacuum_retain_s: float | None = None
    vacuum_mode: VacuumMode = "lite"
    compaction: CompactionPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("min_small_files", "min_small_bytes", "quarantine_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("min_interval_s", "min_file_age_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a duration >= 0, got {value!r}")
        held = self.quarantine_for_s
        if held is not None and not (
            isinstance(held, int | float) and math.isfinite(held) and held > 0
        ):
            raise ConfigError(f"quarantine_for must be a duration > 0 or None, got {held!r}")
        if not (math.isfinite(self.vacuum_interval_s) and self.vacuum_interval_s > 0):
            interval = self.vacuum_interval_s
            raise ConfigError(f"vacuum_interval must be a duration > 0, got {interval!r}")
        if self.vacuum_retain_s is not None:
            _check_retain(self.vacuum_retain_s)
        if self.vacuum_mode not in _VACUUM_MODES:
            raise ConfigError(f"vacuum_mode must be lite or full, got {self.vacuum_mode!r}")
        policy = CompactionPolicy(
            target_file_size=self.target_file_size,
            min_file_size=self.min_file_size,
            max_deleted_rows_ratio=self.max_deleted_rows_ratio,
            codec=self.codec,
            encodings=self.encodings,
            rewrite=self.rewrite,
            min_copy_row_group=self.min_copy_row_group,
            recompress=self.recompress,
            max_masked_ratio=self.max_masked_ratio,
        )
        object.__setattr__(self, "compaction", policy)


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A ``[[table]]``: a table named explicitly, and its policy overrides (field → value)."""

    uri: TableUri
    overrides: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    key: str = "table"


@dataclass(frozen=True, slots=True)
class DiscoverEntry:
    """A ``[[discover]]``: every Delta table under ``prefix``, found again every ``interval_s``.

    A table at ``prefix/a/b`` has the relative path ``a/b`` and depth 2. It is taken when its
    depth is at most ``max_depth``, it matches an ``include`` glob and no ``exclude`` glob
    (globs match whole path segments: ``*`` within one, ``**`` any number of them).
    """

    prefix: TableUri
    include: tuple[str, ...] = ("**",)
    exclude: tuple[str, ...] = ()
    max_depth: int = 3
    interval_s: float = 300.0
    overrides: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    key: str = "discover"

    def relative(self, uri: TableUri) -> str | None:
        """``uri``'s path below the prefix, or None if the prefix does not hold it."""
        if (uri.scheme, uri.bucket) != (self.prefix.scheme, self.prefix.bucket):
            return None
        base = self.prefix.prefix.rstrip("/")
        if not base and uri.is_s3:
            return uri.prefix or None
        if uri.prefix.startswith(base + "/"):
            return uri.prefix[len(base) + 1 :]
        return None

    def accepts(self, relative: str) -> bool:
        """Whether a table found at ``relative`` (below the prefix) is taken."""
        parts = tuple(p for p in relative.split("/") if p)
        return (
            0 < len(parts) <= self.max_depth
            and any(_glob_match(g, parts) for g in self.include)
            and not any(_glob_match(g, parts) for g in self.exclude)
        )

    def takes(self, uri: TableUri) -> bool:
        """Whether discovery under this prefix would take the table at ``uri``."""
        relative = self.relative(uri)
        return relative is not None and self.accepts(relative)


def _check_retain(seconds: float) -> None:
    """Refuse a daemon vacuum retention below :data:`MIN_VACUUM_RETAIN_S`."""
    if not (math.isfinite(seconds) and seconds >= MIN_VACUUM_RETAIN_S):
        raise ConfigError(
            f"vacuum_retain must be at least 1h, got {_seconds(seconds)}: time travel and "
            "writers in flight need the files; only rlcd vacuum --force-short-retention goes lower"
        )


def _glob_match(pattern: str, parts: tuple[str, ...]) -> bool:
    globs = tuple(p for p in pattern.split("/") if p)

    def match(i: int, j: int) -> bool:
        if i == len(globs):
            return j == len(parts)
        if globs[i] == "**":
            return any(match(i + 1, k) for k in range(j, len(parts) + 1))
        return j < len(parts) and fnmatchcase(parts[j], globs[i]) and match(i + 1, j + 1)

    return match(0, 0)


@dataclass(frozen=True, slots=True)
class Settings:
    """The whole file, validated. ``source`` is the file it came from (for messages)."""

    source: str
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    s3: S3Config = field(default_factory=S3Config)
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    shard: ShardSettings = field(default_factory=ShardSettings)
    policy: TablePolicy = field(default_factory=TablePolicy)
    tables: tuple[TableEntry, ...] = ()
    discover: tuple[DiscoverEntry, ...] = ()

    def entry(self, uri: TableUri) -> TableEntry | None:
        """The ``[[table]]`` naming ``uri``, if any."""
        return next((t for t in self.tables if t.uri == uri), None)

    def discovered_by(self, uri: TableUri) -> DiscoverEntry | None:
        """The ``[[discover]]`` whose policy a table gets: of those that take it, the one with
        the longest prefix (the first in the file among equals)."""
        taking = [d for d in self.discover if d.takes(uri)]
        return max(taking, key=lambda d: len(d.prefix.prefix), default=None)

    def policy_for(self, uri: TableUri) -> TablePolicy:
        """The table's effective policy: defaults ← its discover prefix ← its ``[[table]]``.

        Never raises for settings :func:`parse_settings` built: it resolved every combination.
        """
        layers = [(e.key, e.overrides) for e in (self.discovered_by(uri), self.entry(uri)) if e]
        return _resolve(self.source, self.policy, layers)


def _resolve(
    source: str, base: TablePolicy, layers: Sequence[tuple[str, Mapping[str, Any]]]
) -> TablePolicy:
    policy = base
    for key, overrides in layers:
        try:
            policy = replace(policy, **overrides)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {key}.policy: {exc}") from exc
    return policy


def shard_of(uri: TableUri, instances: int) -> int:
    """The instance (0 to ``instances - 1``) that owns the table: rendezvous hashing, SHA-256.

    The canonical URI is hashed, so ``s3a://b/t/`` and ``s3://b/t`` are the same table.
    """
    if instances < 1:
        raise ConfigError(f"instances must be at least 1, got {instances}")
    name = str(uri).encode()

    def weight(i: int) -> bytes:
        return hashlib.sha256(b"%d\0%s" % (i, name)).digest()

    return max(range(instances), key=weight)


def with_instance(settings: Settings, instance: int) -> Settings:
    """``settings`` run as shard ``instance`` (the command line's ``--instance``, e.g. ``%i``).

    Raises:
        ConfigError: ``instance`` is not within the file's ``[shard] instances``.
    """
    try:
        shard = ShardSettings(instance=instance, instances=settings.shard.instances)
        metrics = replace(settings.metrics, instance=instance)
    except ConfigError as exc:
        raise ConfigError(f"--instance: {exc}, in {settings.source}") from exc
    return replace(settings, shard=shard, metrics=metrics)


# --- values --------------------------------------------------------------------------------------


class _Invalid(ValueError):
    """A value does not fit its key; the walker adds the file and key path."""


_Parse = Callable[[object], object]


def _kind(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return names.get(type(value), type(value).__name__)


def _got(value: object) -> str:
    return f"got {value!r} ({_kind(value)})"


def _size(*, minimum: int, auto: bool = False) -> _Parse:
    def parse(value: object) -> object:
        if auto and value == "auto":
            return None
        if isinstance(value, str):
            try:
                size = parse_size(value)
            except ValueError as exc:
                raise _Invalid(str(exc)) from exc
        elif isinstance(value, int) and not isinstance(value, bool):
            size = value
        else:
            also = ' or "auto"' if auto else ""
            raise _Invalid(
                f'expected a size (bytes, or a string like "128MiB"){also}, {_got(value)}'
            )
        if not minimum <= size <= _MAX_LONG:
            raise _Invalid(f"must be within {minimum} and 2^63-1 bytes, got {value!r}")
        return size

    return parse


def _duration(*, positive: bool = False) -> _Parse:
    def parse(value: object) -> object:
        if isinstance(value, str):
            try:
                seconds = parse_duration(value)
            except ValueError as exc:
                raise _Invalid(str(exc)) from exc
        elif isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        else:
            raise _Invalid(f'expected a duration (seconds, or a string like "5m"), {_got(value)}')
        if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
            bound = "> 0" if positive else ">= 0"
            raise _Invalid(f"must be a duration {bound}, got {value!r}")
        return seconds

    return parse


def _lasting(value: object) -> object:
    """A duration, or ``"none"`` (or 0): until a reload, which :class:`TablePolicy` spells
    None."""
    if value == "none":
        return None
    try:
        return _duration()(value) or None
    except _Invalid as exc:
        raise _Invalid(f'{exc}; "none" keeps a file until a reload') from exc


def _count(*, minimum: int, maximum: int | None = None) -> _Parse:
    def parse(value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"expected an integer, {_got(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            top = "" if maximum is None else f" and <= {maximum}"
            raise _Invalid(f"must be an integer >= {minimum}{top}, got {value}")
        return value

    return parse


def _ratio(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"expected a number in [0, 1], {_got(value)}")
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise _Invalid(f"must be a number in [0, 1], got {value!r}")
    return float(value)


def _choice(options: Sequence[str]) -> _Parse:
    def parse(value: object) -> object:
        if value not in options:
            raise _Invalid(f"must be one of {', '.join(options)}, {_got(value)}")
        return value

    return parse


def _boolean(value: object) -> object:
    if not isinstance(value, bool):
        raise _Invalid(f"expected true or false, {_got(value)}")
    return value


def _optional_text(value: object) -> object:
    """A string; empty means unset (None), so the documented default ``""`` is valid TOML."""
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, {_got(value)}")
    return value or None


def _retain(value: object) -> object:
    """A vacuum retention of at least :data:`MIN_VACUUM_RETAIN_S`, or "" for the table's own."""
    if value == "":
        return None
    seconds = _duration()(value)
    assert isinstance(seconds, float)
    try:
        _check_retain(seconds)
    except ConfigError as exc:
        raise _Invalid(str(exc).removeprefix("vacuum_retain ")) from exc
    return seconds


def _endpoint(value: object) -> object:
    text = _optional_text(value)
    if text is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", str(text)):
        raise _Invalid(f"must be an http:// or https:// URL, got {value!r}")
    return text


def _addressing(value: object) -> object:
    """``auto`` is botocore's default, which :class:`S3Config` spells None."""
    style = _choice(("auto", "virtual", "path"))(value)
    return None if style == "auto" else style


def _listen(value: object) -> object:
    if not isinstance(value, str):
        raise _Invalid(f'expected "host:port" or "", {_got(value)}')
    if not value:
        return None
    match = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):([0-9]{1,5})", value)
    if match is None or int(match[2]) > 65535:
        raise _Invalid(f'expected "host:port" ("[::1]:9464" for IPv6) or "", got {value!r}')
    return match[1].strip("[]"), int(match[2])


def _globs(value: object) -> object:
    if not isinstance(value, list) or not all(isinstance(g, str) and g for g in value):
        raise _Invalid(f"expected an array of non-empty glob strings, {_got(value)}")
    return tuple(value)


# --- the schema ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Key:
    """TOML key ``name`` is read by ``parse`` into the field ``attr``."""

    name: str
    attr: str
    parse: _Parse


def _keys(*spec: tuple[str, _Parse]) -> tuple[_Key, ...]:
    return tuple(_Key(name, name, parse) for name, parse in spec)


_DAEMON: Final = (
    _Key("poll_interval", "poll_interval_s", _duration(positive=True)),
    _Key("bins_in_flight", "bins_in_flight", _count(minimum=1)),
    _Key("memory_budget", "memory_budget", _size(minimum=1)),
    _Key("shutdown_grace", "shutdown_grace_s", _duration()),
    _Key("orphan_grace", "orphan_grace_s", _duration()),
    _Key("lease", "lease", _boolean),
    _Key("lease_ttl", "lease_ttl_s", _duration(positive=True)),
    _Key("snapshot_memory", "snapshot_memory", _size(minimum=0)),
    _Key("snapshot_idle", "snapshot_idle_s", _duration(positive=True)),
)
_S3: Final = _keys(
    ("endpoint_url", _endpoint),
    ("region", _optional_text),
    ("profile", _optional_text),
    ("addressing_style", _addressing),
)
_LOG: Final = _keys(("format", _choice(LOG_FORMATS)), ("level", _choice(LOG_LEVELS)))
_METRICS: Final = (_Key("listen", "configured", _listen),)
_SHARD: Final = _keys(("instance", _count(minimum=0)), ("instances", _count(minimum=1)))
_POLICY: Final = (
    _Key("target_file_size", "target_file_size", _size(minimum=1)),
    _Key("min_file_size", "min_file_size", _size(minimum=0, auto=True)),
    _Key("max_deleted_rows_ratio", "max_deleted_rows_ratio", _ratio),
    _Key("min_small_files", "min_small_files", _count(minimum=1)),
    _Key("min_small_bytes", "min_small_bytes", _size(minimum=1)),
    _Key("min_interval", "min_interval_s", _duration()),
    _Key("min_file_age", "min_file_age_s", _duration()),
    _Key("codec", "codec", _choice(sorted(CODECS))),
    _Key("encodings", "encodings", _choice(list(ENCODINGS))),
    _Key("rewrite", "rewrite", _choice(list(REWRITES))),
    _Key("min_copy_row_group", "min_copy_row_group", _size(minimum=1)),
    _Key("recompress", "recompress", _boolean),
    _Key("max_masked_ratio", "max_masked_ratio", _ratio),
    _Key("enabled", "enabled", _boolean),
    _Key("quarantine_after", "quarantine_after", _count(minimum=1)),
    _Key("quarantine_for", "quarantine_for_s", _lasting),
    _Key("vacuum", "vacuum", _boolean),
    _Key("vacuum_interval", "vacuum_interval_s", _duration(positive=True)),
    _Key("vacuum_retain", "vacuum_retain_s", _retain),
    _Key("vacuum_mode", "vacuum_mode", _choice(_VACUUM_MODES)),
)
# ``uri`` and ``prefix`` are listed to be known; _Reader.uri reads them (relative paths).
_TABLE: Final = (_Key("uri", "uri", lambda v: v),)
_DISCOVER: Final = (
    _Key("prefix", "prefix", lambda v: v),
    _Key("include", "include", _globs),
    _Key("exclude", "exclude", _globs),
    _Key("max_depth", "max_depth", _count(minimum=1, maximum=64)),
    _Key("interval", "interval_s", _duration(positive=True)),
)
_SECTIONS: Final[Mapping[str, tuple[_Key, ...]]] = {
    "daemon": _DAEMON,
    "s3": _S3,
    "log": _LOG,
    "metrics": _METRICS,
    "shard": _SHARD,
    "policy": _POLICY,
}
_ARRAYS: Final[Mapping[str, tuple[_Key, ...]]] = {"table": _TABLE, "discover": _DISCOVER}
_NESTED: Final = frozenset({"policy"})  # the sub-table of overrides in each array entry


def schema_keys() -> frozenset[str]:
    """Every key path the file may hold (arrays as ``table[].uri``), for docs and tests."""
    keys = {f"{s}.{k.name}" for s, spec in _SECTIONS.items() for k in spec}
    for array, spec in _ARRAYS.items():
        keys.update(f"{array}[].{k.name}" for k in spec)
        keys.update(f"{array}[].policy.{k.name}" for k in _POLICY)
    return frozenset(keys)


_CREDENTIAL_RE: Final = re.compile(r"secret|password|passwd|token|credential|access_key|api_key")


class _Reader:
    """Walks one parsed document; every problem names ``source`` and the key path.

    A key's own problem (unknown, a credential, a wrong type or value, a section of the wrong
    shape) is noted and the walk goes on, so :meth:`check` reports all of them at once; the
    rules across keys (:meth:`build`) raise, once every key is right.
    """

    def __init__(self, source: str, base_dir: str) -> None:
        self.source = source
        self.base_dir = base_dir
        self.problems: list[str] = []

    def error(self, path: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}: {path}: {problem}")

    def note(self, path: str, problem: str) -> None:
        self.problems.append(f"{self.source}: {path}: {problem}")

    def check(self) -> None:
        """Raise every problem noted so far, each on its own line, in one ConfigError."""
        if len(self.problems) == 1:
            raise ConfigError(self.problems[0])
        if self.problems:
            lines = "".join(f"\n  {p}" for p in self.problems)
            raise ConfigError(f"{self.source}: {len(self.problems)} problems:{lines}")

    def table(self, path: str, value: object) -> dict[str, object] | None:
        if not isinstance(value, dict):
            self.note(path, f"expected a table ([{path}]), {_got(value)}")
            return None
        return value

    def values(
        self,
        path: str,
        raw: dict[str, object],
        spec: Sequence[_Key],
        *,
        nested: frozenset[str] = frozenset(),
    ) -> dict[str, object]:
        """The fields ``raw`` sets, parsed; unknown and credential keys noted."""
        by_name = {k.name: k for k in spec}
        out: dict[str, object] = {}
        for name, value in raw.items():
            where = f"{path}.{name}"
            if name in nested or self.refused(where, name, [*by_name, *nested]):
                continue
            key = by_name[name]
            try:
                out[key.attr] = key.parse(value)
            except _Invalid as exc:
                self.note(where, str(exc))
        return out

    def refused(self, where: str, name: str, known: Sequence[str]) -> bool:
        """Whether ``name`` is a credential or not a known key (noted, with the closest)."""
        if _CREDENTIAL_RE.search(name.lower()):
            self.note(
                where,
                "credentials are never read from the config file; rlcd takes them only from "
                "the AWS credential chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / "
                "AWS_SESSION_TOKEN in the environment (under systemd: /etc/rlcd/rlcd.env), "
                "a profile from ~/.aws ([s3] profile), or instance and role credentials",
            )
            return True
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            self.note(where, f"unknown key{hint}; known: {', '.join(sorted(known))}")
            return True
        return False

    def section(self, doc: dict[str, object], name: str) -> dict[str, object]:
        raw = self.table(name, doc[name]) if name in doc else None
        return {} if raw is None else self.values(name, raw, _SECTIONS[name])

    def build(self, path: str, make: Callable[..., Any], values: dict[str, object]) -> Any:
        """``make(**values)``, its ConfigError (a cross-field rule) naming ``path``."""
        try:
            return make(**values)
        except ConfigError as exc:
            raise self.error(path, str(exc)) from exc

    def uri(self, path: str, raw: dict[str, object], name: str) -> TableUri | None:
        """The entry's URI (None: a problem, noted)."""
        where = f"{path}.{name}"
        if name not in raw:
            self.note(where, "missing (every entry needs one)")
            return None
        text = raw[name]
        if not isinstance(text, str):
            self.note(where, f"expected a URI string, {_got(text)}")
            return None
        if text and "://" not in text and not os.path.isabs(text):
            text = os.path.join(self.base_dir, text)
        try:
            return TableUri.parse(text)
        except ConfigError as exc:
            self.note(where, str(exc))
            return None

    def policy(self, path: str, raw: dict[str, object]) -> Mapping[str, Any]:
        where = f"{path}.policy"
        table = self.table(where, raw["policy"]) if "policy" in raw else None
        return MappingProxyType({} if table is None else self.values(where, table, _POLICY))

    def entries(
        self, doc: dict[str, object], name: str
    ) -> list[tuple[str, dict[str, object], dict[str, object]]]:
        """Each ``[[name]]`` entry that is a table: its key path, raw table and parsed values."""
        value = doc.get(name, [])
        if not isinstance(value, list):
            self.note(name, f"expected an array of tables ([[{name}]]), {_got(value)}")
            return []
        out = []
        for i, item in enumerate(value):
            path = f"{name}[{i}]"
            raw = self.table(path, item)
            if raw is not None:
                out.append((path, raw, self.values(path, raw, _ARRAYS[name], nested=_NESTED)))
        return out


def parse_settings(text: str, *, source: str, base_dir: str) -> Settings:
    """Validate a whole file's text.

    Args:
        text: the TOML.
        source: the file's name, for messages.
        base_dir: the directory relative local paths are taken from (the file's).

    Raises:
        ConfigError: naming ``source`` and the key path, for any error in the file.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    reader = _Reader(source, base_dir)
    for name in doc:
        reader.refused(name, name, [*_SECTIONS, *_ARRAYS])
    sections = {name: reader.section(doc, name) for name in _SECTIONS}
    tables = _table_entries(reader, doc)
    discover = _discover_values(reader, doc)
    reader.check()  # every key's own problem at once; the rules across keys need them right

    shard = reader.build("shard", ShardSettings, sections["shard"])
    settings = Settings(
        source=source,
        daemon=reader.build("daemon", DaemonSettings, sections["daemon"]),
        s3=reader.build("s3", S3Config, sections["s3"]),
        log=reader.build("log", LogSettings, sections["log"]),
        shard=shard,
        metrics=reader.build(
            "metrics", MetricsSettings, {**sections["metrics"], "instance": shard.instance}
        ),
        policy=reader.build("policy", TablePolicy, sections["policy"]),
        tables=tuple(tables),
        discover=tuple(reader.build(path, DiscoverEntry, values) for path, values in discover),
    )
    # Resolve every policy the file can produce, so none fails once the daemon runs.
    for d in settings.discover:
        _resolve(source, settings.policy, [(d.key, d.overrides)])
    for t in settings.tables:
        settings.policy_for(t.uri)
    return settings


def _table_entries(reader: _Reader, doc: dict[str, object]) -> list[TableEntry]:
    entries: list[TableEntry] = []
    for path, raw, _ in reader.entries(doc, "table"):
        uri = reader.uri(path, raw, "uri")
        overrides = reader.policy(path, raw)
        if uri is None:
            continue
        earlier = next((e.key for e in entries if e.uri == uri), None)
        if earlier is not None:
            reader.note(f"{path}.uri", f"{uri} is already {earlier}")
        else:
            entries.append(TableEntry(uri, overrides, key=path))
    return entries


def _discover_values(
    reader: _Reader, doc: dict[str, object]
) -> list[tuple[str, dict[str, object]]]:
    """Each ``[[discover]]``'s key path and the fields of its :class:`DiscoverEntry`."""
    out = []
    for path, raw, values in reader.entries(doc, "discover"):
        prefix = reader.uri(path, raw, "prefix")
        values.update(prefix=prefix, overrides=reader.policy(path, raw), key=path)
        out.append((path, values))
    return out


def load_settings(path: str | os.PathLike[str]) -> Settings:
    """Read and validate the file at ``path``.

    Raises:
        ConfigError: the file cannot be read, or any error :func:`parse_settings` finds.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read the config file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text: {exc}") from exc
    return parse_settings(text, source=name, base_dir=os.path.dirname(os.path.abspath(name)))


# --- what a reload changed ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SettingsChanges:
    """What a new file changes, as key paths (``daemon.poll_interval``, ``table[<uri>].policy.
    codec``, ``discover[<prefix>].max_depth``) and the ``[[table]]``/``[[discover]]`` entries
    added and removed (by URI; their own keys are not listed)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    tables_added: tuple[str, ...] = ()
    tables_removed: tuple[str, ...] = ()
    discover_added: tuple[str, ...] = ()
    discover_removed: tuple[str, ...] = ()


_POLICY_NAMES: Final = {k.attr: k.name for k in _POLICY}


def _flat(settings: Settings, tables: Collection[str], prefixes: Collection[str]) -> dict[str, Any]:
    """Every effective setting by key path; entries only for the ``tables`` and ``prefixes``
    given (those in both files), their policy overrides only where set."""
    out: dict[str, Any] = {}
    for section, spec in _SECTIONS.items():
        values = getattr(settings, section)
        out.update({f"{section}.{k.name}": getattr(values, k.attr) for k in spec})
    entries: list[tuple[str, Mapping[str, Any]]] = []
    for t in settings.tables:
        if str(t.uri) in tables:
            entries.append((f"table[{t.uri}]", t.overrides))
    for d in settings.discover:
        if str(d.prefix) in prefixes:
            where = f"discover[{d.prefix}]"
            out.update({f"{where}.{k.name}": getattr(d, k.attr) for k in _DISCOVER[1:]})
            entries.append((where, d.overrides))
    for where, overrides in entries:
        out.update({f"{where}.policy.{_POLICY_NAMES[a]}": v for a, v in overrides.items()})
    return out


def settings_changes(old: Settings, new: Settings) -> SettingsChanges:
    """What replacing ``old`` with ``new`` changes (for the ``config_reloaded`` event)."""
    old_tables, new_tables = {str(t.uri) for t in old.tables}, {str(t.uri) for t in new.tables}
    old_prefixes = {str(d.prefix) for d in old.discover}
    new_prefixes = {str(d.prefix) for d in new.discover}
    both_tables, both_prefixes = old_tables & new_tables, old_prefixes & new_prefixes
    before = _flat(old, both_tables, both_prefixes)
    after = _flat(new, both_tables, both_prefixes)
    return SettingsChanges(
        added=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        changed=tuple(sorted(k for k in before.keys() & after.keys() if before[k] != after[k])),
        tables_added=tuple(sorted(new_tables - old_tables)),
        tables_removed=tuple(sorted(old_tables - new_tables)),
        discover_added=tuple(sorted(new_prefixes - old_prefixes)),
        discover_removed=tuple(sorted(old_prefixes - new_prefixes)),
    )


# --- rendering (rlcd config check) ---------------------------------------------------------------


def _bytes(n: int) -> str:
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _seconds(s: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{int(s // size)}{unit}"
    return f"{s:g}s"


def _describe(policy: TablePolicy) -> str:
    c = policy.compaction
    min_size = _bytes(c.small_file_threshold) + ("" if c.min_file_size is not None else " (auto)")
    return (
        f"{'enabled' if policy.enabled else 'DISABLED'}, target {_bytes(c.target_file_size)}, "
        f"small < {min_size}, DV purge > {c.max_deleted_rows_ratio:g}, "
        f"due at {policy.min_small_files} small files in a partition or "
        f"{_bytes(policy.min_small_bytes)}, every {_seconds(policy.min_interval_s)} at most, "
        f"files older than {_seconds(policy.min_file_age_s)}, {c.codec}, "
        f"{c.encodings} encodings, rewrite {c.rewrite} (copy row groups from "
        f"{_bytes(c.min_copy_row_group)}{', recompressed' if c.recompress else ''}), "
        f"mask up to {c.max_masked_ratio:g}, "
        f"quarantine a source after {policy.quarantine_after} failed reads "
        + (
            "until a reload"
            if policy.quarantine_for_s is None
            else f"for {_seconds(policy.quarantine_for_s)}"
        )
        + f", {_vacuum(policy)}"
    )


def _vacuum(policy: TablePolicy) -> str:
    if not policy.vacuum:
        return "no vacuum"
    retain = (
        "the table's retention"
        if policy.vacuum_retain_s is None
        else f"retain {_seconds(policy.vacuum_retain_s)}"
    )
    return f"{policy.vacuum_mode} vacuum every {_seconds(policy.vacuum_interval_s)} ({retain})"


def render_policies(settings: Settings) -> str:
    """The effective policy of every table the file names and every discover prefix, one
    block each, for ``rlcd config check``. A table property (``delta.targetFileSize``) may
    still change the target when the table is read."""
    shard = settings.shard
    lines = [f"{settings.source}: valid; shard {shard.instance} of {shard.instances}"]
    lines.append(f"defaults: {_describe(settings.policy)}")
    for t in settings.tables:
        owner = shard_of(t.uri, shard.instances)
        mine = "this instance" if owner == shard.instance else f"instance {owner}"
        lines.append(f"{t.key} {t.uri} ({mine}): {_describe(settings.policy_for(t.uri))}")
    for d in settings.discover:
        found = _resolve(settings.source, settings.policy, [(d.key, d.overrides)])
        rules = f"include {', '.join(d.include)}"
        if d.exclude:
            rules += f", exclude {', '.join(d.exclude)}"
        lines.append(
            f"{d.key} {d.prefix}/ (depth <= {d.max_depth}, {rules}, every "
            f"{_seconds(d.interval_s)}): {_describe(found)}"
        )
    lines.append(f"daemon: {_daemon(settings.daemon)}")
    if not settings.tables and not settings.discover:
        lines.append("no [[table]] or [[discover]] entries: nothing to compact")
    return "\n".join(lines)


def _daemon(d: DaemonSettings) -> str:
    lease = f"a lease of {_seconds(d.lease_ttl_s)}" if d.lease else "no lease"
    return (
        f"poll every {_seconds(d.poll_interval_s)}, {d.bins_in_flight} bins in flight within "
        f"{_bytes(d.memory_budget)}, snapshots within {_bytes(d.snapshot_memory)} (released "
        f"after {_seconds(d.snapshot_idle_s)} idle), {lease}, orphans deleted after "
        f"{_seconds(d.orphan_grace_s)}, {_seconds(d.shutdown_grace_s)} to finish on SIGTERM"
    )
