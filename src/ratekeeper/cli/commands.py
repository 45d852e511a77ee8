"""The operator commands: ``rules validate`` and ``limits set|get|list|delete|import``.

Each command prints its result on stdout and its errors on stderr, and returns the exit status
(``cli.main`` turns what they raise into the same statuses, with a one-line message each):

- 0 (``OK``) on success;
- 1 (``INVALID``) when the input is invalid (a rule file, an override, a key, an import file,
  or a stored override that no longer validates) or the key has no override;
- 2 (``USAGE``) on a usage error: bad arguments, or a configuration store URL that is
  malformed or of an unknown scheme;
- 3 (``UNAVAILABLE``) when the configuration store cannot be opened or fails, or a package
  the command needs is not installed;
- 130 when interrupted (Ctrl-C); an import interrupted leaves the store as it was.

A reader of stdout that goes away (``ratekeeper limits list | head``) ends the command quietly
with status 1.

Lookups (``get``, ``list``, ``delete``) create nothing: a SQLite file or PostgreSQL table that
does not exist is refused (status 3); ``set`` and ``import`` create it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.overrides import Override
from ratekeeper.core.wording import agreeing, many

if TYPE_CHECKING:
    import argparse

    from ratekeeper.config import ConfigStore

OK, INVALID, USAGE, UNAVAILABLE, INTERRUPTED = 0, 1, 2, 3, 130

#: The actions of ``limits`` that only read or remove: they never create a store.
LOOKUPS = ("get", "list", "delete")


def config_url(given: str | None) -> str:
    """Where ``limits`` keeps overrides: ``--config``, else ``$RATEKEEPER_CONFIG``, else the
    default configuration store."""
    from ratekeeper.config import DEFAULT_URL

    return given or os.environ.get("RATEKEEPER_CONFIG") or DEFAULT_URL


def one_line(message: object) -> str:
    """``message`` on one line, with any password masked."""
    from ratekeeper.config import redacted

    return redacted(" ".join(line.strip() for line in str(message).splitlines() if line.strip()))


def validate(paths: list[str]) -> int:
    """``ratekeeper rules validate FILE...`` (``config validate``, its old spelling): load the
    rule files as the engine would; no rule at all is invalid too (exit 1), as a service would
    limit nothing."""
    out, err = sys.stdout, sys.stderr
    from ratekeeper.rules import load_rules

    try:
        rules = load_rules(paths)
    except ConfigError as error:
        for message in error.errors:
            print(message, file=err)
        print(f"invalid: {many(len(error.errors), 'error')}", file=err)
        return INVALID
    except OSError as error:
        print(f"{error.filename}: {error.strerror}", file=err)
        return INVALID
    if not rules:  # an empty directory, or files the loader skips: nothing would be limited
        files = all(os.path.isfile(path) for path in paths)
        what = "rate limit" if files else "*.yaml or *.yml rule file with a rate limit"
        print(
            f"no rules: {', '.join(paths)} {agreeing(len(paths), 'holds', 'hold')} no {what}",
            file=err,
        )
        return INVALID
    print(
        f"ok: {many(len(rules), 'rule')} in {many(len(rules.domains), 'domain')} "
        f"from {', '.join(paths)}",
        file=out,
    )
    return OK


def _override(args: argparse.Namespace) -> Override:
    from ratekeeper.config.changes import check_key

    check_key(args.key, args.domain)
    window: float | str = args.window
    try:
        window = float(window)
        window = int(window) if window.is_integer() else window
    except ValueError:
        pass  # a period such as "5m"
    fields: dict[str, Any] = {"capacity": args.capacity, "time_window_sec": window}
    for name in ("algorithm", "granularity", "burst", "sync"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return Override.from_dict(fields, args.key)


def _read_overrides(path: str, domain: str) -> dict[str, Override]:
    """Parse and check a whole import file, ``{"key": {"time_window_sec": 1, "capacity": 5},
    ...}``: every error of the file at once, as a ``ConfigError``."""
    from ratekeeper.config.changes import check_key

    name = "<stdin>" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"{name}: {error.strerror}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{name}: not UTF-8 text: {error}") from None
    try:
        loaded = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"{name}: not valid JSON: {error}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{name}: must be a JSON object of key: override")
    overrides: dict[str, Override] = {}
    errors: list[str] = []
    for key, value in loaded.items():
        try:
            check_key(key, domain)
            overrides[key] = Override.from_dict(value, f"{name}: {key}")
        except ConfigError as error:
            errors.extend(
                message if message.startswith(f"{name}: ") else f"{name}: {message}"
                for message in error.errors
            )
    if errors:
        raise ConfigError(errors)
    return overrides


def _progress(verb: str, done: int, total: int, started: float, err: TextIO) -> None:
    rate = done / max(time.monotonic() - started, 1e-9)
    print(f"\r{verb} {done:,}/{total:,} ({rate:,.0f}/s)", end="", file=err, flush=True)


def _rows(
    store: ConfigStore, args: argparse.Namespace, invalid: list[ConfigError], err: TextIO
) -> Iterator[str]:
    """The lines of ``limits list``; each stored row that does not validate is reported on
    ``err`` at once, appended to ``invalid`` and skipped."""
    domain = None if args.domain in ("", "*") else args.domain  # list shows every domain

    def report(error: ConfigError) -> None:
        print(f"error: {one_line(error)}", file=err)
        invalid.append(error)

    for domain_name, key, override in store.items(domain, args.prefix, on_invalid=report):
        if args.json:
            yield json.dumps({"domain": domain_name, "key": key, **override.to_dict()})
        else:
            yield f"{domain_name or '-'}\t{key}\t{override.to_json()}"


def _open(given: str | None, action: str) -> ConfigStore | None:
    """The store named by ``--config`` (``given``) or its defaults, which lookups open without
    creating anything; None, once reported, when the URL is unusable."""
    from ratekeeper.config import open_config_store

    url = config_url(given)
    try:
        return open_config_store(url, create=action not in LOOKUPS)
    except ConfigError as error:
        source = "--config" if given else "$RATEKEEPER_CONFIG"
        print(f"error: {source} {one_line(url)}: {one_line(error)}", file=sys.stderr)
        return None


def _missing(store: ConfigStore) -> str:
    """A hint when a lookup finds no SQLite file: the commands that create one."""
    from ratekeeper.config.sqlite import SQLiteConfigStore

    if isinstance(store, SQLiteConfigStore) and not os.path.exists(store.path):
        return "; 'ratekeeper limits set' or 'ratekeeper limits import' creates it"
    return ""


def _import(store: ConfigStore, overrides: dict[str, Override], domain: str, err: TextIO) -> None:
    """Write ``overrides`` in one transaction, showing the progress on ``err``."""
    total, started = len(overrides), time.monotonic()
    shown = False

    def progress(done: int) -> None:
        nonlocal shown
        shown = True
        _progress("writing", done, total, started, err)

    try:
        store.set_many(overrides, domain, progress=progress)
    except BaseException:
        if shown:
            print(file=err)  # end the progress line before the error
        raise
    _progress("imported", total, total, started, err)
    print(file=err)


def limits(args: argparse.Namespace) -> int:
    """``ratekeeper limits set|get|list|delete|import``: manage per-key overrides.

    Invalid input raises ``ConfigError`` before the store is opened; a store failure raises
    ``ConfigStoreError`` (``cli.main`` reports both).
    """
    from ratekeeper.core.errors import ConfigStoreError

    out, err = sys.stdout, sys.stderr
    if args.action == "set":
        override = _override(args)
    elif args.action == "import":
        overrides = _read_overrides(args.file, args.domain)
    store = _open(args.config, args.action)
    if store is None:
        return USAGE
    try:
        if args.action == "set":
            store.set(args.key, override, args.domain)
            print(override.to_json(), file=out)
        elif args.action == "get":
            found = store.get(args.key, args.domain)
            if found is None:
                print(f"error: no override for {args.key!r}", file=err)
                return INVALID
            print(found.to_json(), file=out)
        elif args.action == "delete":
            if not store.delete(args.key, args.domain):
                print(f"error: no override for {args.key!r}", file=err)
                return INVALID
            print(f"deleted {args.key}", file=err)
        elif args.action == "list":
            invalid: list[ConfigError] = []
            count = 0
            for row in _rows(store, args, invalid, err):
                print(row, file=out)
                count += 1
            print(f"{count} override(s)", file=err)
            if invalid:
                print(f"error: {len(invalid)} stored override(s) are invalid", file=err)
                return INVALID
        else:
            _import(store, overrides, args.domain, err)
    except ConfigStoreError as error:
        hint = _missing(store) if args.action in LOOKUPS else ""
        raise ConfigStoreError(f"{one_line(error)}{hint}") from error
    finally:
        store.close()
    return OK
