# Hand-written, not exported from a notebook: `python -m transformer ...` runs the course's command line,
# exported from notebooks/97_command_line.ipynb into transformer/engine/cli.py.
from transformer.engine.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
