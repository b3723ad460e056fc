"""Scenario drivers that run the whole loop end to end: the simulated closed-loop timeline (``timeline``,
``loopcoll replay``) and the live loop on processes (``live``, ``loopcoll demo --live``).

The top wing: it may import :mod:`runtime.loop`, :mod:`runtime.service`, :mod:`runtime.executor`,
:mod:`runtime.formats` and :mod:`runtime.errors`; no other wing imports it.

>>> from runtime.scenarios.timeline import SCENARIO_FORMAT
>>> SCENARIO_FORMAT
'loopcoll.scenario/1'
"""
