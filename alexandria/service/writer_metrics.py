"""What the group-commit writers of a server did, for ``GET /metrics``: counters updated on
each writer thread after each of its write transactions, before its answers are handed over,
so an answered write is already counted (``Storage.observe_writer``).

- ``alexandria_writer_transactions_total``: write transactions run (a batch run again after a
  failure counts once);
- ``alexandria_writer_items_total``: the items of their jobs (an admission, a batch line,
  any other write);
- ``alexandria_writer_busy_seconds_total``: wall time from taking a transaction's jobs to its
  commit;
- ``alexandria_writer_cpu_seconds_total``: the writer threads' CPU time in those.

Every process of a server has a writer, labelled ``process``: ``writer`` for the writer
process of ``serve --workers N`` (it admits; the HTTP processes' own writers then only sign
checkpoints and enrol), ``http`` for the writers of the HTTP processes (a one-process server
admits there); like every counter (``api/metrics.py``) each is summed over the server's
processes.  Read together, for the process that admits: ``rate(busy)`` near 1 is a writer that
never waits for work, the bound of the admission rate; ``busy − cpu`` is what it waited for
(the disk's sync, PostgreSQL's round trips and execution, another process's write lock, the
GIL); ``items / transactions`` is how many admissions one commit carries."""

from __future__ import annotations

from typing import Literal

from prometheus_client import Counter

from alexandria.store.interface import Storage, Transaction

TRANSACTIONS = Counter(
    "alexandria_writer_transactions", "write transactions the group-commit writers ran",
    ["process"],
)
ITEMS = Counter(
    "alexandria_writer_items", "admissions, batch lines and other writes in those transactions",
    ["process"],
)
BUSY = Counter(
    "alexandria_writer_busy_seconds", "wall time the writers spent from taking a transaction's"
    " jobs to its commit", ["process"],
)
CPU = Counter(
    "alexandria_writer_cpu_seconds", "CPU time of the writer threads in those transactions",
    ["process"],
)


def watch(storage: Storage, process: Literal["writer", "http"]) -> None:
    """Count every write transaction of ``storage``'s writer, under ``process``."""
    transactions, items = TRANSACTIONS.labels(process), ITEMS.labels(process)
    busy, cpu = BUSY.labels(process), CPU.labels(process)

    def count(transaction: Transaction) -> None:
        transactions.inc()
        items.inc(transaction.items)
        busy.inc(transaction.wall_s)
        cpu.inc(transaction.cpu_s)

    storage.observe_writer(count)
