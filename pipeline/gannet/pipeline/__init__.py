"""Gannet's PySpark data source and bulk segment jobs. They arrive with the pipeline issue."""
