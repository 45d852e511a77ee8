"""The value layer: limits, rates, periods, inputs, errors, decisions and keys.

Everything here is a value or a check of one, with no I/O; every other package builds on it and
nothing here imports from above.
"""
