"""The user's contract, shipped inside the package as ``alexandria.contracts`` (package data).

This folder holds data only: ``pyproject.toml`` maps it to the package ``alexandria.contracts``
so that a wheel carries it, and ``alexandria/core/contract.py`` reads it with
``importlib.resources``.
"""
