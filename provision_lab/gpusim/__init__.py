"""gpusim: a faithful, stateful stand-in for nvidia-smi, nvidia-persistenced, dmesg and nv-fabricmanager (stdlib only,
Python 3.9+).

Its usage, environment and config: cli.py (what `gpusim` prints without arguments). Its modules, the programs
first, then what they share:

  cli           gpusim's own commands (init, reboot, set-driver, install, show) and main(), which runs
                nvidia-smi, nvidia-persistenced, dmesg or nv-fabricmanager by the name it is called by
  smi           nvidia-smi's command line and runs
  fields        --query-gpu and the other CSV queries
  report        -q, the full report
  table         the summary table, -L, --version
  topo          topo -m
  nvlink        nvlink -s, nvlink -e
  setters       -pm, -pl, -ac, -lgc, -lmc, -lmcd and their resets
  reset         -r: what holds a GPU, the driver's refusal, what a reset does
  helptext      the help texts, as captured
  persistenced  nvidia-persistenced
  dmesg         dmesg
  fabric        nv-fabricmanager, on an NVSwitch board
  faults        `gpusim fault`: a GPU off the bus, gone, a degraded link, ECC errors, a power brake, an NVLink
                down, ...
  recovery      the recovery action (gpu_recovery_action) its faults set, a reset or a boot ends
  gpu           one GPU (and its host) as nvidia-smi shows it
  state         the config and the state file, the persistence daemon's record
  kernel        the driver installed and the one loaded, boots, the kernel log
  models        the GPU models' figures (gpu_models.md, beside this package, sources each)
  env           where its files are (NVIDIA_SIM_*)
  errors        exit codes, shared messages, the simulator's own errors

Standard library and relative imports only: the package runs from a checkout (`python -m provision_lab.gpusim`,
`python provision_lab/gpusim`, or imported as gpusim by the wrappers `gpusim install` writes) and, on lab nodes,
from one zipapp file (provision_lab/simzip.py). A call's start is most of its cost, and the benchmarks time every
tool's nvidia-smi calls: so no dataclasses, typing, tempfile, socket or shutil at import (5-12 ms of CPU each; a
query takes about 40 ms in all on the lab's machine, a real nvidia-smi 21-48 ms on an H200).
"""

from .cli import COMMANDS, PROGRAMS, WRAPPER, main
from .env import ENV_DEFAULTS, env_path, proc_driver_path, ring_path
from .errors import NO_DRIVER, RC_SIM, Exit, SimError
from .faults import fall_off_bus
from .fields import GPU_FIELDS
from .kernel import CUDA_FOR_DRIVER, DEFAULT_DRIVER, kmsg
from .models import MODELS, volta_grid
from .persistenced import PERSISTENCED_FAILED
from .state import STATE_VERSION, healthy

__all__ = ["COMMANDS", "CUDA_FOR_DRIVER", "DEFAULT_DRIVER", "ENV_DEFAULTS", "Exit", "GPU_FIELDS", "MODELS", "NO_DRIVER",
           "PERSISTENCED_FAILED", "PROGRAMS", "RC_SIM", "STATE_VERSION", "SimError", "WRAPPER", "env_path",
           "fall_off_bus", "healthy", "kmsg", "main", "proc_driver_path", "ring_path", "volta_grid"]
