"""Imported at start-up by the CLI subprocesses of the e2e race tests, which alone put this
folder on PYTHONPATH: holds the first commit put or the copy path's copied ranges
(:mod:`tests.e2e.commit_hold`), or a daemon's first vacuum delete (:mod:`tests.e2e.delete_hold`)."""

import os

if os.environ.get("RLCD_TEST_HOLD"):
    from tests.e2e.commit_hold import install

    install(os.environ["RLCD_TEST_HOLD"], os.environ.get("RLCD_TEST_HOLD_AT", "commit"))

if os.environ.get("RLCD_TEST_HOLD_DELETE"):
    from tests.e2e.delete_hold import install as install_delete_hold

    install_delete_hold(os.environ["RLCD_TEST_HOLD_DELETE"])
