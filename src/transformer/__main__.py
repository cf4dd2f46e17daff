# Hand-written, not exported from a notebook: `python -m transformer ...` runs the course's command line.
# The command line itself (`main`) is exported from notebooks/10_training.ipynb into transformer/train.py.
from transformer.train import main

if __name__ == "__main__":
    raise SystemExit(main())
