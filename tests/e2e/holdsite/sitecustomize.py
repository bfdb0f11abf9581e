"""Imported at start-up by the CLI subprocesses of the e2e race tests, which alone put this
folder on PYTHONPATH: holds the first commit put (:mod:`tests.e2e.commit_hold`)."""

import os

if os.environ.get("RLCD_TEST_HOLD"):
    from tests.e2e.commit_hold import install

    install(os.environ["RLCD_TEST_HOLD"])
