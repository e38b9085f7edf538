"""The log room: the commit log and what it is made of and kept durable by.

Mapped files, message records (decoding and the packed append path), the commit log, its flush
services and the store checkpoint. Imports only the store's base modules (errors, config,
durability, hashing, properties, message ids).
"""
