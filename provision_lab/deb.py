"""A simulated Debian package of the lab: one record (Deb) per package, built into a real .deb with dpkg-deb.

A Deb says what dpkg and apt judge (name, version, dependencies, provides/conflicts/replaces), the files it
puts on a node, its postinst and prerm; the lab's apt repository (aptrepo.py) builds every one and indexes them, so
the nodes' own apt and dpkg install, upgrade, hold and remove them with real semantics.

Which packages the repository serves besides the drivers: debs.py (LAB_DEBS).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from provision_lab.system import run

REVISION = "-1provision1"  # the Debian revision of every simulated package: VERSION-1provision1


@dataclass(frozen=True)
class Built:
    """A file made when its package is built (a plugin compiled against the image's headers): its recipe is what
    the repository's key hashes (repr), make(out_dir) its bytes, given the directory the package is built into
    (the repository's, which holds the Debian packages fetched for it: aptrepo.ensure_repo)."""

    recipe: str
    make: Callable[[Path], bytes] = field(repr=False, compare=False)


FileContent = tuple[int, str | bytes | Built]  # (mode, content): text is written as UTF-8


@dataclass(frozen=True)
class Deb:
    """One simulated package. files: {path on the node: (mode, content)}; depends, provides, conflicts and
    replaces are control-field values as Debian writes them ("python3, nvidia-driver-580 (= 580.159.04-1)")."""

    name: str
    version: str
    depends: str = ""
    files: dict[str, FileContent] = field(default_factory=dict)
    postinst: str = ""
    prerm: str = ""
    description: str = ""
    provides: str = ""
    conflicts: str = ""
    replaces: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version.split(':')[-1]}_all.deb"  # no epoch in a file name, as Debian's pool

    def control(self) -> str:
        """DEBIAN/control: the fields dpkg and apt read; the description's first line is its summary, the rest
        its long text (a blank line becomes " .", as Debian's format wants)."""
        summary, _, rest = (self.description or f"{self.name} (simulated, provision lab)").partition("\n")
        fields = {"Package": self.name, "Version": self.version, "Architecture": "all",
                  "Maintainer": "provision lab <root@localhost>", "Depends": self.depends,
                  "Provides": self.provides, "Conflicts": self.conflicts, "Replaces": self.replaces,
                  "Section": "misc", "Priority": "optional", "Description": summary}
        lines = [f"{key}: {value}" for key, value in fields.items() if value]
        lines += [f" {line}" if line.strip() else " ." for line in rest.strip("\n").splitlines()]
        return "\n".join(lines) + "\n"


def build_deb(deb: Deb, out_dir: Path) -> Path:
    """out_dir/NAME_VERSION_all.deb, built with dpkg-deb (every file owned by root)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        files: dict[str, FileContent] = {"DEBIAN/control": (0o644, deb.control()), **deb.files}
        if deb.postinst:
            files["DEBIAN/postinst"] = (0o755, deb.postinst)
        if deb.prerm:
            files["DEBIAN/prerm"] = (0o755, deb.prerm)
        for path_in_package, (mode, content) in files.items():
            path = tree / path_in_package.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            content = content.make(out_dir) if isinstance(content, Built) else content
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
            path.chmod(mode)
        out = out_dir / deb.filename
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(out)])
    return out
