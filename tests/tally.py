"""The count every Python suite keeps: check() each condition, report() at the end.

report() prints "NAME: N passed, M failed", the line tests/run.sh adds up, and returns the exit
status (1 when anything failed). A failed check prints "FAIL: what: detail" at once.
"""


class Tally:
    def __init__(self, name):
        self.name = name
        self.passed = self.failed = 0

    def check(self, what, ok, detail=""):
        """Counts ok; returns it, so a caller can skip what depends on it."""
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {what}" + (f": {detail}" if detail else ""))
        return bool(ok)

    def report(self):
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
