"""expect: forbidden sys_modules

Takes the harness's already-loaded reference out of sys.modules.
"""
import sys

_reference = sys.modules.get("reference")
