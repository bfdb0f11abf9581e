"""The daemon's TOML settings: every key, every error (with file and key path), policy
resolution, discovery matching and sharding."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from rlcd.compaction.policy import CompactionPolicy, parse_size
from rlcd.daemon.config import (
    DaemonSettings,
    DiscoverEntry,
    LogSettings,
    MetricsSettings,
    Settings,
    SettingsChanges,
    ShardSettings,
    TablePolicy,
    load_settings,
    parse_settings,
    render_policies,
    schema_keys,
    settings_changes,
    shard_of,
    with_instance,
)
from rlcd.errors import ConfigError
from rlcd.storage.s3 import S3Config
from rlcd.storage.uri import TableUri

MIB = 1024**2
DATA = Path(__file__).parent / "data"


def parse(text: str) -> Settings:
    return parse_settings(text, source="/etc/rlcd/rlcd.toml", base_dir="/etc/rlcd")


def error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text)
    return str(info.value)


def test_an_empty_file_is_every_default() -> None:
    """A file with no keys gives the documented defaults and no tables."""
    s = parse("")
    assert s.daemon == DaemonSettings()
    assert s.s3 == S3Config()
    assert s.log == LogSettings()
    assert s.metrics == MetricsSettings()
    assert s.shard == ShardSettings()
    assert s.policy == TablePolicy()
    assert (s.tables, s.discover) == ((), ())
    assert s.daemon.orphan_grace_s == 3600.0
    assert (s.daemon.lease, s.daemon.lease_ttl_s) == (True, 60.0)
    assert (s.daemon.snapshot_memory, s.daemon.snapshot_idle_s) == (1024**3, 600.0)
    assert s.policy.min_file_age_s == 300.0


@pytest.mark.parametrize(
    ("toml", "read", "expected"),
    [
        ('[daemon]\npoll_interval = "30s"', lambda s: s.daemon.poll_interval_s, 30.0),
        ("[daemon]\nbins_in_flight = 7", lambda s: s.daemon.bins_in_flight, 7),
        ('[daemon]\nmemory_budget = "2GiB"', lambda s: s.daemon.memory_budget, 2 * 1024**3),
        ('[daemon]\nshutdown_grace = "2m"', lambda s: s.daemon.shutdown_grace_s, 120.0),
        ('[daemon]\norphan_grace = "1d"', lambda s: s.daemon.orphan_grace_s, 86400.0),
        ("[daemon]\nlease = false", lambda s: s.daemon.lease, False),
        ('[daemon]\nlease_ttl = "2m"', lambda s: s.daemon.lease_ttl_s, 120.0),
        ('[daemon]\nsnapshot_memory = "64MiB"', lambda s: s.daemon.snapshot_memory, 64 * 2**20),
        ("[daemon]\nsnapshot_memory = 0", lambda s: s.daemon.snapshot_memory, 0),
        ('[daemon]\nsnapshot_idle = "1h"', lambda s: s.daemon.snapshot_idle_s, 3600.0),
        (
            '[s3]\nendpoint_url = "http://127.0.0.1:5000"',
            lambda s: s.s3.endpoint_url,
            "http://127.0.0.1:5000",
        ),
        ('[s3]\nregion = "eu-west-3"', lambda s: s.s3.region, "eu-west-3"),
        ('[s3]\nprofile = "lake"', lambda s: s.s3.profile, "lake"),
        ('[s3]\naddressing_style = "path"', lambda s: s.s3.addressing_style, "path"),
        ('[s3]\naddressing_style = "auto"', lambda s: s.s3.addressing_style, None),
        ('[s3]\nregion = ""', lambda s: s.s3.region, None),
        ('[log]\nformat = "json"', lambda s: s.log.format, "json"),
        ('[log]\nlevel = "debug"', lambda s: s.log.level, "debug"),
        ('[metrics]\nlisten = "0.0.0.0:9100"', lambda s: s.metrics.configured, ("0.0.0.0", 9100)),
        ('[metrics]\nlisten = "[::1]:0"', lambda s: s.metrics.configured, ("::1", 0)),
        ('[metrics]\nlisten = ""', lambda s: s.metrics.configured, None),
        ("[shard]\ninstance = 2\ninstances = 3", lambda s: s.shard, ShardSettings(2, 3)),
        ('[policy]\ntarget_file_size = "64MiB"', lambda s: s.policy.target_file_size, 64 * MIB),
        ('[policy]\nmin_file_size = "8MB"', lambda s: s.policy.min_file_size, 8_000_000),
        ('[policy]\nmin_file_size = "auto"', lambda s: s.policy.min_file_size, None),
        ("[policy]\nmin_file_size = 0", lambda s: s.policy.min_file_size, 0),
        ("[policy]\nmax_deleted_rows_ratio = 0.2", lambda s: s.policy.max_deleted_rows_ratio, 0.2),
        ("[policy]\nmax_deleted_rows_ratio = 1", lambda s: s.policy.max_deleted_rows_ratio, 1.0),
        ("[policy]\nmin_small_files = 3", lambda s: s.policy.min_small_files, 3),
        ('[policy]\nmin_small_bytes = "1GB"', lambda s: s.policy.min_small_bytes, 10**9),
        ("[policy]\nmin_interval = 0", lambda s: s.policy.min_interval_s, 0.0),
        ('[policy]\nmin_file_age = "90s"', lambda s: s.policy.min_file_age_s, 90.0),
        ('[policy]\ncodec = "snappy"', lambda s: s.policy.codec, "snappy"),
        ("[policy]\nenabled = false", lambda s: s.policy.enabled, False),
        ("[policy]\nquarantine_after = 5", lambda s: s.policy.quarantine_after, 5),
        ("", lambda s: s.policy.quarantine_for_s, 86400.0),
        ('[policy]\nquarantine_for = "2h"', lambda s: s.policy.quarantine_for_s, 7200.0),
        ('[policy]\nquarantine_for = "none"', lambda s: s.policy.quarantine_for_s, None),
        ("[policy]\nquarantine_for = 0", lambda s: s.policy.quarantine_for_s, None),
        ('[policy]\nquarantine_for = "0"', lambda s: s.policy.quarantine_for_s, None),
        ("[policy]\nvacuum = false", lambda s: s.policy.vacuum, False),
        ('[policy]\nvacuum_interval = "6h"', lambda s: s.policy.vacuum_interval_s, 21600.0),
        ('[policy]\nvacuum_retain = "2d"', lambda s: s.policy.vacuum_retain_s, 172800.0),
        ('[policy]\nvacuum_retain = "1h"', lambda s: s.policy.vacuum_retain_s, 3600.0),
        ("[policy]\nvacuum_retain = 3600", lambda s: s.policy.vacuum_retain_s, 3600.0),
        ('[policy]\nvacuum_retain = ""', lambda s: s.policy.vacuum_retain_s, None),
        ('[policy]\nvacuum_mode = "full"', lambda s: s.policy.vacuum_mode, "full"),
    ],
)
def test_every_section_key_is_read(toml: str, read: object, expected: object) -> None:
    """Each key of each section lands in its field with its real meaning."""
    assert read(parse(toml)) == expected  # type: ignore[operator]


def test_table_and_discover_entries_are_read() -> None:
    """[[table]] and [[discover]] entries keep their URI, globs, depth, interval and overrides."""
    s = parse(
        """
        [[table]]
        uri = "s3a://lake/sales/"
        policy = { codec = "gzip" }

        [[discover]]
        prefix = "s3://lake/raw"
        include = ["events/*", "logs/**"]
        exclude = ["**/tmp"]
        max_depth = 5
        interval = "10m"
        [discover.policy]
        min_interval = "1h"
        """
    )
    (table,) = s.tables
    assert table.uri == TableUri("s3", "lake", "sales")
    assert dict(table.overrides) == {"codec": "gzip"}
    assert table.key == "table[0]"
    (d,) = s.discover
    assert d.prefix == TableUri("s3", "lake", "raw")
    assert (d.include, d.exclude, d.max_depth, d.interval_s) == (
        ("events/*", "logs/**"),
        ("**/tmp",),
        5,
        600.0,
    )
    assert dict(d.overrides) == {"min_interval_s": 3600.0}


def test_relative_local_paths_are_taken_from_the_files_directory() -> None:
    """A uri or prefix without a scheme is relative to the config file, not the cwd."""
    s = parse('[[table]]\nuri = "tables/a"\n[[discover]]\nprefix = "../lake"')
    assert s.tables[0].uri == TableUri("file", "", "/etc/rlcd/tables/a")
    assert s.discover[0].prefix == TableUri("file", "", "/etc/lake")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("134217728", 134217728),
        ("128MiB", 128 * MIB),
        ("128mib", 128 * MIB),
        ("128 MiB", 128 * MIB),
        ("128MB", 128_000_000),
        ("1kB", 1000),
        ("1KiB", 1024),
        ("3GB", 3 * 10**9),
        ("2TiB", 2 * 1024**4),
        ("512B", 512),
    ],
)
def test_sizes_mean_what_their_unit_says(text: str, size: int) -> None:
    """MiB is 2^20 bytes and MB is 10^6 bytes, as the units say."""
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["128m", "1g", "1.5GiB", "-1", "", "MiB", "12 parsecs"])
def test_sizes_that_are_not_sizes_are_refused(text: str) -> None:
    """Ambiguous (Spark-style ``128m``), fractional, negative or unitless-garbage sizes fail."""
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_an_ambiguous_unit_says_how_to_write_it() -> None:
    """``128m`` is refused with both unambiguous spellings offered."""
    message = error('[policy]\ntarget_file_size = "128m"')
    assert "128MiB" in message and "128MB" in message


@pytest.mark.parametrize(
    ("toml", "path", "phrase"),
    [
        # the file itself
        ("[daemon\n", "", "not valid TOML"),
        # unknown keys, with the closest known key
        ("[deamon]", "deamon", "did you mean daemon?"),
        ("poll_interval = 5", "poll_interval", "unknown key"),
        ("[daemon]\npoll_intervall = 5", "daemon.poll_intervall", "did you mean poll_interval?"),
        ('[[table]]\nuri = "s3://b/t"\nurl = 1', "table[0].url", "unknown key"),
        (
            '[[table]]\nuri = "s3://b/t"\npolicy = { target = 1 }',
            "table[0].policy.target",
            "unknown key",
        ),
        (
            '[[discover]]\nprefix = "s3://b"\ndepth = 2',
            "discover[0].depth",
            "did you mean max_depth?",
        ),
        # wrong types
        ("[daemon]\npoll_interval = true", "daemon.poll_interval", "expected a duration"),
        ("[daemon]\nbins_in_flight = 2.5", "daemon.bins_in_flight", "expected an integer"),
        ('[daemon]\nbins_in_flight = "4"', "daemon.bins_in_flight", "(a string)"),
        ("[daemon]\nmemory_budget = 1.5", "daemon.memory_budget", "expected a size"),
        ("[s3]\nregion = 3", "s3.region", "expected a string"),
        ('[log]\nformat = "text"', "log.format", "one of auto, json, console"),
        ('[log]\nlevel = "INFO"', "log.level", "one of debug, info, warning, error"),
        ("[metrics]\nlisten = 9464", "metrics.listen", 'expected "host:port"'),
        (
            '[policy]\nmax_deleted_rows_ratio = "5%"',
            "policy.max_deleted_rows_ratio",
            "expected a number",
        ),
        ('[policy]\nenabled = "yes"', "policy.enabled", "expected true or false"),
        ('[policy]\ncodec = "lz4"', "policy.codec", "one of gzip, none, snappy, zstd"),
        ('[policy]\nmin_file_size = "half"', "policy.min_file_size", "not a size"),
        ("[policy]\nmin_small_bytes = true", "policy.min_small_bytes", "expected a size"),
        (
            '[[discover]]\nprefix = "s3://b"\ninclude = "*"',
            "discover[0].include",
            "expected an array",
        ),
        (
            '[[discover]]\nprefix = "s3://b"\nexclude = [""]',
            "discover[0].exclude",
            "non-empty glob",
        ),
        ("daemon = 3", "daemon", "expected a table"),
        ('[[daemon]]\npoll_interval = "5s"', "daemon", "expected a table"),
        ("[table]\nuri = 'x'", "table", "expected an array of tables ([[table]])"),
        ("table = [1]", "table[0]", "expected a table"),
        ('[[table]]\nuri = "s3://b/t"\npolicy = 1', "table[0].policy", "expected a table"),
        ("[[table]]\nuri = 1", "table[0].uri", "expected a URI string"),
        # impossible values
        ("[daemon]\npoll_interval = 0", "daemon.poll_interval", "> 0"),
        ('[daemon]\nshutdown_grace = "-5s"', "daemon.shutdown_grace", "not a duration"),
        ('[daemon]\norphan_grace = "1y"', "daemon.orphan_grace", "not a duration"),
        ("[daemon]\norphan_grace = nan", "daemon.orphan_grace", ">= 0"),
        ("[daemon]\nbins_in_flight = 0", "daemon.bins_in_flight", ">= 1"),
        ("[daemon]\nlease_ttl = 0", "daemon.lease_ttl", "> 0"),
        ("[daemon]\nsnapshot_idle = 0", "daemon.snapshot_idle", "> 0"),
        ('[daemon]\nsnapshot_memory = "1g"', "daemon.snapshot_memory", "ambiguous"),
        ("[daemon]\nmemory_budget = 0", "daemon.memory_budget", "within 1 and 2^63-1"),
        ('[s3]\nendpoint_url = "127.0.0.1:5000"', "s3.endpoint_url", "http:// or https://"),
        ('[s3]\naddressing_style = "dns"', "s3.addressing_style", "one of auto, virtual, path"),
        ('[metrics]\nlisten = "localhost:70000"', "metrics.listen", 'expected "host:port"'),
        ('[metrics]\nlisten = "localhost"', "metrics.listen", 'expected "host:port"'),
        ("[shard]\ninstance = -1", "shard.instance", ">= 0"),
        ("[shard]\ninstances = 0", "shard.instances", ">= 1"),
        ("[shard]\ninstance = 2\ninstances = 2", "shard", "not within 0..1"),
        ("[policy]\nmax_deleted_rows_ratio = 1.5", "policy.max_deleted_rows_ratio", "[0, 1]"),
        ("[policy]\ntarget_file_size = 0", "policy.target_file_size", "within 1 and"),
        ("[policy]\nmin_small_files = 0", "policy.min_small_files", ">= 1"),
        ('[policy]\nmin_file_age = "-1m"', "policy.min_file_age", "not a duration"),
        ('[policy]\nquarantine_for = "never"', "policy.quarantine_for", "is not a duration"),
        ("[policy]\nquarantine_for = -1", "policy.quarantine_for", '-1; "none" keeps a file'),
        ('[policy]\nvacuum_interval = "0s"', "policy.vacuum_interval", "> 0"),
        ("[policy]\nvacuum = 1", "policy.vacuum", "expected true or false"),
        ('[policy]\nvacuum_mode = "deep"', "policy.vacuum_mode", "one of lite, full"),
        ('[policy]\nvacuum_retain = "7x"', "policy.vacuum_retain", "not a duration"),
        ('[policy]\nvacuum_retain = "59m"', "policy.vacuum_retain", "at least 1h, got 59m"),
        ("[policy]\nvacuum_retain = 0", "policy.vacuum_retain", "--force-short-retention"),
        (
            '[[table]]\nuri = "s3://b/t"\npolicy = { vacuum_retain = "30m" }',
            "table[0].policy.vacuum_retain",
            "must be at least 1h",
        ),
        (
            '[[discover]]\nprefix = "s3://b"\npolicy = { vacuum_retain = "0h" }',
            "discover[0].policy.vacuum_retain",
            "must be at least 1h",
        ),
        (
            '[policy]\ntarget_file_size = "10MiB"\nmin_file_size = "6MiB"',
            "policy",
            "at most half of target_file_size",
        ),
        (
            '[[table]]\nuri = "s3://b/t"\npolicy = { min_file_size = "100MiB" }',
            "table[0].policy",
            "at most half",
        ),
        (
            '[[discover]]\nprefix = "s3://b"\npolicy = { target_file_size = "1MiB", '
            'min_file_size = "1MiB" }',
            "discover[0].policy",
            "at most half",
        ),
        # a table whose own overrides fit the defaults but not its discover prefix's
        (
            '[[discover]]\nprefix = "s3://b"\npolicy = { target_file_size = "16MiB" }\n'
            '[[table]]\nuri = "s3://b/t"\npolicy = { min_file_size = "10MiB" }',
            "table[0].policy",
            "at most half",
        ),
        ('[[discover]]\nprefix = "s3://b"\nmax_depth = 0', "discover[0].max_depth", ">= 1"),
        ('[[discover]]\nprefix = "s3://b"\ninterval = 0', "discover[0].interval", "> 0"),
        ("[[table]]\npolicy = {}", "table[0].uri", "missing"),
        ("[[discover]]\ninclude = ['*']", "discover[0].prefix", "missing"),
        ('[[table]]\nuri = "gs://b/t"', "table[0].uri", "unsupported scheme"),
        ('[[table]]\nuri = "s3://"', "table[0].uri", "no bucket"),
        ('[[table]]\nuri = ""', "table[0].uri", "empty"),
        (
            '[[table]]\nuri = "s3://b/t"\n[[table]]\nuri = "s3a://b/t/"',
            "table[1].uri",
            "s3://b/t is already table[0]",
        ),
    ],
)
def test_each_error_names_the_file_and_key_path(toml: str, path: str, phrase: str) -> None:
    """An unknown key, a wrong type or an impossible value fails, naming file and key path."""
    message = error(toml)
    assert message.startswith(f"/etc/rlcd/rlcd.toml: {path}")
    assert phrase in message


def test_every_bad_key_is_reported_at_once() -> None:
    """A file with several bad keys fails with one error listing each, with file and key path."""
    message = error(
        "[daemon]\npoll_intervall = 5\nbins_in_flight = 0\n"
        '[log]\nformat = "text"\n'
        '[[table]]\nuri = "s3://b/t"\npolicy = { codec = "lz4", target = 1 }\n'
        "[[table]]\nuri = 1\n"
        '[[discover]]\nprefix = "s3://b"\nmax_depth = 0\n'
    )
    lines = message.splitlines()
    assert lines[0] == "/etc/rlcd/rlcd.toml: 7 problems:"
    paths = [line.split(": ")[1] for line in lines[1:]]
    assert paths == [
        "daemon.poll_intervall",
        "daemon.bins_in_flight",
        "log.format",
        "table[0].policy.codec",
        "table[0].policy.target",
        "table[1].uri",
        "discover[0].max_depth",
    ]
    assert all(line.startswith("  /etc/rlcd/rlcd.toml: ") for line in lines[1:])
    assert "did you mean poll_interval?" in lines[1] and ">= 1" in lines[2]


def test_rules_across_keys_wait_for_every_key_to_be_right() -> None:
    """A rule across keys is not judged on a file whose keys are wrong (it would be judged on
    defaults); it is reported once they are right."""
    text = '[policy]\ntarget_file_size = "10MiB"\nmin_file_size = "6MiB"\n'
    assert error(text + "codec = 'lz4'") == (
        "/etc/rlcd/rlcd.toml: policy.codec: must be one of gzip, none, snappy, zstd, "
        "got 'lz4' (a string)"
    )
    assert "at most half of target_file_size" in error(text)


@pytest.mark.parametrize(
    ("toml", "path"),
    [
        ('aws_secret_access_key = "wJalrXUtnFEMI"', "aws_secret_access_key"),
        ('[s3]\naws_access_key_id = "wJalrXUtnFEMI"', "s3.aws_access_key_id"),
        ('[s3]\nsecret_access_key = "wJalrXUtnFEMI"', "s3.secret_access_key"),
        ('[s3]\nsession_token = "wJalrXUtnFEMI"', "s3.session_token"),
        ('[metrics]\npassword = "wJalrXUtnFEMI"', "metrics.password"),
        (
            '[[table]]\nuri = "s3://b/t"\npolicy = { api_key = "wJalrXUtnFEMI" }',
            "table[0].policy.api_key",
        ),
    ],
)
def test_a_credential_in_the_file_is_refused_without_echoing_it(toml: str, path: str) -> None:
    """A key named like a credential fails, says where credentials come from, hides the value."""
    message = error(toml)
    assert message.startswith(f"/etc/rlcd/rlcd.toml: {path}: credentials are never read")
    assert "AWS_SECRET_ACCESS_KEY" in message and "/etc/rlcd/rlcd.env" in message
    assert "wJalrXUtnFEMI" not in message


def test_load_names_a_missing_file() -> None:
    """A config file that cannot be read is an error naming it."""
    with pytest.raises(ConfigError, match=r"^/nonexistent/rlcd\.toml: cannot read"):
        load_settings("/nonexistent/rlcd.toml")


def test_load_refuses_a_file_that_is_not_utf8() -> None:
    """A file that is not UTF-8 text is an error naming it."""
    path = DATA / "not-utf8.toml"
    with pytest.raises(ConfigError, match=rf"^{path}: not UTF-8"):
        load_settings(path)


# --- policy resolution ---------------------------------------------------------------------------

LAYERED = """
[policy]
target_file_size = "64MiB"
min_small_files = 4

[[discover]]
prefix = "s3://lake"
policy = { min_small_files = 6, codec = "snappy" }

[[discover]]
prefix = "s3://lake/hot"
include = ["*"]
policy = { min_interval = 0 }

[[table]]
uri = "s3://lake/hot/orders"
policy = { min_small_files = 2, enabled = false }
"""


def test_policies_resolve_defaults_then_discover_prefix_then_table() -> None:
    """A table's own entry wins over its discover prefix, which wins over the defaults."""
    s = parse(LAYERED)
    p = s.policy_for(TableUri.parse("s3://lake/hot/orders"))
    assert (p.target_file_size, p.min_small_files, p.min_interval_s, p.enabled) == (
        64 * MIB,
        2,
        0.0,
        False,
    )
    assert p.codec == "zstd"  # the longest prefix's block alone applies, not the shorter one


def test_the_longest_discover_prefix_that_takes_a_table_applies() -> None:
    """Of two discover blocks taking a table, the one with the longer prefix gives the policy;
    one whose globs refuse it does not count."""
    s = parse(LAYERED)
    hot = s.policy_for(TableUri.parse("s3://lake/hot/clicks"))
    assert (hot.min_interval_s, hot.min_small_files, hot.codec) == (0.0, 4, "zstd")
    deep = s.policy_for(TableUri.parse("s3://lake/hot/a/b"))  # "*" takes depth 1 only
    assert (deep.min_small_files, deep.codec) == (6, "snappy")
    elsewhere = s.policy_for(TableUri.parse("s3://other/t"))
    assert elsewhere == s.policy


def test_the_policy_gives_the_compaction_its_policy() -> None:
    """TablePolicy.compaction is the CompactionPolicy the compaction takes."""
    p = parse(
        '[policy]\ntarget_file_size = "32MiB"\nmin_file_size = "4MiB"\ncodec = "gzip"\n'
        "max_deleted_rows_ratio = 0.3"
    ).policy
    assert p.compaction == CompactionPolicy(
        target_file_size=32 * MIB, min_file_size=4 * MIB, max_deleted_rows_ratio=0.3, codec="gzip"
    )


def test_a_table_policy_checks_its_own_fields() -> None:
    """Counts below 1 and negative durations cannot be built even outside the file."""
    with pytest.raises(ConfigError, match="min_small_files"):
        TablePolicy(min_small_files=0)
    with pytest.raises(ConfigError, match="min_file_age_s"):
        TablePolicy(min_file_age_s=-1)
    with pytest.raises(ConfigError, match="vacuum_retain must be at least 1h, got 30m"):
        TablePolicy(vacuum_retain_s=1800)
    with pytest.raises(ConfigError, match="vacuum_interval"):
        TablePolicy(vacuum_interval_s=0)
    with pytest.raises(ConfigError, match="vacuum_mode"):
        TablePolicy(vacuum_mode="deep")  # type: ignore[arg-type]


def test_the_vacuum_defaults_are_lite_daily_with_the_tables_retention() -> None:
    """By default every table is vacuumed in lite mode once a day, with its own retention."""
    policy = parse("").policy
    assert (policy.vacuum, policy.vacuum_mode, policy.vacuum_interval_s) == (True, "lite", 86400)
    assert policy.vacuum_retain_s is None


# --- discovery matching --------------------------------------------------------------------------


def entry(**kw: object) -> DiscoverEntry:
    return DiscoverEntry(prefix=TableUri.parse("s3://lake/raw"), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("include", "exclude", "depth", "relative", "taken"),
    [
        (("**",), (), 3, "a", True),
        (("**",), (), 3, "a/b/c", True),
        (("**",), (), 2, "a/b/c", False),
        (("*",), (), 3, "a/b", False),
        (("events/*",), (), 3, "events/clicks", True),
        (("events/*",), (), 3, "logs/clicks", False),
        (("**/orders",), (), 3, "eu/orders", True),
        (("**/orders",), (), 3, "orders", True),
        (("**",), ("**/tmp*",), 3, "eu/tmp_load", False),
        (("**",), ("staging",), 3, "staging", False),
        (("**",), ("staging",), 3, "staging/t", True),
        (("t?",), (), 3, "t1", True),
    ],
)
def test_discovery_takes_tables_by_depth_and_globs(
    include: tuple[str, ...], exclude: tuple[str, ...], depth: int, relative: str, taken: bool
) -> None:
    """Globs match whole segments (``*`` one, ``**`` any number), within the depth limit."""
    assert entry(include=include, exclude=exclude, max_depth=depth).accepts(relative) is taken


def test_discovery_relates_uris_to_its_prefix() -> None:
    """Only URIs under the prefix (same bucket, a whole path segment below) belong to it."""
    d = entry()
    assert d.relative(TableUri.parse("s3://lake/raw/a/b")) == "a/b"
    assert d.relative(TableUri.parse("s3://lake/rawer/a")) is None
    assert d.relative(TableUri.parse("s3://lake/raw")) is None
    assert d.relative(TableUri.parse("s3://other/raw/a")) is None
    assert d.relative(TableUri.parse("file:///raw/a")) is None
    bucket = DiscoverEntry(prefix=TableUri.parse("s3://lake"))
    assert bucket.relative(TableUri.parse("s3://lake/t")) == "t"


# --- sharding ------------------------------------------------------------------------------------

URIS = [TableUri.parse(f"s3://lake/db{i % 7}/table_{i}") for i in range(4000)]


def test_shards_are_stable_across_processes_and_versions() -> None:
    """The shard of a URI is fixed by SHA-256, not Python's salted hash: the instance ``i`` with
    the largest ``sha256(f"{i}\\0{uri}")`` (answers computed with coreutils' sha256sum)."""
    got = [shard_of(TableUri.parse(f"s3://lake/t{i}"), 4) for i in range(8)]
    assert got == [0, 1, 2, 1, 3, 3, 1, 3]


def test_shards_are_balanced() -> None:
    """Each of 4 instances gets a quarter of 4000 tables, within 10%."""
    counts = collections.Counter(shard_of(u, 4) for u in URIS)
    assert sorted(counts) == [0, 1, 2, 3]
    assert all(900 <= c <= 1100 for c in counts.values()), counts


def test_adding_an_instance_moves_only_the_tables_it_takes() -> None:
    """From 4 to 5 instances, a table either stays or moves to the new instance (about 1/5)."""
    moved = [u for u in URIS if shard_of(u, 4) != shard_of(u, 5)]
    assert all(shard_of(u, 5) == 4 for u in moved)
    assert 650 <= len(moved) <= 950


def test_one_table_spelled_two_ways_has_one_shard() -> None:
    """``s3a://b/t/`` and ``s3://b/t`` are the same table and land on the same instance."""
    for i in range(50):
        assert shard_of(TableUri.parse(f"s3a://b/t{i}/"), 3) == shard_of(
            TableUri.parse(f"s3://b/t{i}"), 3
        )


def test_each_table_has_exactly_one_owner() -> None:
    """Across instances 0..n-1 exactly one owns each table."""
    shards = [ShardSettings(i, 3) for i in range(3)]
    for u in URIS[:300]:
        assert sum(s.owns(u) for s in shards) == 1


def test_the_command_line_instance_is_checked_against_the_file() -> None:
    """``--instance`` replaces the file's instance and must fall within its instances."""
    s = parse("[shard]\ninstances = 3")
    assert with_instance(s, 2).shard == ShardSettings(2, 3)
    with pytest.raises(ConfigError, match=r"--instance: .*not within 0\.\.2.*rlcd\.toml"):
        with_instance(s, 3)


# --- the rest ------------------------------------------------------------------------------------


def test_each_shard_instance_listens_on_its_own_port() -> None:
    """Instance i of the shared file serves metrics on the port + i; port 0 and "" stay."""
    s = parse('[metrics]\nlisten = "127.0.0.1:9464"\n[shard]\ninstances = 3')
    assert [with_instance(s, i).metrics.listen for i in range(3)] == [
        ("127.0.0.1", 9464),
        ("127.0.0.1", 9465),
        ("127.0.0.1", 9466),
    ]
    any_port = parse('[metrics]\nlisten = "[::1]:0"\n[shard]\ninstances = 2')
    assert with_instance(any_port, 1).metrics.listen == ("::1", 0)
    assert parse('[metrics]\nlisten = ""').metrics.listen is None
    assert parse(
        '[metrics]\nlisten = "h:9000"\n[shard]\ninstance = 2\ninstances = 3'
    ).metrics.listen == (
        "h",
        9002,
    )
    with pytest.raises(ConfigError, match=r"^--instance: port 65535 \+ shard instance 1 is above"):
        with_instance(parse('[metrics]\nlisten = "h:65535"\n[shard]\ninstances = 2'), 1)


def test_log_format_maps_to_the_logging_setup() -> None:
    """auto lets the logging setup pick by TTY; json and console force it."""
    assert [LogSettings(format=f).json for f in ("auto", "json", "console")] == [
        None,
        True,
        False,
    ]


def test_render_shows_every_effective_policy() -> None:
    """``config check`` output has the defaults, each table with its owner and each prefix."""
    text = render_policies(parse(LAYERED + "[shard]\ninstances = 2\n"))
    lines = text.splitlines()
    assert lines[0] == "/etc/rlcd/rlcd.toml: valid; shard 0 of 2"
    assert lines[1].startswith("defaults: enabled, target 64 MiB, small < 32 MiB (auto)")
    owner = shard_of(TableUri.parse("s3://lake/hot/orders"), 2)
    who = "this instance" if owner == 0 else f"instance {owner}"
    assert lines[2].startswith(f"table[0] s3://lake/hot/orders ({who}): DISABLED")
    assert "due at 2 small files" in lines[2]
    assert lines[3].startswith("discover[0] s3://lake/ (depth <= 3, include **, every 5m)")
    assert "snappy" in lines[3]
    assert lines[4].startswith("discover[1] s3://lake/hot/ (depth <= 3, include *")
    assert "every 0s at most" in lines[4]
    assert lines[1].endswith(
        "zstd, adaptive encodings, rewrite auto (copy row groups from 4 MiB), mask up to 0.5, "
        "quarantine a source after 3 failed reads for 1d, lite vacuum every 1d "
        "(the table's retention)"
    )
    assert "quarantine a source after 3 failed reads until a reload" in render_policies(
        parse('[policy]\nquarantine_for = "none"')
    )
    assert lines[-1].startswith("daemon: poll every ")
    assert render_policies(parse("")).splitlines()[-2] == (
        "daemon: poll every 10s, 4 bins in flight within 1 GiB, snapshots within 1 GiB "
        "(released after 10m idle), a lease of 1m, orphans deleted after 1h, 1m to finish on "
        "SIGTERM"
    )
    settings = parse('[daemon]\nsnapshot_memory = "256MiB"\nlease = false\n')
    assert "snapshots within 256 MiB (released after 10m idle), no lease" in render_policies(
        settings
    )


def test_render_shows_an_encodings_override() -> None:
    """A table's ``encodings`` and ``max_masked_ratio`` overrides show in its line."""
    text = render_policies(
        parse(
            '[[table]]\nuri = "s3://lake/t"\n'
            '[table.policy]\nencodings = "conservative"\nmax_masked_ratio = 0.2\n'
        )
    )
    assert (
        "conservative encodings, rewrite auto (copy row groups from 4 MiB), mask up to 0.2,"
        in text.splitlines()[2]
    )


def test_the_rewrite_keys_reach_the_compaction_policy() -> None:
    """``rewrite`` and ``min_copy_row_group`` override per table and show in its line; a
    value outside the choices or sizes is refused."""
    text = '[[table]]\nuri = "s3://lake/t"\n[table.policy]\nrewrite = "reencode"\n'
    settings = parse(text + 'min_copy_row_group = "16MiB"\n')
    overrides = settings.tables[0].overrides
    assert overrides == {"rewrite": "reencode", "min_copy_row_group": 16 * 1024 * 1024}
    assert "rewrite reencode (copy row groups from 16 MiB)" in render_policies(settings)
    with pytest.raises(ConfigError, match="rewrite"):
        parse(text.replace("reencode", "copy"))
    with pytest.raises(ConfigError, match="min_copy_row_group"):
        parse(text + "min_copy_row_group = 0\n")
    recompressed = render_policies(parse(text + "recompress = true\n"))
    assert "rewrite reencode (copy row groups from 4 MiB, recompressed)" in recompressed


def test_render_shows_the_vacuum_keys() -> None:
    """A table's vacuum overrides show at the end of its line; ``vacuum = false`` says so."""
    text = render_policies(
        parse(
            '[policy]\nvacuum_mode = "full"\nvacuum_interval = "12h"\nvacuum_retain = "2d"\n'
            '[[table]]\nuri = "s3://lake/t"\n[table.policy]\nvacuum = false\n'
        )
    )
    defaults, table = text.splitlines()[1:3]
    assert defaults.endswith(", full vacuum every 12h (retain 2d)")
    assert table.endswith(", no vacuum")


def test_render_says_when_there_is_nothing_to_compact() -> None:
    """A file with no tables and no discovery says so."""
    assert render_policies(parse("")).endswith("nothing to compact")


def test_schema_keys_cover_sections_and_entries() -> None:
    """The schema lists every section key and each entry's keys and policy overrides."""
    keys = schema_keys()
    assert {"daemon.poll_interval", "table[].uri", "discover[].policy.min_file_age"} <= keys
    assert "table[].policy.enabled" in keys and "policy.enabled" in keys


# --- reload changes --------------------------------------------------------------------------


def test_settings_changes_name_keys_and_entries() -> None:
    """A reload's diff names each changed, added and removed key path and the entries added
    and removed; an unchanged file changes nothing; credentials are never among the keys."""
    old = parse(LAYERED)
    assert settings_changes(old, old) == SettingsChanges()
    new_text = (
        LAYERED.replace("min_small_files = 4", "min_small_files = 5\nquarantine_after = 2")
        .replace("policy = { min_interval = 0 }", 'policy = { min_interval = 0, codec = "gzip" }')
        .replace('include = ["*"]', 'include = ["*"]\nmax_depth = 1')
        .replace("s3://lake/hot/orders", "s3://lake/hot/items")
        + '[daemon]\npoll_interval = "1m"\n'
    )
    changes = settings_changes(old, parse(new_text))
    assert changes.changed == (
        "daemon.poll_interval",
        "discover[s3://lake/hot].max_depth",
        "policy.min_small_files",
        "policy.quarantine_after",
    )
    assert changes.added == ("discover[s3://lake/hot].policy.codec",)
    assert changes.removed == ()
    assert changes.tables_added == ("s3://lake/hot/items",)
    assert changes.tables_removed == ("s3://lake/hot/orders",)
    assert changes.discover_added == changes.discover_removed == ()
    dropped = settings_changes(parse(new_text), parse(LAYERED))
    assert dropped.removed == ("discover[s3://lake/hot].policy.codec",)
