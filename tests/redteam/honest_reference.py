"""expect: pass

The reference itself, unchanged: the harness must not reject honest work.
"""
