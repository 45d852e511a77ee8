"""The reference's runtime directory as ratekeeper's rule directory.

The reference (through lyft/goruntime) loads every file under
``RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY``, subdirectories included, hidden
ones too unless ``RUNTIME_IGNOREDOTFILES`` is true; with ``RUNTIME_WATCH_ROOT`` true (its
default) it walks ``RUNTIME_ROOT/RUNTIME_SUBDIRECTORY`` and keeps the files whose path there,
``/`` read as ``.``, starts with ``RUNTIME_APPDIRECTORY.``. It reloads them when ``RUNTIME_ROOT``
(a symlink) is swapped, or with ``RUNTIME_WATCH_ROOT`` false when a file in the directory is
written.

ratekeeper is given the directory itself, through the symlink: it loads the ``*.yaml`` and
``*.yml`` files directly in it, never hidden ones, and polls them every second, so that both an
edit and a swap of the symlink take effect within a second, whatever ``RUNTIME_WATCH_ROOT``
says. A file the reference would load and ratekeeper would not stops the start, by name. A
directory without rule files starts with no rule (with ``HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED``
true, unhealthy until one loads: ``--healthcheck-rules``).
"""

from __future__ import annotations

import os

from ratekeeper.service.compat.reader import Reader, Refused

#: The suffixes of the files a rule directory contributes (``rules.loader.SUFFIXES``).
SUFFIXES = (".yaml", ".yml")
#: The most files a refusal names.
SHOWN = 5


def runtime_rules(env: Reader) -> str:
    """The rule directory the runtime variables name; ``Refused`` when the reference would
    load no rules from them, or files there that ratekeeper would not load."""
    root, sub, app = (
        env.text(name) for name in ("RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
    )
    watch_root = env.switch("RUNTIME_WATCH_ROOT")
    ignore_dotfiles = env.switch("RUNTIME_IGNOREDOTFILES")
    # goruntime loads nothing from an empty root, or an empty directory under it
    needed = "RUNTIME_SUBDIRECTORY" if watch_root else "RUNTIME_APPDIRECTORY"
    for name in ("RUNTIME_ROOT", needed):
        if not env.text(name):
            raise Refused(
                f"${name} is empty: the reference loads no rules then "
                f"(RUNTIME_WATCH_ROOT is {str(watch_root).lower()}); set it so that "
                "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY is the rule directory"
            )
    directory = os.path.join(root, sub, app)
    if os.path.isdir(directory):
        strays = sorted(
            _loaded_by_reference(root, sub, app, watch_root, ignore_dotfiles) - _loaded(directory)
        )
        if strays:
            raise Refused(_strays_message(directory, strays, ignore_dotfiles))
    return directory


def _loaded(directory: str) -> set[str]:
    """The files ratekeeper loads from ``directory`` (``rules.load_rules``)."""
    return {
        os.path.normpath(os.path.join(directory, name))
        for name in os.listdir(directory)
        if name.endswith(SUFFIXES)
        and not name.startswith(".")
        and os.path.isfile(os.path.join(directory, name))
    }


def _loaded_by_reference(
    root: str, sub: str, app: str, watch_root: bool, ignore_dotfiles: bool
) -> set[str]:
    """The files the reference loads as rule files: goruntime's walk (symlinked directories
    are not entered, files behind symlinks are read) and the provider's key filter."""
    base = os.path.join(root, sub) if watch_root else os.path.join(root, sub, app)
    found = set()
    for path, directories, files in os.walk(base):
        if ignore_dotfiles:
            directories[:] = [name for name in directories if not name.startswith(".")]
        for name in files:
            file = os.path.join(path, name)
            if (ignore_dotfiles and name.startswith(".")) or not os.path.isfile(file):
                continue
            key = os.path.relpath(file, base).replace(os.sep, ".")
            if watch_root and not key.startswith(app + "."):
                continue
            found.add(os.path.normpath(file))
    return found


def _strays_message(directory: str, strays: list[str], ignore_dotfiles: bool) -> str:
    shown = ", ".join(strays[:SHOWN]) + (
        f" and {len(strays) - SHOWN} more" if len(strays) > SHOWN else ""
    )
    hidden = "" if ignore_dotfiles else " (hidden ones too, as RUNTIME_IGNOREDOTFILES is false)"
    return (
        f"$RUNTIME_ROOT: {shown}: the reference loads these as rule files{hidden}, ratekeeper "
        f"only the *.yaml and *.yml files directly in {directory}, never hidden ones: rename "
        "or move them"
        + ("" if ignore_dotfiles else ", or set RUNTIME_IGNOREDOTFILES=true for hidden ones")
    )
