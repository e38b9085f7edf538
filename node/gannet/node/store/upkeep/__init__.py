"""The upkeep room: keeping the log and the queues in agreement, and checking that they are.

Startup recovery, queue-numbering checks, cleanup of expired files and offline verification.
Imports the log and queues rooms.
"""
