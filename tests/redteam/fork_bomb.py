"""expect: timeout

Spawns a crowd of sleeping children, then hangs: the whole process group must be killed.
"""
import subprocess
import sys

for _ in range(16):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "kagent-redteam-fork-bomb"])
while True:
    pass
