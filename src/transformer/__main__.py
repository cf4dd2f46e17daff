# Hand-written, not exported from a notebook: `python -m transformer ...` and the `transformer` script
# run the course's command line, exported from notebooks/97_command_line.ipynb into
# transformer/engine/cli.py. It is imported here, inside `main`, so that a Ctrl-C while torch
# is still being imported ends as one during the work does: one line and status 130.
import sys


def command_line() -> int:
    try:
        from transformer.engine.cli import main

        return main()
    except KeyboardInterrupt:  # before `cli.main` hears it (during the imports)
        print("interrupted", file=sys.stderr)
        return 128 + 2


if __name__ == "__main__":
    raise SystemExit(command_line())
