"""``python -m rlcd`` runs the command line."""

from rlcd.cli.main import run

run()
