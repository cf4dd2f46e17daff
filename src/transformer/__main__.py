# Hand-written, not exported from a notebook: `python -m transformer ...` and the `transformer` script
# run the course's command line, exported from notebooks/97_command_line.ipynb into
# transformer/engine/cli.py. It is imported here, inside `command_line`, so that a Ctrl-C or a SIGTERM
# while torch is still being imported ends as one during the work does: one line, and status 130 or 143.
import signal
import sys


def command_line() -> int:
    # A Ctrl-C or SIGTERM that lands inside an extension module's import (numpy's, torch's)
    # can leave it half loaded, or be swallowed by a library that retries the import: both
    # wait until the imports are done (about two seconds), and then interrupt as usual.
    held = hasattr(signal, "pthread_sigmask")
    heard = {signal.SIGINT, signal.SIGTERM}
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, heard)
    # no torch: the handler is in place at once (SIGTERM's default ends without a word)
    from transformer.engine.signals import Terminated, raise_terminated

    try:
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, raise_terminated)
            from transformer.engine.cli import main
        finally:
            if held:  # a Ctrl-C or SIGTERM sent meanwhile is raised here
                signal.pthread_sigmask(signal.SIG_UNBLOCK, heard)
        status = main()
        # the command has ended and said how: a Ctrl-C or SIGTERM during the
        # interpreter's tear-down would only end it without a word
        for signum in heard:
            signal.signal(signum, signal.SIG_IGN)
        return status
    except KeyboardInterrupt as e:  # before `cli.main` hears it (during the imports)
        if isinstance(e, Terminated):
            print("terminated (SIGTERM)", file=sys.stderr)
            return 128 + 15
        print("interrupted", file=sys.stderr)
        return 128 + 2


if __name__ == "__main__":
    raise SystemExit(command_line())
