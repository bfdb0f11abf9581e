"""Shared test fixtures: the fixture tables, the anyio backend and the moto S3 server, and the
``--seeds N`` option of the long runs of the random interleavings.

The moto server is started once per session on 127.0.0.1 (in-process ``mock_aws`` does not work
with aiobotocore); each test that asks for ``s3_bucket`` gets a fresh bucket.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# The race helpers' judges assert: show their values on failure, as in a test module.
pytest.register_assert_rewrite("tests.integration.races")

# Tests never assert on timing (the machine is shared and noisy): no per-example deadline.
settings.register_profile("rlcd", deadline=None)
settings.load_profile("rlcd")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(
    os.environ.get("RLCD_FIXTURES", ROOT.parent / "shared" / "fixtures" / "delta")
).resolve()  # readers report real paths; a symlinked shared/ must compare equal


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--seeds",
        type=int,
        metavar="N",
        help="run the random interleavings for seeds 0..N-1 on local disk and on moto "
        "(instead of CI's fixed set), and print what they did",
    )


def fixture_table(name: str) -> Path:
    """The path of a read-only fixture table; fails loudly when the fixtures are not there."""
    path = FIXTURES / name
    if not (path / "_delta_log").is_dir():
        raise FileNotFoundError(
            f"fixture table {path} not found: set RLCD_FIXTURES to shared/fixtures/delta"
        )
    return path


def fixture_names() -> list[str]:
    """Every fixture table, sorted."""
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "_delta_log").is_dir())


@pytest.fixture
def copy_fixture(tmp_path: Path):
    """Copy a fixture table into a temp dir (fixtures are never written in place)."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(fixture_table(name), dest)
        return dest

    return copy


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def _atomic_conditional_puts() -> None:
    """Make moto's conditional PutObject and DeleteObject atomic, as S3's are.

    moto checks the condition (``If-None-Match: *``, ``If-Match``) and then stores or deletes
    the object, two steps with nothing held between them, so two racing commit puts can both
    succeed, the later one overwriting the other (seen in a random interleaving under load: a
    delta-rs commit replaced one rlcd had committed), and a lease's conditional delete could
    remove the lease another run just took over. Every PutObject and DeleteObject of the
    in-process server now runs under one lock.
    """
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "atomic", False):
        return
    lock = threading.Lock()

    def locked(method: Callable[[S3Response], Any]) -> Callable[[S3Response], Any]:
        def call(self: S3Response) -> Any:
            with lock:
                return method(self)

        call.atomic = True  # type: ignore[attr-defined]
        return call

    S3Response.put_object = locked(S3Response.put_object)  # type: ignore[method-assign]
    S3Response.delete_object = locked(S3Response.delete_object)  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto S3 server running for the whole session (its conditional puts atomic)."""
    from moto.server import ThreadedMotoServer

    _atomic_conditional_puts()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    old = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)


@pytest.fixture
def s3_bucket(moto_endpoint: str) -> str:
    """A fresh, empty bucket on the moto server."""
    import boto3

    name = f"rlcd-test-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=name)
    return name
