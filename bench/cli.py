"""What a participant waits for: the ``alexandria`` command's start-up, one ``publish``, and a
batch ``publish --jsonl``, against a real library on 127.0.0.1.

    .venv/bin/python -m bench.cli [--runs 20] [--batch 10000] [--dir DIR] [--alexandria PATH]

``--alexandria`` is the ``alexandria`` command of the install to measure (default: the one
beside this Python, i.e. this checkout's editable install); to measure what users get::

    python3 -m venv /tmp/wheel && /tmp/wheel/bin/pip install .
    .venv/bin/python -m bench.cli --alexandria /tmp/wheel/bin/alexandria

The library is made through the CLI (``genesis init``, ``serve`` in a child process,
``authority issue``, one participant with ``worker init``/``enroll``/``approve``/``import``).
Then, each ``--runs`` times, wall time (fork to exit, as a shell sees it) of
``python -c pass`` (the floor: the interpreter of the measured install, nothing imported),
``alexandria --version`` and ``alexandria publish FILE`` (a new reply each time: sign, write
pending/, send, admitted, published/), reported as p50, p95 and min of wall time (and the median CPU
time), with the install measured (editable or not) and the load average; then
``alexandria publish --jsonl FILE`` of ``--batch`` replies over one connection, reported per
second.  Afterwards every envelope must have its signed record in ``published/`` and none may
be left in ``pending/``.

Targets: one publish <= 80 ms, batch >= 300/s.  The machine is shared: figures are
noisy; the median of many runs is the figure to read.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.serving import process_cpu

ALEXANDRIA = str(Path(sys.executable).parent / "alexandria")


def run(args: list[str], env: dict[str, str], stdin: bytes | None = None) -> str:
    r = subprocess.run(args, env=env, input=stdin, capture_output=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.decode()}")
    return r.stdout.decode()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one command: on a loaded machine the CPU
    time is the steadier figure."""
    cpu, started = _children_cpu(), time.perf_counter()
    run(args, env)
    return (time.perf_counter() - started) * 1000, (_children_cpu() - cpu) * 1000


def summary(label: str, samples: list[tuple[float, float]]) -> str:
    wall = sorted(w for w, _c in samples)
    p95 = wall[min(len(wall) - 1, round(len(wall) * 0.95) - 1)]
    cpu = statistics.median(c for _w, c in samples)
    return (f"{label:<26} wall p50 {statistics.median(wall):6.1f} ms, p95 {p95:6.1f} ms,"
            f" min {wall[0]:6.1f} ms; CPU median {cpu:5.1f} ms")


def interpreter_of(script: str) -> str:
    """The Python a console script runs (its ``#!`` line)."""
    with open(script, "rb") as fh:
        first = fh.readline().decode().strip()
    if not first.startswith("#!"):
        raise SystemExit(f"{script} is not a console script")
    return first[2:].strip().split()[0]


def describe_install(python: str) -> str:
    """Where ``alexandria`` is imported from in ``python``, and whether it is editable (``-I``:
    not from the current directory)."""
    probe = ("import alexandria, json, importlib.metadata as m\n"
             "d = m.distribution('alexandria-ledger')\n"
             "u = json.loads(d.read_text('direct_url.json') or '{}')\n"
             "e = u.get('dir_info', {}).get('editable', False)\n"
             "print(('editable install' if e else 'installed wheel') + ' of ' + d.version"
             " + ', ' + alexandria.__file__.rsplit('/', 2)[0])")
    r = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, check=False)
    return r.stdout.strip() or f"unknown install ({r.stderr.strip()[-200:]})"


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
    ap.add_argument("--alexandria", default=ALEXANDRIA,
                    help="the alexandria command of the install to measure (default: %(default)s)")
    args = ap.parse_args()
    alexandria = args.alexandria
    python = interpreter_of(alexandria)
    base = Path(args.dir or tempfile.mkdtemp(prefix="alexandria-bench-cli-"))
    # as a user runs it: bytecode cached (a session may have turned that off)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ALEXANDRIA_") and k != "PYTHONDONTWRITEBYTECODE"}
    op = base / "operator"
    pin = run([alexandria, "genesis", "init", "--dir", str(op), "--library", "bench",
               "--origin", "127.0.0.1/bench/log"], env).strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [alexandria, "serve", "--genesis", str(op / "genesis.json"), "--db",
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
        run([alexandria, "authority", "issue", "--dir", str(op), "--library", url], env)
        home_env = {**env, "ALEXANDRIA_HOME": str(base / "home")}
        key = run([alexandria, "worker", "init", "--library", url, "--genesis", pin],
                  home_env).strip()
        run([alexandria, "authority", "enroll", "bench", "--dir", str(op)], env)
        cert = run([alexandria, "authority", "approve", "--dir", str(op), "--actor", "bench",
                    "--worker", key, "--scopes", "all"], env)
        run([alexandria, "worker", "import", "-"], home_env, cert.encode())
        space = {"kind": "space", "title": "Bench", "body": {"summary": "replies"}}
        (base / "space.json").write_text(json.dumps(space))
        run([alexandria, "publish", str(base / "space.json"), "--name", "space"], home_env)
        disc = {"kind": "discussion", "title": "Bench thread", "body": {"text": "t"},
                "links": [{"relation": "contained_in", "target": "$space"}]}
        (base / "disc.json").write_text(json.dumps(disc))
        run([alexandria, "publish", str(base / "disc.json"), "--name", "thread"], home_env)

        run([alexandria, "publish", "--help"], env)  # warm: compile and cache the bytecode
        load_before = os.getloadavg()[0]
        floor = [timed([python, "-c", "pass"], env) for _ in range(args.runs)]
        version = [timed([alexandria, "--version"], env) for _ in range(args.runs)]
        one = []
        for i in range(args.runs):
            path = base / f"reply-{i}.json"
            path.write_text(json.dumps({
                "kind": "reply", "title": f"One {i}", "body": f"single publish {i}",
                "links": [{"relation": "replies_to", "target": "$thread"}]}))
            one.append(timed([alexandria, "publish", str(path)], home_env))
        install = describe_install(python)
        print(f"measured: {alexandria} ({install}); {args.runs} runs;"
              f" load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
        print(summary("python -c pass", floor))
        print(summary("alexandria --version", version))
        print(summary("alexandria publish FILE", one) + "   (target <= 80 ms wall)")

        batch = base / "batch.jsonl"
        with batch.open("w") as fh:
            for i in range(args.batch):
                fh.write(json.dumps({
                    "kind": "reply", "title": f"Batch {i}", "body": f"batch publish {i}",
                    "links": [{"relation": "replies_to", "target": "$thread"}]}) + "\n")
        server_cpu = process_cpu(server.pid)
        client_cpu = _children_cpu()
        started = time.perf_counter()
        out = run([alexandria, "publish", "--jsonl", str(batch)], home_env)
        seconds = time.perf_counter() - started
        client_cpu = _children_cpu() - client_cpu
        server_cpu = process_cpu(server.pid) - server_cpu
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
        if not args.dir:  # a temporary work directory goes with the run
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
