"""The value layer: limits, rates, periods, inputs, errors, decisions and keys.

Everything here is a value or a check of one, with no I/O; every other package builds on it and
nothing here imports from above. Beside them, what every layer shares: masking passwords in
messages (``redaction``), renewing after a fork (``forks``), logging a repeated message once
a window with a count (``log_throttle``), and the warning of an old import path that moved
(``moved``).
"""
