import pathlib
import sys

# The SDK is used from its source tree, as componentize-py uses it (-p sdk-python).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
