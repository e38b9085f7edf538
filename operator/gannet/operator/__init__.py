"""Gannet's Kubernetes operator (kopf). Its handlers arrive with the operator issue."""
