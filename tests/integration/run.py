#!/usr/bin/env python3
"""Runs rankdb's integration tests against a rankdbd binary.

  python3 tests/integration/run.py [--bin build/server/rankdbd] [-k PATTERN]
                                   [--timeout 120] [-j N] [-v] [--list]

Discovers tests/integration/test_*.py and runs every function named test_*
(filtered by -k: a substring of "file::function"), each in its own Python
process with a timeout. Prints "PASS name" or "FAIL name" with the traceback
and the tail of the server's stderr, then a last line
"integration: N passed, N failed". Exit code 1 if any test failed.
"""

import argparse
import concurrent.futures
import importlib.util
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402


def load_module(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def discover(pattern):
    """-> ([(name, path, funcname)], [(name, error text)])"""
    tests, errors = [], []
    for fn in sorted(os.listdir(HERE)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        path = os.path.join(HERE, fn)
        try:
            mod = load_module(path)
        except Exception:
            errors.append((fn, traceback.format_exc()))
            continue
        funcs = [(getattr(mod, n).__code__.co_firstlineno, n) for n in dir(mod)
                 if n.startswith("test_") and inspect.isfunction(getattr(mod, n))
                 and getattr(mod, n).__module__ == mod.__name__]
        for _, n in sorted(funcs):
            name = "%s::%s" % (fn[:-3], n)
            if pattern and pattern not in name:
                continue
            tests.append((name, path, n))
    return tests, errors


# ---------------------------------------------------------------------------
# child: runs one test function


def child_main(path, func):
    import faulthandler

    name = "%s::%s" % (os.path.basename(path)[:-3], func)

    def on_term(signum, frame):
        print("\nTIMEOUT: %s was stopped by the runner; where each thread was:" % name, flush=True)
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        sys.stdout.flush()
        try:
            harness.end_test(False)
        finally:
            sys.stdout.flush()
            os._exit(3)

    signal.signal(signal.SIGTERM, on_term)
    harness.begin_test(name)
    ok = False
    try:
        mod = load_module(path)
        getattr(mod, func)()
        ok = True
    except BaseException:
        traceback.print_exc(file=sys.stdout)
    finally:
        sys.stdout.flush()
        try:
            harness.end_test(ok)
        except Exception:
            traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
    os._exit(0 if ok else 1)


# ---------------------------------------------------------------------------
# parent


def kill_leftovers(pidfile, binary):
    """SIGKILLs, one PID at a time, servers a killed test child left behind
    (only PIDs the child recorded, and only if they still run our binary)."""
    try:
        with open(pidfile) as f:
            pids = [int(x) for x in f.read().split()]
    except (FileNotFoundError, ValueError):
        return
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if os.path.realpath(argv0) != os.path.realpath(binary):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def run_one(name, path, func, args, tmpdir):
    pidfile = os.path.join(tmpdir, "pids.%d.%d" % (os.getpid(), abs(hash(name))))
    env = dict(os.environ)
    env["RDB_BIN"] = args.bin
    env["RDB_PIDFILE"] = pidfile
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", path, func],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            stdin=subprocess.DEVNULL)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGTERM)  # child dumps stacks, kills its servers
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    kill_leftovers(pidfile, args.bin)
    try:
        os.unlink(pidfile)
    except OSError:
        pass
    text = out.decode("utf-8", "replace")
    ok = proc.returncode == 0 and not timed_out
    if timed_out:
        text = "test timed out after %gs\n%s" % (args.timeout, text)
    return ok, text


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description="rankdb integration tests")
    ap.add_argument("--bin", default=harness.bin_path(), help="rankdbd binary (default %(default)s)")
    ap.add_argument("-k", dest="pattern", default="", help="run tests whose file::name contains this")
    ap.add_argument("--timeout", type=float, default=120, help="per-test timeout in seconds")
    ap.add_argument("-j", dest="jobs", type=int, default=1, help="tests run in parallel")
    ap.add_argument("-v", dest="verbose", action="store_true", help="print output of passing tests")
    ap.add_argument("--list", action="store_true", help="list tests and exit")
    ap.add_argument("--server-flags", default=None,
                    help="extra rankdbd options for every server (sets RDB_TEST_SERVER_FLAGS), "
                    "e.g. '--http-write-loop on'")
    args = ap.parse_args()
    if args.server_flags is not None:
        os.environ["RDB_TEST_SERVER_FLAGS"] = args.server_flags
    args.bin = os.path.abspath(args.bin)
    harness.set_bin(args.bin)

    tests, import_errors = discover(args.pattern)
    if args.list:
        for name, _, _ in tests:
            print(name)
        return 0
    if not os.path.isfile(args.bin):
        print("warning: rankdbd binary not found at %s; every test will fail (pass --bin)" % args.bin,
              flush=True)
    if not tests and not import_errors:
        print("warning: no tests match %r" % args.pattern, flush=True)

    passed = failed = 0
    for fn, err in import_errors:
        print("FAIL %s (import)\n%s" % (fn, err), flush=True)
        failed += 1

    tmpdir = harness.tmp_root()
    lock = threading.Lock()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = {ex.submit(run_one, n, p, f, args, tmpdir): n for n, p, f in tests}
        order = [f for f in futs]
        it = concurrent.futures.as_completed(futs) if args.jobs > 1 else order
        for fut in it:
            name = futs[fut]
            ok, text = fut.result()
            with lock:
                if ok:
                    passed += 1
                    print("PASS %s" % name, flush=True)
                    if args.verbose and text.strip():
                        print(text.rstrip(), flush=True)
                else:
                    failed += 1
                    print("FAIL %s" % name, flush=True)
                    print(text.rstrip(), flush=True)
    print("integration: %d passed, %d failed" % (passed, failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
