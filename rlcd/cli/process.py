"""Process-wide settings of the ``rlcd`` command, made once at start, before pyarrow loads.

- Arrow's C++ default memory pool becomes jemalloc (``ARROW_DEFAULT_MEMORY_POOL``, unless the
  environment already names one). pyarrow's Parquet reader and writer keep their page and IO
  buffers in that pool, which ``pyarrow.set_memory_pool`` does not change; with one allocator
  for those buffers and for the arrays (see ``rlcd.compaction.source.memory_pool``), memory
  one frees the other reuses: on the bench table ~35 MiB less peak RSS at the same CPU.
- Transparent huge pages are turned off for the process (Linux). An allocator that asks for
  huge pages keeps each 2 MiB page it touches resident: on the bench table that held
  35-50 MiB of RSS for at most 8 MiB in use, at no measurable time cost.
- numpy is not loaded. rlcd does not use it, and pyarrow, which works without it, imports it
  whenever it is installed (with OpenBLAS, which starts a thread per core): on a dry run
  15 MiB of RSS and 0.07 s of CPU per process for nothing. An import of numpy in the command's
  process raises ImportError.
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
