"""Imported at start-up by the CLI subprocesses of the e2e race tests, which alone put this
folder on PYTHONPATH: holds the first commit put (:mod:`tests.e2e.commit_hold`), or a
daemon's first vacuum delete (:mod:`tests.e2e.delete_hold`)."""

import os

if os.environ.get("RLCD_TEST_HOLD"):
    from tests.e2e.commit_hold import install

    install(os.environ["RLCD_TEST_HOLD"])

if os.environ.get("RLCD_TEST_HOLD_DELETE"):
    from tests.e2e.delete_hold import install as install_delete_hold

    install_delete_hold(os.environ["RLCD_TEST_HOLD_DELETE"])
