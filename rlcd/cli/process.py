"""Process-wide settings of the ``rlcd`` command, made once at start, before pyarrow loads.

- Arrow's default memory pool becomes jemalloc (``ARROW_DEFAULT_MEMORY_POOL``, unless the
  environment already names one; a pyarrow built without jemalloc keeps its own, with a
  warning). It is the pool pyarrow's Parquet reader builds arrays in, its writer converts in and
  compute functions use, and the one where the reader and writer keep their page and IO buffers
  (``pyarrow.set_memory_pool`` reaches the arrays, not those buffers). A rewrite allocates and
  frees tens of MiB per row group, in a split bin in one thread what another allocated:
  jemalloc reuses freed memory, also across threads, and returns what stays unused to the
  system in the background, so rlcd never purges it itself. With one allocator for the buffers
  and the arrays, memory one frees the other reuses.
- Transparent huge pages are turned off for the process (Linux). An allocator that asks for
  huge pages keeps each 2 MiB page it touches resident, far more than it uses.
- numpy is not loaded. rlcd does not use it, and pyarrow, which works without it, imports it
  whenever it is installed (with OpenBLAS, which starts a thread per core). An import of numpy
  in the command's process raises ImportError.
- pyarrow's remote filesystems (S3, GCS, Azure, HDFS) are not loaded. ``pyarrow.parquet``
  imports ``pyarrow.fs``, which loads all four (``libarrow_s3`` with the AWS SDK among them),
  while rlcd reads S3 through its own client and local files through pyarrow's native files.
  ``pyarrow.fs`` itself still works; asking it for one of them raises pyarrow's own ImportError.

What each costs or saves is measured in docs/performance.md. The daemon (``rlcd run``) starts
through the same entry point. Library code makes none of these settings: a program that
imports ``rlcd.compaction`` directly keeps its own, and the compaction allocates in whatever
pool is pyarrow's default there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

__all__ = ("configure_process", "ARROW_POOL_VARIABLE")

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
_PR_SET_THP_DISABLE = 41
_REMOTE_FILESYSTEMS = ("_s3fs", "_gcsfs", "_azurefs", "_hdfs")  # pyarrow's, as pyarrow.fs imports
_UNUSED = ("numpy", *(f"pyarrow.{name}" for name in _REMOTE_FILESYSTEMS))


def configure_process() -> None:
    """Make the settings above. Harmless when repeated; they only take effect when pyarrow is
    not loaded yet."""
    os.environ.setdefault(ARROW_POOL_VARIABLE, "jemalloc")
    for name in _UNUSED:  # None in sys.modules: the import raises ImportError
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
