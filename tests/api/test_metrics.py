"""``/healthz`` and ``/metrics`` through the real app: the counters move with admissions."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from alexandria.service.bootstrap import Founding
from alexandria.service.writer_service import WriterClient
from tests.support.admission import claim, space
from tests.support.library import Api
from tests.support.liveserver import NewDb, serving, write_library_files


async def scrape(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = await api.client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def settled_scrape(api: Api, log_size: float
                         ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A scrape whose gauges read a log of ``log_size``: they come from the library's latest
    reading of the database, which waits at most ``FRESH_WAIT_S`` for a new one (a reading
    begun before the request may also answer it), so under load a scrape can show the one
    before."""
    for _ in range(100):
        samples = await scrape(api)
        if value(samples, "alexandria_log_size") == log_size:
            return samples
        await asyncio.sleep(0.05)
    return samples


async def test_metrics_move_with_admissions(api: Api) -> None:
    before = await settled_scrape(api, 2)
    assert all(name.startswith("alexandria_") or name.startswith(("python_", "process_"))
               for name, _labels in before)
    size_before = value(before, "alexandria_log_size")
    assert size_before == 2  # the two authority certificates

    root = (await api.publish("owner", space()))["id"]
    envelope = api.envelope("owner", claim(root))
    assert (await api.post(envelope)).status_code == 201
    assert (await api.post(envelope)).status_code == 200  # an exact retry
    assert (await api.post(api.envelope("owner", claim(root)), dry_run="true")).status_code == 200
    bad = api.envelope("owner", claim(root))
    bad["signature"] = "00" * 64
    assert (await api.post(bad)).status_code in (400, 403)
    assert (await api.client.get("/api/log/checkpoint")).status_code == 200

    after = await settled_scrape(api, size_before + 2)

    def moved(outcome: str) -> float:
        return (value(after, "alexandria_admissions_total", outcome=outcome)
                - value(before, "alexandria_admissions_total", outcome=outcome))

    assert moved("created") == 2
    assert moved("retry") == 1
    assert moved("dry_run") == 1
    refusals = [k for k in after if k[0] == "alexandria_admissions_total"
                and dict(k[1])["outcome"] not in ("created", "retry", "dry_run")]
    assert sum(value(after, n, **dict(lb)) - value(before, n, **dict(lb))
               for n, lb in refusals) == 1
    assert value(after, "alexandria_log_size") == size_before + 2
    assert value(after, "alexandria_checkpoint_size") == size_before + 2
    assert 0 <= value(after, "alexandria_checkpoint_age_seconds") < 60
    assert value(after, "alexandria_writer_queue_depth") == 0
    assert value(after, "alexandria_ready") == 1
    # the writer's items: the space, the claim, its retry, the dry run (the bad signature
    # never reached it) and the checkpoint, in one transaction each or fewer
    def grew(name: str) -> float:
        return value(after, name, process="http") - value(before, name, process="http")

    assert 1 <= grew("alexandria_writer_transactions_total") <= 5
    assert grew("alexandria_writer_items_total") == 5
    assert grew("alexandria_writer_busy_seconds_total") >= grew(
        "alexandria_writer_cpu_seconds_total") > 0
    # latency per route template, never per raw path
    count = "alexandria_request_duration_seconds_count"
    posts = (value(after, count, route="/api/entries", method="POST")
             - value(before, count, route="/api/entries", method="POST"))
    assert posts == 5
    rev = await api.client.get(f"/api/entries/{root}")
    assert rev.status_code == 200
    again = await scrape(api)
    assert value(again, count, route="/api/entries/{revision}", method="GET") >= 1
    assert not any(root in dict(k[1]).get("route", "") for k in again)
    # a stranger's paths and methods never make new labels
    await api.client.request("BREW", f"/no/such/{root}")
    await api.client.get(f"/no/such/{root[:10]}")
    labels = {dict(k[1]).get("route") for k in await scrape(api)} | {
        dict(k[1]).get("method") for k in await scrape(api)}
    assert not any(label and root[:10] in label for label in labels)
    assert "BREW" not in labels and "OTHER" in labels and "unmatched" in labels


async def test_healthz_ready(api: Api) -> None:
    r = await api.client.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["live"] is True and body["ready"] is True and body["reasons"] == []
    assert body["log_size"] == 2
    assert re.fullmatch(r"\d+", str(body["checkpoint_size"]))
    r = await api.client.get("/healthz?x=1")
    assert r.status_code == 400


async def test_healthz_not_ready_once_the_writer_process_is_gone(
    api: Api, tmp_path: Path
) -> None:
    """A multi-process server whose writer process died: live, not ready, admissions 503."""
    writer = WriterClient(tmp_path / "no-writer.sock")
    await writer.close()  # what a lost connection to the writer process leaves behind
    api.library.writer = writer
    r = await api.client.get("/healthz")
    assert r.status_code == 503
    body = r.json()
    assert body["live"] is True and body["ready"] is False
    assert any("writer process is gone" in reason for reason in body["reasons"])
    r = await api.post(api.envelope("owner", space()))
    assert r.status_code == 503 and r.json()["code"] == "WRITER_UNAVAILABLE"
    samples = await scrape(api)
    assert value(samples, "alexandria_ready") == 0
    assert value(samples, "alexandria_admissions_total", outcome="WRITER_UNAVAILABLE") >= 1


@pytest.mark.slow
@pytest.mark.parametrize("front_end", ["granian", "uvicorn"])
def test_metrics_of_every_worker_process(tmp_path: Path, founding: Founding,
                                         front_end: str, new_db: NewDb) -> None:
    """``serve --workers 2``: whichever worker answers the scrape counts every worker's
    admissions and requests (prometheus-client's multiprocess mode)."""
    genesis, log_key = write_library_files(founding, tmp_path)
    with serving(genesis, new_db(tmp_path / "lib.db"), log_key, workers=2,
                 extra=("--front-end", front_end)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        for doc in founding.authority_documents():
            assert client.post("/api/authority", json=doc).status_code == 201
        owner = founding.participants["owner"]
        root = ""
        for i in range(12):
            content = space(f"Space {i}") if i == 0 else claim(root, title=f"Claim {i}")
            env = owner.envelope(founding.genesis, content, f"2026-06-01T00:00:{i:02d}.000Z")
            r = client.post("/api/entries", content=orjson.dumps(env))
            assert r.status_code == 201, r.text
            root = root or r.json()["id"]
        for _ in range(4):  # several scrapes, likely answered by both workers
            # the library-wide gauges are the answering worker's last reading of the database
            # when a fresh one takes longer than FRESH_WAIT_S (a loaded machine): at most a
            # probe period old, so a stale 0 or 2 gives way to 14 within seconds
            deadline = time.monotonic() + 10
            while True:
                r = client.get("/metrics")
                assert r.status_code == 200
                samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                           for f in text_string_to_metric_families(r.text) for s in f.samples}
                if value(samples, "alexandria_log_size") == 14 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert value(samples, "alexandria_admissions_total", outcome="created") == 12
            assert value(samples, "alexandria_request_duration_seconds_count",
                         route="/api/entries", method="POST") == 12
            assert value(samples, "alexandria_log_size") == 14
            assert value(samples, "alexandria_writer_queue_depth") == 0
            # the writer process's transactions: the authority documents and the twelve
            assert value(samples, "alexandria_writer_items_total", process="writer") == 14
            assert value(samples, "alexandria_writer_busy_seconds_total", process="writer") > 0
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json()["ready"] is True
