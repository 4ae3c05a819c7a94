"""Training entry point (filled in by the end-to-end training work)."""
import sys

if __name__ == "__main__":
    sys.exit("meowjax: the training run is not implemented yet; see the open issues.")
