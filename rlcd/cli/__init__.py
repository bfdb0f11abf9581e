"""The ``rlcd`` command. Importing this package first makes the process-wide settings rlcd runs
best with, before pyarrow loads (see :mod:`rlcd.cli.process`)."""

from rlcd.cli.process import configure_process

configure_process()
