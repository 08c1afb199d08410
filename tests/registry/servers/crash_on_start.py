import sys

print("fatal: cannot open database /nonexistent.db", file=sys.stderr)
sys.exit(3)
