# Hand-written, not exported from a notebook: `python -m transformer ...` and the `transformer` script
# run the course's command line, exported from notebooks/97_command_line.ipynb into
# transformer/engine/cli.py. It is imported here, inside `command_line`, so that a Ctrl-C while torch
# is still being imported ends as one during the work does: one line and status 130.
import signal
import sys


def command_line() -> int:
    # A Ctrl-C that lands inside an extension module's import (numpy's, torch's) can leave
    # it half loaded, or be swallowed by a library that retries the import: SIGINT waits
    # until the imports are done (about two seconds), and then interrupts as usual.
    held = hasattr(signal, "pthread_sigmask")
    try:
        if held:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            from transformer.engine.cli import main
        finally:
            if held:  # a Ctrl-C pressed meanwhile is raised here
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        status = main()
        # the command has ended and said how: a Ctrl-C or SIGTERM during the
        # interpreter's tear-down would only end it without a word
        for heard in (signal.SIGINT, signal.SIGTERM):
            signal.signal(heard, signal.SIG_IGN)
        return status
    except KeyboardInterrupt:  # before `cli.main` hears it (during the imports)
        print("interrupted", file=sys.stderr)
        return 128 + 2


if __name__ == "__main__":
    raise SystemExit(command_line())
