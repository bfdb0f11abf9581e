"""The object-store contract suite, run over every backend."""
