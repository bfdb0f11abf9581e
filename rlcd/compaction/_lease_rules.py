"""The advisory table lease as values and one decision. Pure: the lease object's bytes (or their
absence), the holder's id and ``now_ms`` in, what to do out; :mod:`rlcd.compaction.lease` reads
and writes the object.

Theory of operation. Two runs of rlcd on one table (a cron ``rlcd compact`` beside the daemon,
two daemons without shard settings) would both rewrite the same files; the log lets only one
commit them, so the other's work is wasted, never wrong. To skip that waste, a run first takes
the table's lease, a small JSON object at :data:`LEASE_KEY` (Delta readers and VACUUM skip
folders starting with ``_``):

- **absent**: create it (put-if-absent; of racing runs one wins, the others read again);
- **ours**: renew it (put-if-match on the ETag just read), every third of the TTL;
- **another's, expired** (``expires_ms <= now_ms``): take it over, the same compare-and-swap,
  so of two runs taking over one expired lease one wins;
- **another's, left by an ended process of this host** (its ``host`` is ours and its ``pid``
  runs no more, as the caller's ``alive`` says): taken over at once, as if expired, so a run
  after a ``kill -9`` does not wait out the TTL. A host name shared by separate PID namespaces
  (containers on the host network) can mistake a live holder for an ended one: the cost is
  duplicate work, as with clocks;
- **another's, live**, or **unreadable** (not a lease this version of rlcd understands): skip
  the table; an unreadable lease is never overwritten (a newer rlcd may have written it), so it
  needs a person: the skip says so.

The expiry is the writer's wall clock, so clocks that disagree by more than the TTL shorten or
lengthen a lease: the cost is duplicate work or a skipped poll, never data, because every
commit still goes through the log's put-if-absent. Each write carries the holder's unique id
and a sequence number, so two writes never hold the same bytes (the stores' conditional writes
are idempotent on identical bytes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

__all__ = (
    "LEASE_KEY",
    "Lease",
    "Create",
    "Renew",
    "TakeOver",
    "Busy",
    "Step",
    "decide",
)
__pure__ = True

LEASE_KEY: Final = "_rlcd/lease"
"""Where a table's lease lives, relative to the table root."""

_FORMAT: Final = 1


@dataclass(frozen=True, slots=True)
class Lease:
    """One write of a lease: who holds it (``holder``, a unique id per run; ``owner``, words
    for people) and until when. Invariants: ``acquired_ms <= expires_ms``, ``seq >= 0``."""

    holder: str
    owner: str
    acquired_ms: int
    expires_ms: int
    seq: int = 0
    host: str = ""
    pid: int = 0

    def __post_init__(self) -> None:
        if not self.holder or self.acquired_ms > self.expires_ms or min(self.seq, self.pid) < 0:
            raise ValueError(f"not a lease: {self}")

    @classmethod
    def new(
        cls, holder: str, owner: str, *, now_ms: int, ttl_ms: int, host: str = "", pid: int = 0
    ) -> Lease:
        """A lease taken at ``now_ms`` for ``ttl_ms`` by process ``pid`` of ``host``."""
        return cls(holder, owner, now_ms, now_ms + ttl_ms, host=host, pid=pid)

    def renewed(self, *, now_ms: int, ttl_ms: int) -> Lease:
        """This lease extended to ``now_ms + ttl_ms`` (never shortened)."""
        expires = max(self.expires_ms, now_ms + ttl_ms)
        return Lease(
            self.holder, self.owner, self.acquired_ms, expires, self.seq + 1, self.host, self.pid
        )

    def encode(self) -> bytes:
        return json.dumps(
            {
                "format": _FORMAT,
                "holder": self.holder,
                "owner": self.owner,
                "acquiredMs": self.acquired_ms,
                "expiresMs": self.expires_ms,
                "seq": self.seq,
                "host": self.host,
                "pid": self.pid,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def parse(cls, data: bytes) -> Lease:
        """The lease ``data`` holds.

        Raises:
            ValueError: ``data`` is not a lease of this format.
        """
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from exc
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
            raise ValueError(f"not a lease of format {_FORMAT}")
        holder, owner = raw.get("holder"), raw.get("owner")
        if not isinstance(holder, str) or not isinstance(owner, str):
            raise ValueError("a lease needs a holder and an owner")
        acquired, expires, seq = (_integer(raw, k) for k in ("acquiredMs", "expiresMs", "seq"))
        host, pid = raw.get("host", ""), raw.get("pid", 0)
        if not isinstance(host, str) or type(pid) is not int:
            raise ValueError("a lease's host is a string and its pid an integer")
        return cls(holder, owner, acquired, expires, seq, host, pid)

    def describe(self) -> str:
        """Who holds it and until when, for people."""
        until = datetime.fromtimestamp(self.expires_ms / 1000, UTC).isoformat(timespec="seconds")
        return f"held by {self.owner} until {until.replace('+00:00', 'Z')}"


def _integer(raw: dict[str, object], key: str) -> int:
    value = raw.get(key)
    if type(value) is not int:  # bool is an int, and no count
        raise ValueError(f"a lease's {key} must be an integer")
    return value


@dataclass(frozen=True, slots=True)
class Create:
    """No lease: create one (put-if-absent)."""


@dataclass(frozen=True, slots=True)
class Renew:
    """The lease read is ours: extend it (put-if-match)."""

    lease: Lease


@dataclass(frozen=True, slots=True)
class TakeOver:
    """Another run's lease expired: replace it with ours (put-if-match)."""

    expired: Lease


@dataclass(frozen=True, slots=True)
class Busy:
    """Another run holds a live lease (``lease``), or the lease cannot be taken (``lease``
    None, ``problem`` says why and what to do): leave the table alone."""

    lease: Lease | None
    problem: str = ""

    def describe(self) -> str:
        """What keeps the table, for people: it completes "the table's lease is …"."""
        return self.lease.describe() if self.lease is not None else self.problem


Step = Create | Renew | TakeOver | Busy


def _never_ended(_pid: int) -> bool:
    return True


def decide(
    found: bytes | None,
    *,
    holder: str,
    now_ms: int,
    host: str = "",
    alive: Callable[[int], bool] = _never_ended,
) -> Step:
    """What the run ``holder`` on ``host`` does about the lease object's bytes ``found``
    (None: absent); ``alive`` says whether a process of this host still runs."""
    if found is None:
        return Create()
    try:
        lease = Lease.parse(found)
    except ValueError as exc:
        return Busy(
            None, f"unreadable ({exc}); delete {LEASE_KEY} if no run of rlcd works on the table"
        )
    if lease.holder == holder:
        return Renew(lease)
    ended = bool(host) and lease.host == host and lease.pid > 0 and not alive(lease.pid)
    if lease.expires_ms <= now_ms or ended:
        return TakeOver(lease)
    return Busy(lease)
