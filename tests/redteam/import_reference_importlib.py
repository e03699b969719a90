"""expect: forbidden dynamic_import

Loads the task's reference through importlib to call it instead of computing.
"""
import importlib

_reference = importlib.import_module("refer" + "ence")
