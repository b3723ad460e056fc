"""The closed loop's core: telemetry in, schedule versions out, in one process.

Owns the link estimator (``estimator``, its relay-pacing memory ``pacing``), the bottleneck-cut detector (``detector``), the schedule manager
(``manager``), the AllToAllv demand planner (``demand``), the telemetry sample groups (``grouping``) and their
facade, :class:`~runtime.loop.controller.Controller` (``controller``). It may import :mod:`runtime.formats` (samples, profiles, the store), :mod:`runtime.contention`
(the optional gate) and :mod:`runtime.errors`; never the service, executor, observe or scenarios wings.

>>> from runtime.loop.controller import Controller
>>> Controller.__name__
'Controller'
"""
