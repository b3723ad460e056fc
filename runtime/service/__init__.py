"""The controller as a network service: the wire protocol (``wire``), the TCP daemon (``daemon``, with its
per-connection protocol in the private ``_connection``) and the Python client (``client``, with its handshake
and message building in the private ``_client_link``).

The daemon serves any object with the controller's methods (``daemon.ControllerLike``), so this wing does not
import :mod:`runtime.loop`; it may import :mod:`runtime.formats` and :mod:`runtime.errors` only.

>>> from runtime.service.wire import PROTOCOL
>>> PROTOCOL
1
"""
