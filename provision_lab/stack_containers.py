"""The NVIDIA Container Toolkit and DCGM in the lab: their packages, with the dependencies NVIDIA's have.

The toolkit is four packages of one release (../shared/reference/node-lifecycle-reference.md, 2.1):
nvidia-container-toolkit depends on nvidia-container-toolkit-base and libnvidia-container-tools at its own
version; -base carries nvidia-ctk. The lab's nvidia-ctk (CTK_SCRIPT, the node's python3) does what provision
asks of the real one:

  nvidia-ctk cdi generate --output=PATH       a CDI spec of the loaded driver (/proc/driver/nvidia/version): one
                                              device per /dev/nvidiaN and "all", the driver's libcuda and
                                              libnvidia-ml mounted by their versioned names, as the real one
                                              writes them; with no driver loaded it fails as the real one does
                                              ("failed to initialize NVML: Driver Not Loaded")
  nvidia-ctk runtime configure --runtime=docker|containerd
                                              runtimes.nvidia into /etc/docker/daemon.json (other keys kept); for
                                              containerd, as that release of the toolkit does: before 1.18 the
                                              runtime's table into /etc/containerd/config.toml itself, from 1.18 on
                                              into /etc/containerd/conf.d/99-nvidia.toml with "conf.d/*.toml" in
                                              config.toml's imports; the CRI plugin's name of the config's version
                                              (io.containerd.cri.v1.runtime in version 3, containerd 2)

NVIDIA_CTK_LAB_DRIVER=VERSION makes `cdi generate` write the spec of another driver: the `stale-cdi-spec` fault
(faults.py), a spec left from before a driver upgrade.

DCGM (reference, 9): datacenter-gpu-manager (3.x) and datacenter-gpu-manager-4-core with -4-cuda12/-4-cuda13
(4.x, each -cudaNN at the core's version), epoch 1 as NVIDIA's. Each ships the nvidia-dcgm unit, whose ExecStart
is a stand-in nv-hostengine (it records its version and stays up), and dcgmi, whose `-v` prints its own build info
and, while a host engine runs, the engine's, as DCGM's dcgmi/Version.cpp does (`--version`: its own version only).
"""

from __future__ import annotations

from provision_lab.deb import REVISION, Deb, FileContent

TOOLKIT_VERSIONS = ("1.17.7", "1.17.8")
STALE_DRIVER_ENV = "NVIDIA_CTK_LAB_DRIVER"
CDI_SPEC = "/var/run/cdi/nvidia.yaml"  # where NVIDIA's docs have `nvidia-ctk cdi generate` write it
DCGM_VERSIONS = ("3.3.6", "4.2.3")  # one DCGM 3, one DCGM 4
DCGM_CUDA_MAJORS = (12, 13)  # the lab's drivers: 570 (CUDA 12), 580 (CUDA 13)
HOSTENGINE_STATE = "/run/nvidia-dcgm.version"  # what the running stand-in host engine writes (its pid, version)

CTK_SCRIPT = r'''#!/usr/bin/python3
"""nvidia-ctk (simulated, provision lab): cdi generate, runtime configure."""
import glob, json, os, re, sys

def fail(message):
    print(f"ERRO[0000] {message}", file=sys.stderr)
    sys.exit(1)

def loaded_driver():
    try:
        line = open("/proc/driver/nvidia/version").readline()
    except OSError:
        line = ""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)\s", line + " ")
    return match.group(1) if match else None

def mount(path):
    return [f"  - containerPath: {path}", f"    hostPath: {path}", "    options: [ro, nosuid, nodev, bind]"]

def spec(driver):
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"), key=lambda p: int(p[len("/dev/nvidia"):]))
    lines = ["---", "cdiVersion: 0.5.0", "kind: nvidia.com/gpu", "devices:"]
    for node in nodes:
        lines += [f'- name: "{node[len("/dev/nvidia"):]}"', "  containerEdits:", "    deviceNodes:", f"    - path: {node}"]
    lines += ["- name: all", "  containerEdits:", "    deviceNodes:", *(f"    - path: {n}" for n in nodes)]
    lines += ["containerEdits:", "  env:", "  - NVIDIA_VISIBLE_DEVICES=void", "  deviceNodes:", "  - path: /dev/nvidiactl",
              "  mounts:"]
    for library in ("libcuda.so", "libnvidia-ml.so"):
        lines += mount(f"/usr/lib/x86_64-linux-gnu/{library}.{driver}")
    return "\n".join(lines) + "\n"

def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as out:
        out.write(text)
    os.replace(path + ".tmp", path)

def cdi_generate(args):
    output = next((a.split("=", 1)[1] for a in args if a.startswith("--output=")), None)
    driver = os.environ.get("@STALE@") or loaded_driver()
    if driver is None:
        fail("failed to generate CDI spec: failed to create device CDI specs: failed to construct device spec "
             "generators: failed to initialize NVML: Driver Not Loaded")
    print(f"INFO[0000] Using /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{driver}", file=sys.stderr)
    if output is None:
        sys.stdout.write(spec(driver))
        return
    write(output, spec(driver))
    print(f'INFO[0000] Generated CDI spec with version 0.5.0', file=sys.stderr)

VERSION = "@CTK_VERSION@"
CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
# The table nvidia-ctk writes (its --dry-run, NVIDIA/nvidia-container-toolkit#497), under the CRI plugin's name.
RUNTIME = """
        [plugins."@CRI@".containerd.runtimes.nvidia]
          privileged_without_host_devices = false
          runtime_engine = ""
          runtime_root = ""
          runtime_type = "io.containerd.runc.v2"

          [plugins."@CRI@".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
"""

def drop_ins():
    """From 1.18 on the toolkit writes a drop-in (pkg/config/engine/containerd/config_drop_in.go)."""
    return tuple(int(part) for part in VERSION.split(".")[:2]) >= (1, 18)

def containerd_configure():
    """The runtime's table in config.toml (before 1.18: appended here, where the real one rewrites the file in its
    own layout) or in the drop-in, config.toml then importing the drop-in's directory."""
    text = open(CONFIG).read() if os.path.exists(CONFIG) else ""
    version = re.search(r"^version\s*=\s*(\d+)", text, re.M)
    version = int(version.group(1)) if version else 2
    cri = "io.containerd.cri.v1.runtime" if version >= 3 else "io.containerd.grpc.v1.cri"
    table = RUNTIME.replace("@CRI@", cri)
    if not drop_ins():
        if "runtimes.nvidia]" not in text:
            write(CONFIG, (text or f"version = {version}\n") + table)
        return CONFIG
    # as 1.18.0 says it (NVIDIA/nvidia-container-toolkit#1404)
    print(f"INFO[0000] Using config version {version}", file=sys.stderr)
    print(f'INFO[0000] Using CRI runtime plugin name "{cri}"', file=sys.stderr)
    write(DROP_IN, f"version = {version}\n" + table)
    pattern = os.path.dirname(DROP_IN) + "/*.toml"
    if pattern not in text:
        imports = re.search(r"^imports\s*=\s*\[", text, re.M)
        text = (text[:imports.end()] + f'"{pattern}", ' + text[imports.end():] if imports else
                f'imports = ["{pattern}"]\n' + (text or f"version = {version}\n"))
        write(CONFIG, text)
    return DROP_IN

def runtime_configure(args):
    runtime = next((a.split("=", 1)[1] for a in args if a.startswith("--runtime=")), "docker")
    if runtime == "docker":
        path = "/etc/docker/daemon.json"
        try:
            config = json.load(open(path))
        except FileNotFoundError:
            config = {}
        config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
        write(path, json.dumps(config, indent=4) + "\n")
    elif runtime == "containerd":
        path = containerd_configure()
    else:
        fail(f"unrecognized runtime '{runtime}'")
    print(f"INFO[0000] Wrote updated config to {path}", file=sys.stderr)
    print(f"INFO[0000] It is recommended that {runtime} daemon be restarted.", file=sys.stderr)

words = sys.argv[1:]
if words[:2] == ["cdi", "generate"]:
    cdi_generate(words[2:])
elif words[:2] == ["runtime", "configure"]:
    runtime_configure(words[2:])
else:
    fail(f"the lab's nvidia-ctk does cdi generate and runtime configure only, not {' '.join(words)!r}")
'''.replace("@STALE@", STALE_DRIVER_ENV)

STUB = "#!/bin/sh\necho \"$0: simulated (provision lab): nothing runs containers here\" >&2\nexit 1\n"


def ctk_script(version: str) -> str:
    """The lab's nvidia-ctk of one toolkit release (its containerd configuration depends on it)."""
    return CTK_SCRIPT.replace("@CTK_VERSION@", version)


def toolkit(version: str) -> list[Deb]:
    """The toolkit's four packages at one release, depending on each other as NVIDIA's do."""
    full = version + REVISION
    about = f"(simulated, provision lab)\nNVIDIA Container Toolkit {version}, as the lab needs it."
    return [
        Deb("libnvidia-container1", full, description=f"NVIDIA container runtime library {about}",
            files={f"/usr/lib/x86_64-linux-gnu/libnvidia-container.so.{version}": (0o644, "simulated\n")}),
        Deb("libnvidia-container-tools", full, depends=f"libnvidia-container1 (>= {full})",
            description=f"NVIDIA container runtime library (command-line tools) {about}",
            files={"/usr/bin/nvidia-container-cli": (0o755, STUB)}),
        Deb("nvidia-container-toolkit-base", full, depends="python3",
            description=f"NVIDIA Container Toolkit Base {about}",
            files={"/usr/bin/nvidia-ctk": (0o755, ctk_script(version)), "/usr/bin/nvidia-container-runtime": (0o755, STUB)}),
        Deb("nvidia-container-toolkit", full,
            depends=f"nvidia-container-toolkit-base (= {full}), libnvidia-container-tools (= {full})",
            description=f"NVIDIA Container toolkit {about}",
            files={"/usr/bin/nvidia-container-runtime-hook": (0o755, STUB)}),
    ]


# DCGM's unit, as NVIDIA ships it (reference 9.2), its ExecStart the stand-in.
DCGM_UNIT = """\
[Unit]
Description=NVIDIA DCGM service

[Service]
User=root
PrivateTmp=false
Environment="DCGM_HOME_DIR=/var/log/nvidia-dcgm"
ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm
Restart=on-abort

[Install]
Alias=dcgm.service
WantedBy=multi-user.target
"""

HOSTENGINE = f"""#!/bin/sh
# nv-hostengine (simulated, provision lab): says its version while it runs, and runs until stopped.
echo "$$ @VERSION@" > {HOSTENGINE_STATE}
trap 'rm -f {HOSTENGINE_STATE}; exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
"""

# dcgmi's build info lines as DCGM prints them (common/DcgmBuildInfo.cpp.in, "Name : value"); the values the lab's.
BUILD_INFO = ("Version : %s\\nBuild ID : 1\\nBuild Date : 2025-01-01\\nBuild Type : Release\\n"
              "CPU Arch : x86_64\\n")
DCGMI = f"""#!/bin/sh
# dcgmi (simulated, provision lab): -v/--vv as DCGM's dcgmi/Version.cpp prints it (its build info, then the host
# engine's where one runs, nothing about one that does not), --version as its command-line library does.
case "$1" in
    -v|--vv) ;;
    --version) printf '\\ndcgmi  version: %s\\n\\n' @VERSION@; exit 0 ;;
    *) echo "the lab's dcgmi does -v and --version only" >&2; exit 1 ;;
esac
printf '{BUILD_INFO}' @VERSION@
if read -r pid version 2>/dev/null <{HOSTENGINE_STATE} && kill -0 "$pid" 2>/dev/null; then
    printf '\\nHostengine build info:\\n{BUILD_INFO}' "$version"
fi
"""


def dcgm_files(version: str) -> dict[str, FileContent]:
    return {"/usr/bin/nv-hostengine": (0o755, HOSTENGINE.replace("@VERSION@", version)),
            "/usr/bin/dcgmi": (0o755, DCGMI.replace("@VERSION@", version)),
            "/lib/systemd/system/nvidia-dcgm.service": (0o644, DCGM_UNIT)}


def dcgm(version: str) -> list[Deb]:
    """DCGM 3 as one package; DCGM 4 as -core (the host engine, dcgmi, the unit) and one -cudaNN per CUDA major."""
    # Versioned as NVIDIA's: epoch 1, and a Debian revision from DCGM 4 on ("1:3.3.6", "1:4.4.0-1").
    full = f"1:{version}" if version.startswith("3.") else f"1:{version}{REVISION}"
    about = f"(simulated, provision lab)\nDCGM {version}, as the lab needs it."
    if version.startswith("3."):
        return [Deb("datacenter-gpu-manager", full, files=dcgm_files(version),
                    description=f"NVIDIA Datacenter GPU Management Tools {about}")]
    core = "datacenter-gpu-manager-4-core"
    # NVIDIA's install guide removes DCGM 3 before 4 goes in: both ship dcgmi and nv-hostengine.
    return [Deb(core, full, files=dcgm_files(version), conflicts="datacenter-gpu-manager",
                description=f"NVIDIA Datacenter GPU Management Tools (core) {about}"),
            *(Deb(f"datacenter-gpu-manager-4-cuda{major}", full, depends=f"{core} (= {full})",
                  files={f"/usr/lib/x86_64-linux-gnu/datacenter-gpu-manager-4/cuda{major}/.simulated": (0o644, "\n")},
                  description=f"NVIDIA Datacenter GPU Management Tools (CUDA {major}) {about}")
              for major in DCGM_CUDA_MAJORS)]


def debs() -> list[Deb]:
    """The toolkit at each lab release, DCGM 3 and 4."""
    return [*(deb for version in TOOLKIT_VERSIONS for deb in toolkit(version)),
            *(deb for version in DCGM_VERSIONS for deb in dcgm(version))]
