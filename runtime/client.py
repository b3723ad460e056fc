"""Kept import path: ``runtime.client`` moved to :mod:`runtime.service.client` (examples and user code import it).

>>> from runtime.client import Client
>>> Client.__module__
'runtime.service.client'
"""

from __future__ import annotations

from runtime.service.client import Client, parse_address, read_token

__all__ = ["Client", "parse_address", "read_token"]
