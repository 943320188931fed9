"""psycopg 3 against asyncpg on the admission's transaction shape, one connection each.

    .venv/bin/python -m bench.pg_drivers [--admissions 20000] [--group 1 --group 32]

Each admission is what ``store/postgresql`` writes for a reply: the write lock (one ``UPDATE``
of ``ledger_writes``), the 2 KB leaf, two Merkle nodes, the revision, the object, a feed row
and a catalogue row; ``--group`` admissions share one transaction (the writer's group commit).
psycopg runs synchronously (as the storage's writer thread does), asyncpg on an event loop.
A throwaway durable cluster (fsync on) is started for the run (tests/support/pgcluster.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import asyncpg
import psycopg

from tests.support.pgcluster import cluster

DDL = """
CREATE TABLE ledger_writes(id INTEGER PRIMARY KEY, version BIGINT NOT NULL);
INSERT INTO ledger_writes VALUES (1, 0);
CREATE TABLE log(sequence BIGINT PRIMARY KEY, type TEXT, leaf BYTEA, leaf_hash BYTEA,
                 admitted_at TEXT);
CREATE TABLE merkle_nodes(position BIGINT PRIMARY KEY, hash BYTEA);
CREATE TABLE revisions(sequence BIGINT PRIMARY KEY, id TEXT UNIQUE, root TEXT, kind TEXT);
CREATE TABLE objects(created_sequence BIGINT PRIMARY KEY, root TEXT UNIQUE, head TEXT);
CREATE TABLE feed(root TEXT, sequence BIGINT, PRIMARY KEY(root, sequence));
CREATE TABLE catalogue(seq BIGINT PRIMARY KEY, kind TEXT, author_id BIGINT, score BIGINT);
"""
LEAF = b"x" * 2048


def _rows(seq: int) -> dict[str, Any]:
    rid = os.urandom(32).hex()
    return {"seq": seq, "rid": rid, "hash": os.urandom(32)}


def run_psycopg(url: str, n: int, group: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        seq = 0
        while seq < n:
            with conn.transaction():
                conn.execute("UPDATE ledger_writes SET version = version + 1 WHERE id = 1")
                for _ in range(min(group, n - seq)):
                    seq += 1
                    r = _rows(seq)
                    conn.execute("INSERT INTO log VALUES (%s, 'contribution', %s, %s, 'now')",
                                 (seq, LEAF, r["hash"]))
                    with conn.cursor() as cur:
                        cur.executemany("INSERT INTO merkle_nodes VALUES (%s, %s)",
                                        [(2 * seq, r["hash"]), (2 * seq + 1, r["hash"])])
                    conn.execute("INSERT INTO revisions VALUES (%s, %s, %s, 'reply')",
                                 (seq, r["rid"], r["rid"]))
                    conn.execute("INSERT INTO objects VALUES (%s, %s, %s)",
                                 (seq, r["rid"], r["rid"]))
                    conn.execute("INSERT INTO feed VALUES (%s, %s)", ("root", seq))
                    conn.execute("INSERT INTO catalogue VALUES (%s, 'reply', 1, 0)", (seq,))
        return n / (time.perf_counter() - start)


async def run_asyncpg(url: str, n: int, group: int) -> float:
    conn = await asyncpg.connect(url)
    try:
        start = time.perf_counter()
        seq = 0
        while seq < n:
            async with conn.transaction():
                await conn.execute("UPDATE ledger_writes SET version = version + 1 WHERE id = 1")
                for _ in range(min(group, n - seq)):
                    seq += 1
                    r = _rows(seq)
                    await conn.execute(
                        "INSERT INTO log VALUES ($1, 'contribution', $2, $3, 'now')",
                        seq, LEAF, r["hash"])
                    await conn.executemany("INSERT INTO merkle_nodes VALUES ($1, $2)",
                                           [(2 * seq, r["hash"]), (2 * seq + 1, r["hash"])])
                    await conn.execute("INSERT INTO revisions VALUES ($1, $2, $3, 'reply')",
                                       seq, r["rid"], r["rid"])
                    await conn.execute("INSERT INTO objects VALUES ($1, $2, $3)",
                                       seq, r["rid"], r["rid"])
                    await conn.execute("INSERT INTO feed VALUES ($1, $2)", "root", seq)
                    await conn.execute("INSERT INTO catalogue VALUES ($1, 'reply', 1, 0)", seq)
        return n / (time.perf_counter() - start)
    finally:
        await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--admissions", type=int, default=20_000)
    ap.add_argument("--group", type=int, action="append", help="admissions per transaction")
    args = ap.parse_args()
    with cluster(durable=True) as c:
        for group in args.group or [1, 32]:
            for name in ("psycopg", "asyncpg", "psycopg", "asyncpg"):
                url = c.database("drivers")
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(DDL.encode())
                if name == "psycopg":
                    rate = run_psycopg(url, args.admissions, group)
                else:
                    rate = asyncio.run(run_asyncpg(url.replace("?host=", "?host="),
                                                   args.admissions, group))
                print(f"{name:8} group {group:3}  {rate:8.0f} admissions/s", flush=True)


if __name__ == "__main__":
    main()
