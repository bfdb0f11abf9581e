"""Table operations other than compaction, one public module each: ``delete`` (rows by
predicate or position, as deletion vectors), ``enable_dv`` and ``verify``."""
