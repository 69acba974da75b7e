"""A Linux kernel of its own, booted in QEMU, for what this machine's kernel cannot show: cgroup
v2's CPU controller, where this machine runs v1 (its v1 ``cpu`` hierarchy cannot be let go:
unmounting it answers "target is busy").

The guest is Debian's kernel (its package unpacked into ``KERNEL_DIR``, not installed) with an
initramfs made here: a static busybox, the virtio and 9p modules, and an init that mounts
this machine's ``/`` read-only over 9p, gives it fresh ``/proc``, ``/sys``, ``/dev``, ``/tmp``
and ``/run`` and cgroup2 at ``/sys/fs/cgroup`` (every controller on it: the kernel has no v1
hierarchy), brings up loopback and a dummy interface with an address (getaddrinfo with
AI_ADDRCONFIG, as Slurm calls it, finds no host with loopback alone), takes this host's name,
and runs the caller's script chrooted there — the same
Python, packages and checkout as the host — with ``OUT`` (the caller's folder, writable) at
``/mnt``. QEMU emulates the CPU (TCG): this machine's ``/dev/kvm`` opens, but a guest on it
stalls at boot. The guest boots in ~5 s; Python starts in seconds there, not milliseconds.

Set up as ``.ci/run`` does: ``apt-get install qemu-system-x86 busybox-static`` and
``apt-get download`` the ``linux-image-*-amd64`` that ``linux-image-amd64`` depends on, then
``dpkg-deb -x`` it into ``KERNEL_DIR`` (``ADLOADER_VM_KERNEL_DIR``, ``/opt/adloader-vm`` by
default).
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KERNEL_DIR = Path(os.environ.get("ADLOADER_VM_KERNEL_DIR", "/opt/adloader-vm"))
QEMU = "qemu-system-x86_64"
BUSYBOX = Path("/bin/busybox")
# what mounting the host's root over virtio 9p takes, in an order that loads (each after
# what it needs; the init tries the rest again until a pass loads nothing more)
MODULES = ("drivers/virtio/virtio_ring", "drivers/virtio/virtio",
           "drivers/virtio/virtio_pci_legacy_dev", "drivers/virtio/virtio_pci_modern_dev",
           "drivers/virtio/virtio_pci", "fs/netfs/netfs", "fs/fscache/fscache",
           "net/9p/9pnet", "net/9p/9pnet_virtio", "fs/9p/9p",
           "drivers/net/dummy")  # an address besides loopback: getaddrinfo(AI_ADDRCONFIG) wants one
INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
left="{modules}"
for pass in 1 2 3 4 5; do
  next=""
  for m in $left; do insmod /lib/modules/$m.ko 2>/dev/null || next="$next $m"; done
  left="$next"
done
[ -n "$left" ] && echo "adloader-vm: modules not loaded:$left"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /host
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /host/mnt
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup
mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/shm
mount -t tmpfs shm /host/dev/shm
mount -t tmpfs tmp /host/tmp
mount -t tmpfs run /host/run
ip link set lo up
ip link add adl0 type dummy && ip addr add 10.254.0.1/24 dev adl0 && ip link set adl0 up
hostname "$(cat /host/etc/hostname)"
echo "adloader-vm: guest up"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
chroot /host /bin/sh /mnt/guest.sh > /host/mnt/guest.log 2>&1
echo "adloader-vm: guest exit $?"
sync
poweroff -f
"""


@dataclass
class GuestRun:
    """What one boot gave: the script's exit status (None: it never ran), its output (its
    ``guest.log``) and the console's."""

    exit_code: int | None
    log: str
    console: str


def kernel() -> tuple[Path, Path] | None:
    """The unpacked kernel's ``vmlinuz`` and its modules' folder, or None."""
    images = sorted((KERNEL_DIR / "boot").glob("vmlinuz-*"))
    if not images:
        return None
    version = images[-1].name.removeprefix("vmlinuz-")
    modules = KERNEL_DIR / "lib" / "modules" / version / "kernel"
    return (images[-1], modules) if modules.is_dir() else None


def missing() -> str | None:
    """What this machine lacks to boot the guest (None: nothing)."""
    if shutil.which(QEMU) is None:
        return f"no {QEMU} (apt-get install qemu-system-x86)"
    ldd = subprocess.run(["ldd", str(BUSYBOX)], capture_output=True, text=True) \
        if BUSYBOX.exists() else None
    if ldd is None or "not a dynamic executable" not in ldd.stdout + ldd.stderr:
        return f"no static {BUSYBOX} (apt-get install busybox-static)"
    if kernel() is None:
        return (f"no kernel unpacked in {KERNEL_DIR} (apt-get download linux-image-VERSION-amd64; "
                f"dpkg-deb -x it there; ADLOADER_VM_KERNEL_DIR names another folder)")
    return None


def needs_vm(tools: tuple[str, ...] = ()) -> None:
    """Skip (fail under CI=true: ``ci_rules.cannot``) where the guest cannot boot here, or
    where this machine lacks one of ``tools`` for the guest to run."""
    from ci_rules import cannot

    why = "not root (the guest's cgroups are made as root)" if os.geteuid() != 0 else missing()
    absent = [t for t in tools if shutil.which(t) is None]
    if why is None and absent:
        why = f"no {', '.join(absent)} for the guest to run"
    if why is not None:
        cannot(f"cannot boot the cgroup v2 guest: {why}")


def _initramfs(modules: Path, into: Path) -> Path:
    """The guest's initramfs (a newc cpio, gzipped), made from files copied under ``into``."""
    root = into / "initramfs"
    for d in ("bin", "proc", "sys", "dev", "host", "lib/modules"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for module in MODULES:
        shutil.copy2(modules / f"{module}.ko", root / "lib" / "modules")
    names = " ".join(Path(m).name for m in MODULES)
    init = root / "init"
    init.write_text(INIT.format(modules=names))
    init.chmod(0o755)
    listing = "\n".join(str(p.relative_to(root)) for p in sorted(root.rglob("*"))) + "\n"
    archive = subprocess.run([str(BUSYBOX), "cpio", "-o", "-H", "newc"], cwd=root,
                             input=listing.encode(), capture_output=True, check=True).stdout
    out = into / "initramfs.cpio.gz"
    out.write_bytes(gzip.compress(archive, compresslevel=1))
    return out


def boot(script: str, out: Path, timeout_s: float = 900.0, cpus: int = 2,
         memory_mb: int = 6144) -> GuestRun:
    """Boot the guest and run ``script`` (sh) in it, chrooted in this machine's ``/`` with
    ``out`` at ``/mnt``; waits for the guest to power off (``subprocess.TimeoutExpired``
    past ``timeout_s``)."""
    image, modules = kernel() or (None, None)
    if image is None:
        raise FileNotFoundError(missing())
    out.mkdir(parents=True, exist_ok=True)
    (out / "guest.sh").write_text(script)
    initrd = _initramfs(modules, out / ".vm")
    cmd = [QEMU, "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", str(cpus),
           "-m", str(memory_mb), "-kernel", str(image), "-initrd", str(initrd),
           "-append", "console=ttyS0 quiet panic=-1", "-nographic", "-no-reboot",
           "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,"
                      "multidevs=remap",
           "-virtfs", f"local,path={out},mount_tag=out,security_model=none"]
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                          timeout=timeout_s, stdin=subprocess.DEVNULL)
    console = proc.stdout + proc.stderr
    code = None
    for line in console.splitlines():
        if "adloader-vm: guest exit " in line:
            code = int(line.rsplit(" ", 1)[1])
    log = (out / "guest.log").read_text(errors="replace") if (out / "guest.log").exists() \
        else ""
    return GuestRun(code, log, console)


def python() -> str:
    """This interpreter's real path (the guest sees the host's files, not its shims)."""
    return os.path.realpath(sys.executable)


def pytest_in_guest(args: str, out: Path, setup: str = "",
                    timeout_s: float = 900.0) -> tuple[GuestRun, dict[str, str]]:
    """``python -m pytest ARGS`` on this checkout in the guest (under CI=true, after the sh
    lines ``setup``): the boot, and each test's outcome by name — passed, failure, error or
    skipped — from its JUnit report (none where no report was written)."""
    script = f"""{setup}cd {REPO}
export HOME=/tmp PYTHONDONTWRITEBYTECODE=1 CI=true
{python()} -m pytest -q -p no:cacheprovider {args} --junitxml=/mnt/junit.xml
"""
    run = boot(script, out, timeout_s=timeout_s)
    report = out / "junit.xml"
    outcomes: dict[str, str] = {}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            bad = [x for x in ("failure", "error", "skipped") if case.find(x) is not None]
            outcomes[case.get("name")] = bad[0] if bad else "passed"
    return run, outcomes
