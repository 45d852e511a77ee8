"""The operator commands: ``config validate`` and ``limits set|get|list|delete|import``.

Each command prints its result on stdout and its errors on stderr, and returns the exit status:
0 on success, 1 when the input is invalid or the key is missing, 2 on a usage error, 3 when the
configuration store fails.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ratekeeper.errors import ConfigError, ConfigStoreError
from ratekeeper.overrides import Override

if TYPE_CHECKING:
    import argparse

    from ratekeeper.config import ConfigStore


def config_url(given: str | None) -> str:
    """Where ``limits`` keeps overrides: ``--config``, else ``$RATEKEEPER_CONFIG``, else the
    default configuration store."""
    from ratekeeper.config import DEFAULT_URL

    return given or os.environ.get("RATEKEEPER_CONFIG") or DEFAULT_URL


def validate(paths: list[str]) -> int:
    """``ratekeeper config validate FILE...``: load the rule files as the engine would."""
    out, err = sys.stdout, sys.stderr
    from ratekeeper.rules import load_rules

    try:
        rules = load_rules(paths)
    except ConfigError as error:
        for message in error.errors:
            print(message, file=err)
        print(f"invalid: {len(error.errors)} error(s)", file=err)
        return 1
    except OSError as error:
        print(f"{error.filename}: {error.strerror}", file=err)
        return 1
    print(
        f"ok: {len(rules)} rules in {len(rules.domains)} domains from {', '.join(paths)}", file=out
    )
    return 0


def _override(args: argparse.Namespace) -> Override:
    window: float | str = args.window
    try:
        window = float(window)
        window = int(window) if window.is_integer() else window
    except ValueError:
        pass  # a period such as "5m"
    fields: dict[str, Any] = {"capacity": args.capacity, "time_window_sec": window}
    for name in ("algorithm", "granularity", "burst"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return Override.from_dict(fields, args.key)


def _read_overrides(path: str) -> dict[str, Override]:
    """Parse a whole import file, ``{"key": {"time_window_sec": 1, "capacity": 5}, ...}``."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    name = "<stdin>" if path == "-" else path
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"{name}: not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: must be a JSON object of key: override")
    overrides: dict[str, Override] = {}
    errors: list[str] = []
    for key, value in data.items():
        try:
            overrides[key] = Override.from_dict(value, f"{name}: {key}")
        except ConfigError as error:
            errors.extend(error.errors)
    if errors:
        raise ConfigError(errors)
    return overrides


def _progress(done: int, total: int, started: float, err: TextIO) -> None:
    rate = done / max(time.monotonic() - started, 1e-9)
    print(f"\rimported {done:,}/{total:,} ({rate:,.0f}/s)", end="", file=err, flush=True)


def _rows(store: ConfigStore, args: argparse.Namespace) -> Iterator[str]:
    domain = None if args.domain in ("", "*") else args.domain  # list shows every domain
    for domain_name, key, override in store.items(domain, args.prefix):
        if args.json:
            yield json.dumps({"domain": domain_name, "key": key, **override.to_dict()})
        else:
            yield f"{domain_name or '-'}\t{key}\t{override.to_json()}"


def limits(args: argparse.Namespace) -> int:
    """``ratekeeper limits set|get|list|delete|import``: manage per-key overrides."""
    out, err = sys.stdout, sys.stderr
    from ratekeeper.config import open_config_store

    try:
        if args.action == "set":
            override = _override(args)
        elif args.action == "import":
            overrides = _read_overrides(args.file)
    except (ConfigError, OSError) as error:
        print(f"error: {error}", file=err)
        return 1
    url = config_url(args.config)
    try:
        store = open_config_store(url)
    except ConfigStoreError as error:
        print(f"error: cannot open the configuration store {url}: {error}", file=err)
        return 3
    try:
        if args.action == "set":
            store.set(args.key, override, args.domain)
            print(override.to_json(), file=out)
        elif args.action == "get":
            found = store.get(args.key, args.domain)
            if found is None:
                print(f"error: no override for {args.key!r}", file=err)
                return 1
            print(found.to_json(), file=out)
        elif args.action == "delete":
            if not store.delete(args.key, args.domain):
                print(f"error: no override for {args.key!r}", file=err)
                return 1
            print(f"deleted {args.key}", file=err)
        elif args.action == "list":
            count = 0
            for row in _rows(store, args):
                print(row, file=out)
                count += 1
            print(f"{count} override(s)", file=err)
        else:
            started = time.monotonic()
            for done, (key, override) in enumerate(overrides.items(), 1):
                store.set(key, override, args.domain)
                if done % 1000 == 0:
                    _progress(done, len(overrides), started, err)
            _progress(len(overrides), len(overrides), started, err)
            print(file=err)
    except ConfigStoreError as error:
        print(f"error: the configuration store {url} failed: {error}", file=err)
        return 3
    finally:
        store.close()
    return 0
