"""expect: forbidden dynamic_import

Loads the task's reference through __import__ with a name built at run time.
"""
_reference = __import__("".join(["ref", "erence"]))
