"""The runtime's formats: telemetry samples (``loopcoll.telemetry/1``), job profiles (``loopcoll.profile/1``) and
the versioned schedule store (``loopcoll.store/1``) — their records, validation, reading and atomic writing.

Owns ``telemetry``, ``aggregate`` (``/2`` window records), ``columnar`` (``/2`` columnar batches), ``profile``
and ``store``. The bottom wing: of the runtime it imports only
:mod:`runtime.errors` (plus ``synth`` and ``msccl_xml``); every other wing may import it.

>>> from runtime.formats.telemetry import KINDS
>>> "coll" in KINDS
True
"""
