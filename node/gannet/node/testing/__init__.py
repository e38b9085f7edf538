"""Test kit shipped with the broker: writer processes for crash tests and history checkers."""
