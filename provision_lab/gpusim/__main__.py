"""gpusim's command line as a program: `python -m provision_lab.gpusim ARGS`, or `python DIR ARGS` where DIR is
this package's directory (provision_lab/gpusim), as `python gpusim.py ARGS` ran the single file it once was.
A zipapp of the package (simzip.py) has a __main__ of its own: `python gpusim.pyz ARGS`."""

import importlib
import os
import sys

if __package__:  # python -m provision_lab.gpusim
    from . import main
else:  # python DIR: DIR itself is sys.path[0]; the package is imported, as gpusim, from the directory above it
    sys.path[0] = os.path.dirname(os.path.abspath(sys.path[0]))
    main = importlib.import_module("gpusim").main

sys.exit(main(sys.argv))
