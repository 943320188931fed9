"""What a participant waits for: the ``alexandria`` command's start-up, one ``publish``, and a
batch ``publish --jsonl``, against a real library on 127.0.0.1.

    .venv/bin/python -m bench.cli [--runs 20] [--batch 10000] [--dir DIR]

The library is made through the CLI (``genesis init``, ``serve`` in a child process,
``authority issue``, one participant with ``worker init``/``enroll``/``approve``/``import``).
Then, each ``--runs`` times, wall time (fork to exit, as a shell sees it) of
``python3 -c pass`` (the floor: the same interpreter, nothing imported), ``alexandria --version``
and ``alexandria publish FILE`` (a new reply each time: sign, write pending/, send, admitted,
published/), reported as median and p90; then ``alexandria publish --jsonl FILE`` of ``--batch``
replies over one connection, reported per second.  Afterwards every envelope must have its
signed record in ``published/`` and none may be left in ``pending/``.

Targets (issue 18): one publish <= 80 ms, batch >= 300/s.  The machine is shared: figures are
noisy; the median of many runs is the figure to read.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
ALEXANDRIA = str(BIN / "alexandria")


def run(args: list[str], env: dict[str, str], stdin: bytes | None = None) -> str:
    r = subprocess.run(args, env=env, input=stdin, capture_output=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.decode()}")
    return r.stdout.decode()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """User + system seconds of a running process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one command: on a loaded machine the CPU
    time is the steadier figure."""
    cpu, started = _children_cpu(), time.perf_counter()
    run(args, env)
    return (time.perf_counter() - started) * 1000, (_children_cpu() - cpu) * 1000


def summary(label: str, samples: list[tuple[float, float]]) -> str:
    wall = sorted(w for w, _c in samples)
    p90 = wall[min(len(wall) - 1, int(len(wall) * 0.9))]
    cpu = statistics.median(c for _w, c in samples)
    return (f"{label:<26} wall median {statistics.median(wall):6.1f} ms, p90 {p90:6.1f} ms;"
            f" CPU median {cpu:5.1f} ms")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="alexandria-bench-cli-"))
    # as a user runs it: bytecode cached (a session may have turned that off)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ALEXANDRIA_") and k != "PYTHONDONTWRITEBYTECODE"}
    op = base / "operator"
    pin = run([ALEXANDRIA, "genesis", "init", "--dir", str(op), "--library", "bench",
               "--origin", "127.0.0.1/bench/log"], env).strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [ALEXANDRIA, "serve", "--genesis", str(op / "genesis.json"), "--db",
         str(base / "library.db"), "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/api/genesis").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.1)
        run([ALEXANDRIA, "authority", "issue", "--dir", str(op), "--library", url], env)
        home_env = {**env, "ALEXANDRIA_HOME": str(base / "home")}
        key = run([ALEXANDRIA, "worker", "init", "--library", url, "--genesis", pin],
                  home_env).strip()
        run([ALEXANDRIA, "authority", "enroll", "bench", "--dir", str(op)], env)
        cert = run([ALEXANDRIA, "authority", "approve", "--dir", str(op), "--actor", "bench",
                    "--worker", key, "--scopes", "all"], env)
        run([ALEXANDRIA, "worker", "import", "-"], home_env, cert.encode())
        space = {"kind": "space", "title": "Bench", "body": {"summary": "replies"}}
        (base / "space.json").write_text(json.dumps(space))
        run([ALEXANDRIA, "publish", str(base / "space.json"), "--name", "space"], home_env)
        disc = {"kind": "discussion", "title": "Bench thread", "body": {"text": "t"},
                "links": [{"relation": "contained_in", "target": "$space"}]}
        (base / "disc.json").write_text(json.dumps(disc))
        run([ALEXANDRIA, "publish", str(base / "disc.json"), "--name", "thread"], home_env)

        run([ALEXANDRIA, "publish", "--help"], env)  # warm: compile and cache the bytecode
        floor = [timed([sys.executable, "-c", "pass"], env) for _ in range(args.runs)]
        version = [timed([ALEXANDRIA, "--version"], env) for _ in range(args.runs)]
        one = []
        for i in range(args.runs):
            path = base / f"reply-{i}.json"
            path.write_text(json.dumps({
                "kind": "reply", "title": f"One {i}", "body": f"single publish {i}",
                "links": [{"relation": "replies_to", "target": "$thread"}]}))
            one.append(timed([ALEXANDRIA, "publish", str(path)], home_env))
        print(summary("python3 -c pass", floor))
        print(summary("alexandria --version", version))
        print(summary("alexandria publish FILE", one) + "   (target <= 80 ms wall)")

        batch = base / "batch.jsonl"
        with batch.open("w") as fh:
            for i in range(args.batch):
                fh.write(json.dumps({
                    "kind": "reply", "title": f"Batch {i}", "body": f"batch publish {i}",
                    "links": [{"relation": "replies_to", "target": "$thread"}]}) + "\n")
        server_cpu = _process_cpu(server.pid)
        client_cpu = _children_cpu()
        started = time.perf_counter()
        out = run([ALEXANDRIA, "publish", "--jsonl", str(batch)], home_env)
        seconds = time.perf_counter() - started
        client_cpu = _children_cpu() - client_cpu
        server_cpu = _process_cpu(server.pid) - server_cpu
        admitted = len(out.split())
        assert admitted == args.batch, (admitted, args.batch)
        print(f"{'alexandria publish --jsonl':<26} {args.batch:,} in {seconds:.1f} s:"
              f" {args.batch / seconds:,.0f}/s   (target >= 300/s)")
        print(f"{'':<26} CPU per contribution: client {client_cpu / args.batch * 1000:.2f} ms,"
              f" server {server_cpu / args.batch * 1000:.2f} ms")
        home = base / "home"
        published = len(list((home / "published").glob("*.json")))
        assert published == args.batch + args.runs + 2, published
        assert not list((home / "pending").glob("*.json")), "envelopes left pending"
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
