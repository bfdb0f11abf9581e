"""The conflict rules and maths between a compaction and concurrent DML: classify (the
conflict matrix as data), remap (DV rank maths), tags, the batch counter, positions, and a bin
carried over the winners (:mod:`~rlcd.reconcile.bin_actions`)."""
