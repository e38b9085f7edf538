"""The queues room: what the dispatcher builds from the log so that consumers can find messages.

Consume queues, index files, the dispatch pass that feeds both, and reading a queue by queue
offset. Imports the log room and the base modules.
"""
