"""python -m experiments.studies: see ``experiments.studies.runner``."""
from absl import app

from experiments.studies import runner

if __name__ == "__main__":
    runner.define_flags()
    app.run(runner.main)
