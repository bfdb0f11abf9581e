"""The ``rlcd`` command: its entry point (:func:`rlcd.cli.main.run`) first makes the
process-wide settings rlcd runs best with, before pyarrow loads (see :mod:`rlcd.cli.process`)."""
