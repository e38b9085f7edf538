"""The configs room: ``<root>/config/*.json`` tables (topics, groups, consumer offsets).

The three tables share one journal shape (:mod:`~gannet.node.store.configs.tables`) and
fastjson-compatible files (:mod:`~gannet.node.store.configs.fastjson`). Imports only the base
modules.
"""
