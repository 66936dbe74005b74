"""The GPU work of provision's site playbook (+ /etc/nccl.conf), as a pyinfra user writes it.

    pyinfra INVENTORY.py deploy.py -y --parallel N     (inventory: benchmarks/peers/run.py writes it)

One fact reads the GPUs; each setter runs only for the GPUs that differ (plain Python guards on
facts, the pyinfra idiom); files by files.put/files.template (pyinfra compares checksums). The
boot unit is enabled by `systemctl enable`, guarded by a fact: systemd.service(enabled=True)
cannot be used on lab nodes, whose facts (`systemctl show`) need a running systemd.
"""

from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.operations import files, server

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent.parent.parent / "templates"  # provision's own boot script and unit
UNIT = "provision-gpu-tuning.service"
FIELDS = ("index", "uuid", "persistence_mode", "power.limit", "clocks.applications.memory",
          "clocks.applications.graphics")


class Gpus(FactBase):
    """One dict per GPU: index, uuid, persistence, power_limit (W), clocks ("MEM,SM")."""

    def command(self):
        return f"nvidia-smi --query-gpu={','.join(FIELDS)} --format=csv,noheader,nounits"

    def process(self, output):
        gpus = []
        for line in output:
            index, uuid, persistence, power, mem, sm = (f.strip() for f in line.split(","))
            gpus.append({"index": index, "uuid": uuid, "persistence": persistence, "power_limit": float(power),
                         "clocks": f"{mem},{sm}"})
        return gpus


class UnitEnabled(FactBase):
    """True when the unit is enabled (`systemctl is-enabled` reads the unit files, no systemd needed)."""

    def command(self, unit):
        return f"systemctl is-enabled {unit} || true"

    def process(self, output):
        return bool(output) and output[0].strip() == "enabled"


def smi(name: str, indexes: list[str], *args: str) -> None:
    if indexes:
        server.shell(name=name, commands=[" ".join(["nvidia-smi", "-i", ",".join(indexes), *args])])


gpus = host.get_fact(Gpus)
power = host.data.gpu_power_limit
clocks = f"{host.data.gpu_clocks['mem']},{host.data.gpu_clocks['sm']}"
if host.data.gpu_persistence:
    smi("Persistence mode on", [g["index"] for g in gpus if g["persistence"] != "Enabled"], "-pm", "1")
smi("Power limit", [g["index"] for g in gpus if g["power_limit"] != float(power)], "-pl", str(power))
smi("Application clocks", [g["index"] for g in gpus if g["clocks"] != clocks], "-ac", clocks)

files.template(name="NCCL configuration", src=str(HERE / "templates" / "nccl.conf.j2"), dest="/etc/nccl.conf",
               user="root", group="root", mode="644")

files.directory(name="Boot settings directory", path="/etc/provision", user="root", group="root", mode="755")
conf = "".join(f"gpu={g['uuid']} index={g['index']} persistence={'on' if host.data.gpu_persistence else 'off'} "
               f"power_limit={power} clocks={clocks}\n" for g in gpus)
files.put(name="Boot settings, one line per GPU", dest="/etc/provision/gpu-tuning.conf",
          src=StringIO(f"# Managed by pyinfra for {host.name}: do not edit here.\n"
                       "# provision-gpu-tuning.service applies these at every boot, one line per GPU.\n" + conf),
          user="root", group="root", mode="644")
files.put(name="Boot script (the one provision ships)", src=str(SHIPPED / "provision-gpu-tuning.sh"),
          dest="/usr/local/sbin/provision-gpu-tuning", user="root", group="root", mode="755")
unit_file = files.template(name="Boot unit file", src=str(SHIPPED / "gpu-tuning.service.j2"),
                           dest=f"/etc/systemd/system/{UNIT}", user="root", group="root", mode="644")
# Only where systemd runs (lab nodes have none; `systemctl enable` works without it).
server.shell(name="Reload systemd", commands=["! [ -d /run/systemd/system ] || systemctl daemon-reload"],
             _if=unit_file.did_change)
if not host.get_fact(UnitEnabled, unit=UNIT):
    server.shell(name="Boot unit enabled", commands=[f"systemctl enable {UNIT}"])
