"""Generated code for ``gannet.admin.v1`` (do not edit; see :mod:`gannet.node.protocol.generating`)."""
