"""p50/p95 tool-call latency of ``alexandria mcp`` over stdio: ``search``, ``object``, ``verify``.

    .venv/bin/python -m bench.loader --dir DIR --entries 100000
    .venv/bin/python -m bench.mcp_latency --dir DIR [--calls 200]

Starts ``alexandria serve`` on 127.0.0.1 over the library ``bench.loader`` built in DIR, makes a
participant home that pins its genesis (reads need no key), and runs ``alexandria mcp
--library URL`` as a child process driven by the ``mcp`` package's own client over stdio, as an
agent host does.  Sequential calls, inputs drawn at random from the library:

- ``search``: ``q`` = one mid-frequency word (0.1–1 % of heads), default budget (summary,
  16 KiB): the server checks the signature chain of every record it returns;
- ``object``: a random object root, section ``all``, default budget;
- ``verify``: a random revision: signature chain, a checkpoint whose note signature and log
  certificate are checked (once per distinct note: the library takes no writes during the run,
  so the first call pays for it — reported apart as ``verify (first)``), the entry's and its
  authority certificate's inclusion proofs.

The figures are the whole round trip an agent host sees (JSON-RPC over pipes, the MCP server,
its HTTP calls to the library, the checks); client and servers share the machine.  Results
are also written to DIR/mcp_latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from bench.read_latency import percentile, sample_inputs, start_server
from bench.serving import free_port

ROOT = Path(__file__).resolve().parents[1]


def make_home(home: Path, url: str, directory: Path) -> None:
    genesis = json.loads((directory / "genesis.json").read_text())
    pin = json.loads((directory / "loader.json").read_text())["genesis_pin"]
    home.mkdir(parents=True, exist_ok=True)
    (home / "library.json").write_text(json.dumps({"url": url, "genesis": pin}))
    (home / "genesis.json").write_text(json.dumps(genesis))


async def measure(url: str, home: Path, plan: list[tuple[str, dict[str, Any]]]
                  ) -> dict[str, list[float]]:
    params = StdioServerParameters(
        command=sys.executable, args=[str(ROOT / "cli.py"), "mcp", "--library", url],
        env={"ALEXANDRIA_HOME": str(home)}, cwd=str(ROOT))
    times: dict[str, list[float]] = {}
    async with Client(params, read_timeout_seconds=120) as client:
        await client.list_tools()
        for tool, args in plan:
            t0 = time.perf_counter()
            result = await client.call_tool(tool, args)
            elapsed = (time.perf_counter() - t0) * 1000
            if result.is_error:
                raise SystemExit(f"{tool} {args}: {result.structured_content}")
            if tool == "verify" and not result.structured_content["verified"]:
                raise SystemExit(f"verify {args}: {result.structured_content}")
            name = tool
            if tool == "verify" and "verify (first)" not in times:
                name = "verify (first)"
            times.setdefault(name, []).append(elapsed)
    return times


def run(directory: Path, calls: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    inp = sample_inputs(directory, rng)
    words = inp.mid or inp.common
    plan: list[tuple[str, dict[str, Any]]] = []
    for _ in range(calls):
        plan.append(("search", {"q": rng.choice(words)}))
        plan.append(("object", {"revision": rng.choice(inp.roots)}))
        plan.append(("verify", {"revision": rng.choice(inp.revisions)}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(directory, port)
    try:
        with tempfile.TemporaryDirectory(prefix="alexandria-mcp-bench-") as tmp:
            home = Path(tmp) / "home"
            make_home(home, url, directory)
            times = asyncio.run(measure(url, home, plan))
    finally:
        server.terminate()
        server.wait(timeout=30)
    results = []
    print(f"library: {inp.log_size:,} log entries, {inp.objects:,} current heads;"
          f" {calls} calls per tool over stdio")
    for name, values in times.items():
        row = {"tool": name, "calls": len(values), "p50_ms": round(percentile(values, 50), 1),
               "p95_ms": round(percentile(values, 95), 1), "max_ms": round(max(values), 1)}
        results.append(row)
        print(f"{name:<16} p50 {row['p50_ms']:7.1f} ms   p95 {row['p95_ms']:7.1f} ms"
              f"   max {row['max_ms']:7.1f} ms   ({len(values)} calls)")
    out = {"entries": inp.log_size, "calls": calls, "results": results}
    (directory / "mcp_latency.json").write_text(json.dumps(out, indent=2))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.mcp_latency",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--calls", type=int, default=200, help="calls per tool")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    run(args.dir, args.calls, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
