"""The command table (each command's module, its group in the help and its summary) and the
exit statuses (docs/cli.md): read by the dispatch (``cli/__init__.py``) and the parser
(``cli/parser.py``), and importing nothing, so that ``--version`` stays cheap."""

from __future__ import annotations

#: command -> (module that registers it, group in the help, one-line summary)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "login": ("alexandria.cli.login", "start", "create your key and ask a library to approve it"),
    "whoami": ("alexandria.cli.participant", "start", "show your key, actor, scopes and library"),
    "worker": ("alexandria.cli.participant", "start",
               "set up a worker key by hand (init, import CERT)"),
    "publish": ("alexandria.cli.publish", "publish",
                "sign content and publish it (FILE…, or --jsonl)"),
    "revise": ("alexandria.cli.publish", "publish",
               "edit the current head of an object and publish the revision"),
    "validate": ("alexandria.cli.participant", "publish",
                 "ask the library whether it would admit content (dry run)"),
    "pending": ("alexandria.cli.participant", "publish",
                "list envelopes not yet admitted, and rejected ones"),
    "retry": ("alexandria.cli.participant", "publish", "resend pending envelopes, byte for byte"),
    "search": ("alexandria.cli.reading", "read", "search the library's catalogue"),
    "get": ("alexandria.cli.reading", "read",
            "fetch a signed record and check it against the pinned genesis"),
    "object": ("alexandria.cli.reading", "read", "show an object and what surrounds it"),
    "changes": ("alexandria.cli.reading", "read", "print what changed under a root, resuming"),
    "follow": ("alexandria.cli.personal", "lists", "follow objects"),
    "unfollow": ("alexandria.cli.personal", "lists", "stop following objects"),
    "save": ("alexandria.cli.personal", "lists", "save objects"),
    "unsave": ("alexandria.cli.personal", "lists", "remove objects from saved"),
    "lists": ("alexandria.cli.personal", "lists", "show what you follow and what you saved"),
    "serve": ("alexandria.cli.operator", "operate", "serve a library over HTTP"),
    "genesis": ("alexandria.cli.operator", "operate", "create a library's genesis"),
    "authority": ("alexandria.cli.operator", "operate",
                  "approve participants (requests, approve CODE), certify and revoke keys"),
    "demo": ("alexandria.cli.operator", "operate",
             "serve a fresh library seeded with the contract's worked example"),
    "export": ("alexandria.cli.log", "audit", "write a library's log as JSON Lines"),
    "verify": ("alexandria.cli.log", "audit", "check a log offline with only the genesis pin"),
    "backup": ("alexandria.cli.operations", "operate",
               "copy a library's database while it serves"),
    "restore": ("alexandria.cli.operations", "operate",
                "restore a backup, and catch up with a mirror or an export"),
    "migrate": ("alexandria.cli.operations", "operate", "copy a SQLite library into PostgreSQL"),
    "mirror": ("alexandria.cli.operations", "operate",
               "serve a verified read-only replica of a library"),
    "witness": ("alexandria.cli.witness", "operate",
                "run a C2SP witness that cosigns other logs' checkpoints"),
    "mcp": ("alexandria.cli.mcp", "more", "serve your library to an AI agent over MCP (stdio)"),
    "completion": ("alexandria.cli.completion", "more", "print a shell completion script"),
}

GROUPS = {
    "start": "Get started",
    "publish": "Publish",
    "read": "Read (no key needed)",
    "lists": "Personal lists",
    "operate": "Run a library (operators)",
    "audit": "Audit",
    "more": "More",
}

EXAMPLES = """\
examples:
  alexandria login http://127.0.0.1:8080 --name alice   # then the operator approves the code
  alexandria search arithmetic --library http://127.0.0.1:8080
  alexandria publish claim.json --name claim
  alexandria revise claim                                 # edit the head, publish the revision
  alexandria publish --jsonl many.jsonl                   # many contributions, one connection
  alexandria authority approve K7QF-2XMB                  # operator: approve a login request
"""

#: exit statuses, by the name of the exception class (or a base class); names rather than
#: classes so that mapping an error never imports the module that defines it
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_CONFLICT = 4
EXIT_PENDING = 5
EXIT_VERIFICATION = 6
EXIT_SETUP = 7
EXIT_INTERRUPTED = 130
EXIT_CODES: dict[str, int] = {
    "KeptPending": EXIT_PENDING,
    "SetupRequired": EXIT_SETUP,
    "VerificationFailed": EXIT_VERIFICATION,
    "RecordNotVerified": EXIT_VERIFICATION,
    "UsageError": EXIT_USAGE,
    "ContentRefused": EXIT_REFUSED,
    "ServerNotFound": EXIT_FAILURE,
    "ServerConflict": EXIT_CONFLICT,
    "DuplicateContribution": EXIT_CONFLICT,
    "ServerResyncRequired": EXIT_CONFLICT,
    "ServerError": EXIT_REFUSED,
}
