"""Parquet, knowing nothing of Delta: the footer codec, splicing row groups, batching, Arrow
kernels, per-column encodings and the split writer."""
