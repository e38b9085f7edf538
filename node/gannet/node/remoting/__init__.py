"""The RocketMQ remoting protocol (the classic 4.x TCP protocol) and the name-server requests.

:mod:`codec` reads and writes ``RemotingCommand`` frames (``docs/formats/remoting.md``);
:mod:`server` serves them on the remoting port and the name-server port; :mod:`nameserver` and
:mod:`broker_requests` translate each request into the calls the v2 gRPC servicer makes
(:mod:`gannet.node.api.messaging`), so both protocols share one domain layer.
"""
