"""The compaction engine: plan bins of small files, rewrite each into one Parquet file, commit
with composition tags (one run: :mod:`rlcd.compaction.compact`), and clean up what rlcd left."""
