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

- Temporary files (a spilled source, a bin's encoded rows, a checkpoint being written) go to a
  folder of the process's own, ``rlcd-<pid>-<random>`` in the system's temp directory
  (``TMPDIR``), removed when the command ends (:func:`scratch_dir`). A ``kill -9`` leaves that
  folder behind: the next rlcd command removes the folders of rlcd processes that no longer
  run (same user; a pid that runs again, reused by another program, keeps its folder).

What each costs or saves is measured in docs/performance.md. The daemon (``rlcd run``) starts
through the same entry point. Library code makes none of these settings: a program that
imports ``rlcd.compaction`` directly keeps its own, and the compaction allocates in whatever
pool is pyarrow's default there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ("configure_process", "scratch_dir", "ARROW_POOL_VARIABLE")

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
_PR_SET_THP_DISABLE = 41
_REMOTE_FILESYSTEMS = ("_s3fs", "_gcsfs", "_azurefs", "_hdfs")  # pyarrow's, as pyarrow.fs imports
_UNUSED = ("numpy", *(f"pyarrow.{name}" for name in _REMOTE_FILESYSTEMS))
_SCRATCH = re.compile(r"rlcd-(\d+)-[^/]+")
"""A scratch folder's name: the pid of the process that made it, then mkdtemp's letters."""


def configure_process() -> None:
    """Make the settings above. Harmless when repeated; they only take effect when pyarrow is
    not loaded yet."""
    os.environ.setdefault(ARROW_POOL_VARIABLE, "jemalloc")
    for name in _UNUSED:  # None in sys.modules: the import raises ImportError
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """The process's temporary files in a folder of its own while the block runs (Python's
    ``tempfile`` defaults to it), after removing the folders rlcd processes that ended left
    behind; the folder is removed when the block ends."""
    base = Path(tempfile.gettempdir())
    for stale in _abandoned(base):
        shutil.rmtree(stale, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"rlcd-{os.getpid()}-", dir=base))
    tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = None
        shutil.rmtree(path, ignore_errors=True)


def _abandoned(base: Path) -> list[Path]:
    """The scratch folders in ``base`` of this user whose process no longer runs."""
    found = []
    with contextlib.suppress(OSError), os.scandir(base) as entries:
        for entry in entries:
            match = _SCRATCH.fullmatch(entry.name)
            with contextlib.suppress(OSError):
                if (
                    match is not None
                    and entry.is_dir(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_uid == os.getuid()
                    and not _running(int(match.group(1)))
                ):
                    found.append(Path(entry.path))
    return found


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists (anyone's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True
