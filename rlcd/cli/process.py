"""Process-wide settings of the ``rlcd`` command, made once at start, before pyarrow loads.

- Arrow's C++ default memory pool becomes jemalloc (``ARROW_DEFAULT_MEMORY_POOL``, unless the
  environment already names one). pyarrow's Parquet reader and writer keep their page and IO
  buffers in that pool, which ``pyarrow.set_memory_pool`` does not change; with one allocator
  for those buffers and for the arrays (see ``rlcd.compaction.source.memory_pool``), memory
  one frees the other reuses: on the bench table ~35 MiB less peak RSS at the same CPU.
- Transparent huge pages are turned off for the process (Linux). An allocator that asks for
  huge pages keeps each 2 MiB page it touches resident: on the bench table that held
  35-50 MiB of RSS for at most 8 MiB in use, at no measurable time cost.
- numpy's OpenBLAS gets one thread (``OPENBLAS_NUM_THREADS``, unless the environment sets it).
  rlcd makes no BLAS call, and OpenBLAS starts a thread per core when numpy loads (pyarrow
  loads numpy), which spin while it initialises: ~0.1 s of CPU per process for nothing.
- pyarrow's remote filesystems (S3, GCS, Azure, HDFS) are not loaded. ``pyarrow.parquet``
  imports ``pyarrow.fs``, which loads all four (``libarrow_s3`` with the AWS SDK among them),
  while rlcd reads S3 through its own client and local files through pyarrow's native files:
  5 MiB of RSS per process for nothing. ``pyarrow.fs`` itself still works; asking it for one of
  them raises pyarrow's own ImportError.

A library user who imports ``rlcd.compaction`` directly keeps their own process settings.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

__all__ = ("configure_process", "ARROW_POOL_VARIABLE", "BLAS_THREADS_VARIABLE")

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
BLAS_THREADS_VARIABLE = "OPENBLAS_NUM_THREADS"
_PR_SET_THP_DISABLE = 41
_REMOTE_FILESYSTEMS = ("_s3fs", "_gcsfs", "_azurefs", "_hdfs")  # pyarrow's, as pyarrow.fs imports


def configure_process() -> None:
    """Make the settings above. Harmless when repeated; the pool and thread choices only take
    effect when pyarrow and numpy are not loaded yet."""
    os.environ.setdefault(ARROW_POOL_VARIABLE, "jemalloc")
    os.environ.setdefault(BLAS_THREADS_VARIABLE, "1")
    for name in _REMOTE_FILESYSTEMS:  # None in sys.modules: the import raises ImportError
        sys.modules.setdefault(f"pyarrow.{name}", None)  # type: ignore[arg-type]
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
