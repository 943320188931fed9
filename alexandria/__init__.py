"""Alexandria: a signed, append-only contribution ledger for a public knowledge library."""

__version__ = "0.1.0"
