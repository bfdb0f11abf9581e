"""What ``--help`` says for every command: a description, and the exit codes where a command
has its own."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from rlcd.cli.main import _parser


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command and subcommand parser, with the words that name it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(_parser()))


@pytest.mark.parametrize("words", sorted(COMMANDS), ids=" ".join)
def test_every_command_has_a_description(words: tuple[str, ...]) -> None:
    """Each command's --help has a description paragraph between its usage and its options."""
    text = COMMANDS[words].format_help()
    after_usage = text.split("\n\n", 1)[1]
    assert not after_usage.startswith(("options:", "positional arguments:")), text


def test_status_help_gives_its_exit_codes() -> None:
    """``rlcd status --help`` says which exit code a table that cannot be read gives."""
    text = COMMANDS[("status",)].format_help()
    assert "Exit codes:" in text
    assert "3    a table cannot be read" in text and "4    storage failed" in text


def test_verify_help_gives_the_defaults_the_code_uses() -> None:
    """``rlcd verify --help`` states the files checked at once, with and without --deep, and
    what a file read in full holds, as the library's constants say (the help must not import
    them: ``--help`` loads no compaction stack)."""
    from rlcd.operations._verify_deep import DEEP_CHECK_CONCURRENCY, DEEP_IN_MEMORY
    from rlcd.operations._verify_files import FILE_CHECK_CONCURRENCY

    text = " ".join(COMMANDS[("verify",)].format_help().split())
    assert (
        f"(default {FILE_CHECK_CONCURRENCY}; with --deep {DEEP_CHECK_CONCURRENCY}, each "
        f"holding up to {DEEP_IN_MEMORY >> 20} MiB of a remote file)"
    ) in text
