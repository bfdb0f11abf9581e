"""The Delta protocol: actions, log segments and replay, checkpoints, schema and partitions,
predicates, deletion vectors, the protocol gate and the commit driver. Sans-IO but for
:mod:`~rlcd.delta.load`, :mod:`~rlcd.delta.write` and :mod:`~rlcd.delta.transaction`."""
