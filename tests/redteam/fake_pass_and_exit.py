"""expect: crash

Prints a fake passing report on stdout and exits cleanly before the harness can say more.
"""


class Model(Model):
    def step(self, hidden, state):
        import json
        import os
        import sys
        print(json.dumps({"event": "check", "name": "fixed_seeds", "status": "pass", "reason": "ok"}))
        print(json.dumps({"event": "done"}))
        sys.stdout.flush()
        os._exit(0)
