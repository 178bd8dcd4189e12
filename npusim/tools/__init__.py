"""User-facing tools built on the public API (inspect, demo, bisect, sweep, validate, plots).

Each tool module returns data (dicts, dataclasses); rendering is separate, and the CLI
only calls them.
"""
