"""Schemathesis against a live ``alexandria serve``: every check, every operation of
``/api/openapi.json``, many cases (the target: at least 100,000).

    .venv/bin/python -m bench.fuzz [--max-examples 2800] [--processes 2] [--seed 21]
                                   [--log-dir DIR]

A fresh embedded library in a temporary directory is served on 127.0.0.1 (Granian, as
``alexandria serve`` runs it); ``--processes`` ``st run`` processes test it at once, each with
its own seed (``seed``, ``seed + 1``, …) and ``--workers 1``, with ``schemathesis.toml`` at the
repository root (the configuration ``tests/api/test_fuzz.py`` runs in ``make test``) and every
check. The first process runs every phase; the coverage and examples phases are deterministic (the
same cases whatever the seed), so the others run only the fuzzing phase.

Where the time goes: the server answers a case in about a millisecond; generating it costs
Schemathesis and Hypothesis 15-20 ms of CPU, and with Hypothesis's example database on (the
default) more than as much again, keeping its Pareto front of interesting cases
(``ParetoFront.add`` is more than half of a profile).  A fuzzing run looks for failures, not for the
database's replays of earlier ones, so it runs with ``--generation-database none``, and in
parallel processes rather than threads (one process is bound by the GIL).

Each process writes its log and its NDJSON event stream to ``--log-dir``; the summary counts
every case from them: per operation, per status code, the checks that failed, the generation
and response times, the server's tracebacks.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.serving import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Tally:
    """What the NDJSON streams say about every case."""

    cases: collections.Counter[str] = field(default_factory=collections.Counter)
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    failed_checks: collections.Counter[str] = field(default_factory=collections.Counter)
    generation_s: float = 0.0
    response_s: float = 0.0
    errors: int = 0

    def add(self, path: Path) -> None:
        with path.open() as f:
            for line in f:
                event = json.loads(line)
                finished = event.get("ScenarioFinished")
                if finished is None:
                    continue
                recorder = finished["recorder"]
                label = recorder["label"]
                for case in recorder.get("cases", {}).values():
                    self.cases[label] += 1
                    generation = case["value"].get("meta", {}).get("generation") or {}
                    self.generation_s += generation.get("time", 0.0)
                for interaction in recorder.get("interactions", {}).values():
                    response = interaction.get("response")
                    if response is None:
                        self.errors += 1
                        continue
                    self.statuses[response["status_code"]] += 1
                    self.response_s += response.get("elapsed", 0.0)
                for checks in recorder.get("checks", {}).values():
                    for check in checks:
                        if check["status"] != "success":
                            self.failed_checks[check["name"]] += 1


def _st_command(url: str, index: int, seed: int, max_examples: int, log_dir: Path
                ) -> list[str]:
    phases = "examples,coverage,fuzzing" if index == 0 else "fuzzing"
    return [str(Path(sys.executable).with_name("st")), "--config-file",
            str(ROOT / "schemathesis.toml"), "run", url, "--checks", "all",
            "--max-examples", str(max_examples), "--seed", str(seed + index), "--workers", "1",
            "--phases", phases, "--generation-database", "none",
            "--suppress-health-check", "all", "--no-color",
            "--report", "ndjson", "--report-ndjson-path", str(log_dir / f"st-{index}.ndjson")]


def run(max_examples: int, seed: int, processes: int, log_dir: Path) -> int:
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        server_log = (log_dir / "server.stderr").open("wb")
        server = subprocess.Popen(
            [sys.executable, "-m", "alexandria.cli", "serve", "--port", str(port)], cwd=d,
            stdout=subprocess.DEVNULL, stderr=server_log, start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}/api/openapi.json"
        try:
            wait_ready(port, 60)
            t0 = time.monotonic()
            runs = []
            for i in range(processes):
                command = _st_command(url, i, seed, max_examples, log_dir)
                (log_dir / f"st-{i}.command").write_text(" ".join(command) + "\n")
                out = (log_dir / f"st-{i}.log").open("wb")
                # the NDJSON batch route's bodies (tests/support/schemathesis_hooks.py)
                env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks",
                       "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
                runs.append((subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                              cwd=log_dir, env=env), out))
            codes = [p.wait() for p, _out in runs]
            took = time.monotonic() - t0
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            server_log.close()
    tally = Tally()
    for i in range(processes):
        tally.add(log_dir / f"st-{i}.ndjson")
        text = (log_dir / f"st-{i}.log").read_text(errors="replace")
        summary = text[text.find("SUMMARY"):] if "SUMMARY" in text else text[-3000:]
        print(f"--- st process {i} (seed {seed + i}), exit {codes[i]}\n{summary.strip()}")
    total = sum(tally.cases.values())
    print(f"\n{total} cases in {took:.0f} s ({total / max(took, 1e-9):.1f} cases/s) by"
          f" {processes} processes; load average {os.getloadavg()[0]:.1f}")
    print("cases per operation:")
    for label, n in sorted(tally.cases.items()):
        print(f"  {n:7d}  {label}")
    print("responses by status: " + ", ".join(
        f"{status}: {n}" for status, n in sorted(tally.statuses.items())))
    server_errors = sum(n for status, n in tally.statuses.items() if status >= 500)
    print(f"5xx responses: {server_errors}; requests without a response: {tally.errors}")
    print("failed checks: " + (", ".join(f"{k} {n}" for k, n in tally.failed_checks.items())
                               or "none"))
    print(f"generation {tally.generation_s:.0f} s, responses {tally.response_s:.0f} s"
          " (summed over cases)")
    tracebacks = (log_dir / "server.stderr").read_text(errors="replace").count("Traceback")
    print(f"server tracebacks on stderr: {tracebacks}; logs in {log_dir}")
    return 0 if all(c == 0 for c in codes) and not server_errors and not tracebacks else 1


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--max-examples", type=int, default=2800,
                    help="fuzzing cases per operation and process (26 operations, 2 processes:"
                         " 2800 gives ~100,000)")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--processes", type=int, default=2,
                    help="st run processes at once, one seed each")
    ap.add_argument("--log-dir", type=Path, default=None,
                    help="where each process's log and NDJSON events go (default: a new"
                         " temporary directory)")
    args = ap.parse_args()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="alexandria-fuzz-"))
    return run(args.max_examples, args.seed, args.processes, log_dir)


if __name__ == "__main__":
    sys.exit(main())
