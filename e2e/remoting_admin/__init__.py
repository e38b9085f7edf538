"""End-to-end checks of the remoting protocol with rocketmq-spring (``make e2e-remoting-admin``)."""
