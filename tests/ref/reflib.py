"""What the reference tests share: where the tools are, their PASS/FAIL lines, the long tier's
question, and commands that must succeed. Imported by tests/ref/test_*.py (their folder is on sys.path when run)."""
import os
import subprocess
import sys

ROOT = os.environ.get("DS_ROOT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.path.join(ROOT, os.environ.get("BIN", "bin"))        # the tools
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))  # drivers/, data/

failures = 0


def report(name, ok, detail=""):
    """One `PASS name` or `FAIL name: detail` line; the detail goes to stderr either way."""
    global failures
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""), flush=True)
    if detail:
        print(f"  {name}: {detail}", file=sys.stderr, flush=True)
    if not ok:
        failures += 1


def long(name):
    """True when the long tier runs (tests/run.sh --long, make check); in the quick tier prints
    `LONG name` (run.sh counts it as left to make check) and is False."""
    if os.environ.get("DS_TEST_LONG", "0") == "1":
        return True
    print(f"LONG {name}", flush=True)
    return False


def fail_count(extra=0):
    """Counts failures found outside report() (e.g. a tolerance check that prints its own)."""
    global failures
    failures += extra
    return failures


def run(*cmd):
    """Runs a command that must succeed and returns its stdout; stops the test otherwise."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL command: %s\n%s" % (" ".join(map(str, cmd)), r.stderr), flush=True)
        sys.exit(1)
    return r.stdout


def status():
    """The exit status of the test: 1 when any check failed."""
    return 1 if failures else 0
