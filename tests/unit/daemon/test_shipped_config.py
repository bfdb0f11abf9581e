"""The shipped ``config/rlcd.toml``: it loads as is, and documents every key of the schema,
each with its real default."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from rlcd.daemon.config import DiscoverEntry, load_settings, parse_settings, schema_keys
from rlcd.storage.uri import TableUri

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "config" / "rlcd.toml"
# A documented key or an example header is a comment of exactly "# key = value" or "# [..]";
# prose comments start with "##".
DOCUMENTED = re.compile(r"^# (?=\[|[a-z_]+ = )", re.MULTILINE)


def uncommented() -> str:
    return DOCUMENTED.sub("", SHIPPED.read_text())


def key_paths(value: object, path: str = "") -> set[str]:
    if isinstance(value, dict):
        return {k for name, v in value.items() for k in key_paths(v, f"{path}.{name}")}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return {k for v in value for k in key_paths(v, f"{path}[]")}
    return {path.lstrip(".")}


def test_the_shipped_file_loads_as_is_and_points_at_the_demo() -> None:
    """``rlcd run --config config/rlcd.toml`` runs unchanged: it discovers the demo's tables."""
    settings = load_settings(SHIPPED)
    (demo,) = settings.discover
    assert demo.prefix == TableUri("file", "", str(ROOT / "demo"))
    assert settings.tables == ()


def test_every_documented_key_is_in_the_schema_and_every_key_is_documented() -> None:
    """The commented keys, uncommented, are a valid file covering the whole schema."""
    text = uncommented()
    parse_settings(text, source=str(SHIPPED), base_dir=str(SHIPPED.parent))
    documented = key_paths(tomllib.loads(text))
    # An entry's policy overrides are the [policy] keys, documented once there.
    entry_policies = {k for k in schema_keys() if re.match(r"(table|discover)\[\]\.policy\.", k)}
    assert documented - schema_keys() == set()
    assert schema_keys() - entry_policies - documented == set()
    assert {k for k in documented if k.startswith("table[].policy.")}  # the example shows one


def test_the_documented_values_are_the_defaults() -> None:
    """Each section's commented value is exactly what rlcd uses when the key is left out."""
    text = uncommented()
    sections = parse_settings(text.split("\n[[table]]")[0], source="shipped", base_dir="/")
    assert sections == parse_settings("", source="shipped", base_dir="/")
    (found,) = parse_settings(text, source="shipped", base_dir="/").discover
    defaults = DiscoverEntry(prefix=found.prefix)
    assert (found.include, found.exclude, found.max_depth, found.interval_s) == (
        defaults.include,
        defaults.exclude,
        defaults.max_depth,
        defaults.interval_s,
    )
